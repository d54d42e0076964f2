/// Everything the mount daemon needs besides the keys. Passed from `photovault mount` to the
/// background daemon as plain arguments (no secret is in here).
public struct MountSettings: Equatable, Sendable {
    public enum OnLock: String, Sendable { case unmount, stay }

    public var store: String
    public var mountpoint: String
    public var readOnly = false
    public var allowOther = false
    public var foreground = false
    public var idle: Double? = nil
    public var onLock: OnLock = .unmount
    public var lockGrace: Double = 60
    public var useDBus = true
    /// Thumbnails of vault photos go into the vault, not the plaintext cache (the default;
    /// `--no-private-thumbnails` turns it off).
    public var privateThumbnails = true
    /// Everything in docs/PRIVACY.md (thumbnails, recent files, the sweep after the unmount);
    /// off only with PHOTOVAULT_DESKTOP_PRIVACY=off (test rigs, servers without a desktop).
    public var desktopPrivacy = true
    /// The mountpoint as the user gave it, made absolute but not resolved (`mountpoint` is
    /// canonical): file managers name files by the path they were shown.
    public var givenMountpoint: String? = nil

    public init(store: String, mountpoint: String) {
        self.store = store
        self.mountpoint = mountpoint
    }

    var arguments: [String] {
        var a = ["store=\(store)", "mountpoint=\(mountpoint)", "on-lock=\(onLock.rawValue)", "lock-grace=\(lockGrace)"]
        if readOnly { a.append("read-only") }
        if allowOther { a.append("allow-other") }
        if let i = idle { a.append("idle=\(i)") }
        if !useDBus { a.append("no-dbus") }
        if !privateThumbnails { a.append("no-private-thumbnails") }
        if !desktopPrivacy { a.append("no-desktop-privacy") }
        if let g = givenMountpoint { a.append("given-mountpoint=\(g)") }
        return a
    }

    init?(arguments: [String]) {
        var kv: [String: String] = [:]
        for a in arguments {
            if let eq = a.firstIndex(of: "=") { kv[String(a[..<eq])] = String(a[a.index(after: eq)...]) } else { kv[a] = "" }
        }
        guard let s = kv["store"], let m = kv["mountpoint"] else { return nil }
        self.init(store: s, mountpoint: m)
        readOnly = kv["read-only"] != nil
        allowOther = kv["allow-other"] != nil
        idle = kv["idle"].flatMap(Double.init)
        onLock = kv["on-lock"].flatMap(OnLock.init(rawValue:)) ?? .unmount
        lockGrace = kv["lock-grace"].flatMap(Double.init) ?? 60
        useDBus = kv["no-dbus"] == nil
        privateThumbnails = kv["no-private-thumbnails"] == nil
        desktopPrivacy = kv["no-desktop-privacy"] == nil
        givenMountpoint = kv["given-mountpoint"]
    }
}
