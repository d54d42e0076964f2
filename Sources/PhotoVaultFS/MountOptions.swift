/// How the vault is mounted. `allowOther` also turns on `default_permissions` so the
/// kernel enforces file modes for the other users.
public struct MountOptions: Sendable {
    public var mountpoint: String
    public var readOnly: Bool
    public var allowOther: Bool
    /// Shown by `mount` and `df` as the source and the subtype (`fuse.photovault`).
    public var fsName: String
    public var debug: Bool
    /// Lets the kernel gather small writes into large ones (one chunk rewrite instead of
    /// many). Off switches to write-through, where every write() reaches the store at once.
    public var writebackCache: Bool
    /// Entry and attribute cache lifetime in the kernel, seconds.
    public var cacheTimeout: Double

    public init(mountpoint: String, readOnly: Bool = false, allowOther: Bool = false,
                fsName: String = "photovault", debug: Bool = false,
                writebackCache: Bool = true, cacheTimeout: Double = 1.0) {
        self.mountpoint = mountpoint
        self.readOnly = readOnly
        self.allowOther = allowOther
        self.fsName = fsName
        self.debug = debug
        self.writebackCache = writebackCache
        self.cacheTimeout = cacheTimeout
    }
}
