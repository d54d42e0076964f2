import Glibc

/// Where a desktop keeps its traces, from the daemon's own environment (it may run with a HOME
/// other than the user's: tests, root), and the path helpers the privacy code shares. None of
/// them follows a path into the vault: a lookup there from the daemon before its FUSE loop
/// runs would deadlock, and after an unmount it would reach the plain directory underneath.
public struct PrivacyPaths: Equatable, Sendable {
    /// `$XDG_CACHE_HOME/thumbnails` (XDG_CACHE_HOME must be absolute, else `$HOME/.cache`).
    public let cache: String
    /// Where the user's own thumbnail directory waits while the redirect is in place.
    public let aside: String
    /// `$HOME/.thumbnails`, written by tools older than the XDG layout: purged, not redirected.
    public let legacy: String?
    /// `$XDG_DATA_HOME/recently-used.xbel` (GTK 3/4, GLib), and GTK 2's `~/.recently-used.xbel`.
    public let recentFiles: [String]

    public static let asideSuffix = ".photovault-aside"

    public init?(environment env: [String: String]) {
        let home = env["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
        let cacheBase: String
        if let x = env["XDG_CACHE_HOME"], x.hasPrefix("/") { cacheBase = x }
        else if let h = home { cacheBase = PrivacyPaths.join(h, ".cache") }
        else { return nil }
        cache = PrivacyPaths.join(cacheBase, "thumbnails")
        aside = PrivacyPaths.join(cacheBase, "thumbnails" + PrivacyPaths.asideSuffix)
        legacy = home.map { PrivacyPaths.join($0, ".thumbnails") }
        var recent: [String] = []
        if let x = env["XDG_DATA_HOME"], x.hasPrefix("/") { recent.append(PrivacyPaths.join(x, "recently-used.xbel")) }
        else if let h = home { recent.append(PrivacyPaths.join(h, ".local/share/recently-used.xbel")) }
        if let h = home { recent.append(PrivacyPaths.join(h, ".recently-used.xbel")) }
        recentFiles = recent
    }

    // MARK: - Helpers

    static func join(_ a: String, _ b: String) -> String { a.hasSuffix("/") ? a + b : a + "/" + b }

    static func dirname(_ p: String) -> String {
        guard let i = p.lastIndex(of: "/") else { return "." }
        return i == p.startIndex ? "/" : String(p[..<i])
    }

    static func trimSlashes(_ p: String) -> String {
        var s = p
        while s.count > 1 && s.hasSuffix("/") { s.removeLast() }
        return s
    }

    static func lexists(_ p: String) -> Bool { var st = stat(); return lstat(p, &st) == 0 }

    /// A real directory, not a symlink to one.
    static func isDirectory(_ p: String) -> Bool {
        var st = stat()
        return lstat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func isRegularFile(_ p: String) -> Bool {
        var st = stat()
        return lstat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
    }

    static func readlink(_ p: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4097)
        let n = Glibc.readlink(p, &buf, 4096)
        guard n >= 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `mkdir -p` with mode 0700 (the cache holds private data).
    static func mkdirs(_ p: String) throws {
        if lexists(p) { return }
        let parent = dirname(p)
        if parent != p && !parent.isEmpty { try mkdirs(parent) }
        if mkdir(p, 0o700) != 0 && errno != EEXIST { throw ThumbnailGuardError.system("mkdir", errno) }
    }

    /// fsync of a directory, so a rename or unlink in it survives a crash.
    static func syncDirectory(_ p: String) {
        let fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { fsync(fd); close(fd) }
    }
}
