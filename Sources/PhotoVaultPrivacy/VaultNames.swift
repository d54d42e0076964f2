/// The thumbnail names (`md5(file URI)`) of every entry of a vault, for the purge to
/// recognise thumbnails that carry no `Thumb::URI` (pcmanfm writes none). A thumbnail's name
/// cannot be inverted, and once the vault is unmounted its file names are unknown, so they are
/// computed at the mount, from the vault's paths (the daemon walks its ciphertext tree before
/// the FUSE mount serves anything: no kernel inode, no descriptor per entry). Only the hashes
/// are kept, never the paths.
public struct VaultNames: Sendable {
    /// Lowercase hex names, without `.png`.
    public private(set) var names: Set<String> = []
    /// Entries added (for the log), and whether the walk stopped before the end.
    public private(set) var entries = 0
    public var truncated = false

    public init() {}
    public init(names: Set<String>) { self.names = names }

    /// Entries past this are not looked at (a bound on the time the mount takes).
    public static let limit = 300_000
    /// Nor past this many seconds.
    public static let timeLimit = 5.0

    /// Adds the names of `relativePath` (from the vault's top, `/`-separated) through each of
    /// `prefixes` (the mountpoint as given and as resolved).
    public mutating func add(relativePath rel: String, prefixes: [String]) {
        entries += 1
        for n in FileURI.thumbnailNames(relativePath: rel, prefixes: prefixes) { names.insert(n) }
    }
}
