import Foundation
import CLinux
import PhotoVaultStore

/// `photovault mount --private-thumbnails`: keeps thumbnails of vault photos out of the
/// desktop's plaintext thumbnail cache (freedesktop Thumbnail Managing Standard,
/// `$XDG_CACHE_HOME/thumbnails/{normal,large,x-large,xx-large,fail}/<md5(uri)>.png`).
/// docs/THUMBNAILS.md has the measurements behind this design.
///
/// While the vault is mounted, `thumbnails` in the cache is a symlink to `.thumbnails` inside
/// the mount, so file managers store their thumbnails encrypted in the vault; the user's own
/// thumbnail directory waits beside it as `thumbnails.photovault-aside`. The swap is one
/// `renameat2(RENAME_EXCHANGE)` each way, so the cache path is never missing in between (a
/// thumbnailer running at that moment could otherwise create a fresh plaintext directory).
/// On activation and deactivation every thumbnail whose `Thumb::URI` names a file under the
/// mountpoint is deleted from the real cache (and the legacy `~/.thumbnails`).
///
/// After a crash the symlink points into an unmounted directory where `.thumbnails` does
/// not exist: the standard tools then fail to save (mkdir of `thumbnails/normal` through a
/// dangling symlink is ENOENT), which leaks nothing. The next activation or deactivation of
/// any guarded mount repairs it.
public final class ThumbnailGuard: @unchecked Sendable {
    /// Where the cache lives, from the daemon's own environment (the daemon may run with a
    /// HOME other than the user's: tests, root).
    public struct Paths: Equatable, Sendable {
        /// `$XDG_CACHE_HOME/thumbnails` (XDG_CACHE_HOME must be absolute, else `$HOME/.cache`).
        public let cache: String
        /// Where the user's own directory waits while the redirect is in place.
        public let aside: String
        /// `$HOME/.thumbnails`, written by tools older than the XDG layout: purged, not redirected.
        public let legacy: String?

        public init?(environment env: [String: String]) {
            let home = env["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            let base: String
            if let x = env["XDG_CACHE_HOME"], x.hasPrefix("/") { base = x }
            else if let h = home { base = ThumbnailGuard.join(h, ".cache") }
            else { return nil }
            cache = ThumbnailGuard.join(base, "thumbnails")
            aside = ThumbnailGuard.join(base, "thumbnails" + ThumbnailGuard.asideSuffix)
            legacy = home.map { ThumbnailGuard.join($0, ".thumbnails") }
        }
    }

    /// Name of the directory inside the vault that receives the redirected thumbnails.
    public static let vaultDirectoryName = ".thumbnails"
    static let asideSuffix = ".photovault-aside"

    public let paths: Paths
    /// Canonical mountpoint (realpath).
    public let mountpoint: String
    /// Path prefixes under which a `Thumb::URI` names a vault file: the mountpoint as given
    /// and as resolved (a URI keeps whatever path the file manager was shown).
    public let vaultPrefixes: [String]
    /// Symlink target: `<mountpoint>/.thumbnails`.
    public var redirectTarget: String { ThumbnailGuard.join(mountpoint, ThumbnailGuard.vaultDirectoryName) }

    private let log: @Sendable (String) -> Void
    private let state = NSLock()
    private var cancelled = false
    private var redirected = false
    private let workerDone = DispatchSemaphore(value: 0)
    private var workerStarted = false

    public init?(mountpoint: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                 log: @escaping @Sendable (String) -> Void) {
        guard let p = Paths(environment: environment) else { return nil }
        paths = p
        let given = mountpoint.hasPrefix("/") ? mountpoint
            : ThumbnailGuard.join(FileManager.default.currentDirectoryPath, mountpoint)
        let trimmed = ThumbnailGuard.trimSlashes(given)
        self.mountpoint = ThumbnailGuard.trimSlashes(RuntimeRegistry.canonical(trimmed))
        vaultPrefixes = Array(Set([trimmed, self.mountpoint])).sorted()
        self.log = log
    }

    /// Called by the mount daemon once the FUSE mount exists (before it serves requests):
    /// repairs a redirect left by a crash, purges old vault thumbnails, and starts the
    /// redirect, which completes as soon as the daemon answers requests. Returns nil (and
    /// logs why) when no cache directory can be named.
    public static func activate(mountpoint: String, log: @escaping @Sendable (String) -> Void) -> ThumbnailGuard? {
        guard let g = ThumbnailGuard(mountpoint: mountpoint, log: log) else {
            log("private thumbnails: neither XDG_CACHE_HOME nor HOME is set; nothing to guard")
            return nil
        }
        g.activate()
        return g
    }

    public func activate() {
        repairStale()
        report(purge(), when: "before mounting")
        guard let dev = ThumbnailGuard.liveMountDevice(mountpoint) else {
            log("private thumbnails: \(mountpoint) is not a live photovault mount; purge only")
            return
        }
        state.withLock { workerStarted = true }
        // The redirect creates `.thumbnails` through the mount, which needs the FUSE loop
        // that starts after this returns: it must not block the daemon's main thread.
        let t = Thread { [self] in
            defer { workerDone.signal() }
            redirect(expectedDevice: dev)
        }
        t.name = "photovault-thumbnails"
        t.start()
    }

    /// Called after the mount is gone (or about to go): waits for the redirect to finish or
    /// give up, restores the user's directory and purges every vault thumbnail from it.
    public func deactivate() {
        let started = state.withLock { () -> Bool in cancelled = true; return workerStarted }
        if started && workerDone.wait(timeout: .now() + 15) == .timedOut {
            log("private thumbnails: the redirect did not finish in time; restoring anyway")
        }
        restore(force: true)
        repairStale()
        report(purge(), when: "after unmounting")
    }

    /// True once the cache path is this mount's symlink (tests wait for it).
    public var isRedirected: Bool { state.withLock { redirected } }

    // MARK: - Redirect and restore

    private func redirect(expectedDevice dev: UInt64) {
        // An O_PATH descriptor of the mount's root: once taken while mounted, nothing done
        // through it can reach the plain directory underneath after an unmount.
        let root = pv_open(mountpoint, pv_o_path() | O_DIRECTORY | O_CLOEXEC, 0)
        guard root >= 0 else { log("private thumbnails: cannot open \(mountpoint): errno \(errno)"); return }
        defer { close(root) }
        var st = stat()
        guard fstat(root, &st) == 0, UInt64(st.st_dev) == dev else {
            log("private thumbnails: the mount went away before the redirect; purge only")
            return
        }
        if mkdirat(root, ThumbnailGuard.vaultDirectoryName, 0o700) != 0 && errno != EEXIST {
            // Read-only or locked vault: the redirect still points into the vault, where
            // saving then fails, which is the safe outcome.
            log("private thumbnails: cannot create \(ThumbnailGuard.vaultDirectoryName) in the vault (errno \(errno)); thumbnails will not be saved")
        }
        state.withLock {
            guard !cancelled else { return }
            do {
                try swapIn()
                redirected = true
                log("private thumbnails: \(paths.cache) now points into the vault")
            } catch {
                log("private thumbnails: redirect not done (\(error)); vault thumbnails are purged at unmount")
            }
        }
    }

    /// Puts the symlink in place of the cache directory, atomically.
    private func swapIn() throws {
        let c = paths.cache, a = paths.aside
        if ThumbnailGuard.readlink(c) == redirectTarget { return }   // left by a crash of this mount
        if ThumbnailGuard.lexists(a) {
            // Another guarded mount holds the redirect (a stale one was repaired already).
            throw ThumbnailGuardError.alreadyRedirected(ThumbnailGuard.readlink(c) ?? "?")
        }
        if !ThumbnailGuard.lexists(c) {
            try ThumbnailGuard.mkdirs(c)
        }
        guard symlink(redirectTarget, a) == 0 else { throw ThumbnailGuardError.system("symlink", errno) }
        if pv_renameat2(AT_FDCWD, a, AT_FDCWD, c, UInt32(PV_RENAME_EXCHANGE)) != 0 {
            let e = errno
            unlink(a)
            throw ThumbnailGuardError.system("renameat2(RENAME_EXCHANGE)", e)
        }
    }

    /// Undoes a redirect: ours (`force`), or any whose vault is no longer mounted.
    private func restore(force: Bool) {
        let c = paths.cache, a = paths.aside
        state.withLock { redirected = false }
        if let target = ThumbnailGuard.readlink(c), ThumbnailGuard.isRedirect(target) {
            let ours = target == redirectTarget
            let live = ThumbnailGuard.liveMountDevice(ThumbnailGuard.dirname(target)) != nil
            guard (ours && force) || !live else { return }
            if ThumbnailGuard.lexists(a) {
                if pv_renameat2(AT_FDCWD, a, AT_FDCWD, c, UInt32(PV_RENAME_EXCHANGE)) == 0 {
                    if ThumbnailGuard.readlink(a) != nil { unlink(a) }
                } else {
                    unlink(c)
                    rename(a, c)
                }
            } else {
                unlink(c)
            }
            return
        }
        // No redirect at the cache path but the user's directory still aside (the symlink
        // was removed by hand, or a tool made a new directory): bring it back.
        guard ThumbnailGuard.isDirectory(a) else { return }
        if !ThumbnailGuard.lexists(c) {
            rename(a, c)
        } else if ThumbnailGuard.isDirectory(c) {
            ThumbnailGuard.merge(a, into: c)
        }
    }

    private func repairStale() { restore(force: false) }

    // MARK: - Purge

    /// Deletes every thumbnail naming a vault file from the real cache directories (never
    /// through a symlink into a vault). Returns the paths removed.
    @discardableResult
    public func purge() -> [String] {
        var dirs: [String] = []
        for d in [paths.cache, paths.aside] + (paths.legacy.map { [$0] } ?? [])
        where ThumbnailGuard.isDirectory(d) || ThumbnailGuard.isUserSymlinkToDirectory(d) {
            dirs.append(d)
        }
        return ThumbnailPurge.purge(directories: dirs, vaultPrefixes: vaultPrefixes)
    }

    private func report(_ removed: [String], when: String) {
        // A count only: thumbnail names are hashes of vault paths.
        if !removed.isEmpty { log("private thumbnails: removed \(removed.count) vault thumbnail(s) from the cache \(when)") }
    }

    // MARK: - Helpers

    /// A symlink target of the form `<dir>/.thumbnails` is a redirect made by this guard.
    static func isRedirect(_ target: String) -> Bool {
        target.hasPrefix("/") && target.hasSuffix("/" + vaultDirectoryName)
    }

    /// The device number (st_dev) of the photovault FUSE mount at `path`, if one is mounted there.
    static func liveMountDevice(_ path: String) -> UInt64? {
        // The last (topmost) mount wins.
        let last = MountInfoEntry.all().last { $0.fsType == MountInfoEntry.photoVaultType && $0.mountpoint == path }
        let mm = last?.device.split(separator: ":") ?? []
        guard mm.count == 2, let major = UInt64(mm[0]), let minor = UInt64(mm[1]) else { return nil }
        return makedev(major: major, minor: minor)
    }

    /// glibc's makedev encoding (what stat's st_dev holds).
    static func makedev(major: UInt64, minor: UInt64) -> UInt64 {
        ((major & 0xfffff000) << 32) | ((major & 0xfff) << 8) | ((minor & 0xffffff00) << 12) | (minor & 0xff)
    }

    /// mountinfo escapes space, tab, newline and backslash as a backslash and three octal digits.
    static func unescapeMountinfo(_ s: String) -> String {
        var out = [UInt8](), b = Array(s.utf8), i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\"), i + 3 < b.count,
               let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                out.append(v); i += 4
            } else {
                out.append(b[i]); i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func join(_ a: String, _ b: String) -> String { a.hasSuffix("/") ? a + b : a + "/" + b }
    static func dirname(_ p: String) -> String { (p as NSString).deletingLastPathComponent }
    static func trimSlashes(_ p: String) -> String {
        var s = p
        while s.count > 1 && s.hasSuffix("/") { s.removeLast() }
        return s
    }

    static func lexists(_ p: String) -> Bool { var st = stat(); return lstat(p, &st) == 0 }

    /// A real directory, not a symlink to one. Never follows a symlink: the redirect's
    /// target is in the vault, and a lookup there from the daemon before its FUSE loop runs
    /// would deadlock.
    static func isDirectory(_ p: String) -> Bool {
        var st = stat()
        return lstat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// The user's own symlinked cache (say to a tmpfs): purged through the link. A redirect
    /// into a vault is not followed.
    static func isUserSymlinkToDirectory(_ p: String) -> Bool {
        guard let t = readlink(p), !isRedirect(t) else { return false }
        var st = stat()
        return stat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
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

    /// Moves every entry of `src` that `dst` lacks into `dst` (recursively for directories
    /// present in both), then removes what is left of `src` (duplicates only).
    static func merge(_ src: String, into dst: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: src)) ?? [] {
            let s = join(src, name), d = join(dst, name)
            if !lexists(d) { rename(s, d); continue }
            if isDirectory(s) && isDirectory(d) { merge(s, into: d) }
        }
        try? FileManager.default.removeItem(atPath: src)
    }
}

public enum ThumbnailGuardError: Error, Equatable, CustomStringConvertible {
    case alreadyRedirected(String)
    case system(String, Int32)

    public var description: String {
        switch self {
        case .alreadyRedirected(let t): return "the thumbnail cache already points to \(t)"
        case .system(let call, let e): return "\(call): \(String(cString: strerror(e)))"
        }
    }
}

/// Finds and deletes thumbnails of vault files by the `Thumb::URI` text chunk that every
/// thumbnail (and every failure marker under `fail/`) carries. Names are md5 hashes of the
/// URI, which cannot be inverted, and a purge after unmount no longer knows the files.
public enum ThumbnailPurge {
    /// Deletes, under `directories` (walked without following symlinks), every PNG whose
    /// `Thumb::URI` is a `file:` URI of a path at or under one of `vaultPrefixes`.
    /// Anything unreadable or without that chunk is left alone. Returns the removed paths.
    public static func purge(directories: [String], vaultPrefixes: [String]) -> [String] {
        var removed: [String] = []
        for d in directories { walk(d, depth: 0) { file in
            guard let uri = thumbnailURI(ofPNGAt: file), let path = localPath(ofURI: uri),
                  isUnder(path, vaultPrefixes) else { return }
            if unlink(file) == 0 { removed.append(file) }
        } }
        return removed
    }

    /// Whether `path` is one of `prefixes` or inside one.
    public static func isUnder(_ path: String, _ prefixes: [String]) -> Bool {
        prefixes.contains { p in path == p || path.hasPrefix(p == "/" ? p : p + "/") }
    }

    /// The local path of a `file:` URI (`file:///a%20b`, `file://localhost/a`), or nil.
    public static func localPath(ofURI uri: String) -> String? {
        var rest: Substring
        if uri.hasPrefix("file:///") { rest = uri.dropFirst(7) }
        else if uri.hasPrefix("file://localhost/") { rest = uri.dropFirst(16) }
        else { return nil }
        if let q = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<q] }
        guard let decoded = String(rest).removingPercentEncoding else { return nil }
        return normalize(decoded)
    }

    /// Collapses "//", "." and ".." lexically, so a crafted URI cannot hide a vault path.
    /// Never touches the filesystem: resolving symlinks (Foundation's standardizingPath
    /// calls readlink) would send a lookup into the vault, and the purge runs while the
    /// daemon is not answering requests yet (a deadlock) or after it unmounted.
    static func normalize(_ path: String) -> String {
        var parts: [Substring] = []
        for c in path.split(separator: "/", omittingEmptySubsequences: true) {
            if c == "." { continue }
            if c == ".." { if !parts.isEmpty { parts.removeLast() }; continue }
            parts.append(c)
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The `Thumb::URI` of a PNG file (tEXt, or uncompressed iTXt), or nil.
    public static func thumbnailURI(ofPNGAt path: String) -> String? {
        let fd = pv_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        guard let sig = readExactly(fd, 8), sig == [137, 80, 78, 71, 13, 10, 26, 10] else { return nil }
        for _ in 0..<256 {
            guard let head = readExactly(fd, 8) else { return nil }
            let len = Int(head[0]) << 24 | Int(head[1]) << 16 | Int(head[2]) << 8 | Int(head[3])
            let type = String(decoding: head[4..<8], as: UTF8.self)
            if type == "IEND" { return nil }
            if (type == "tEXt" || type == "iTXt") && len <= 1 << 16 {
                guard let body = readExactly(fd, len) else { return nil }
                if let uri = textValue(type: type, body: body, key: "Thumb::URI") { return uri }
                guard lseek(fd, 4, SEEK_CUR) >= 0 else { return nil }
            } else {
                guard lseek(fd, off_t(len + 4), SEEK_CUR) >= 0 else { return nil }
            }
        }
        return nil
    }

    static func textValue(type: String, body: [UInt8], key: String) -> String? {
        guard let z = body.firstIndex(of: 0), String(decoding: body[..<z], as: UTF8.self) == key else { return nil }
        var i = z + 1
        if type == "tEXt" {
            // Latin-1 by the PNG spec; URIs are ASCII.
            return String(body[i...].map { Character(Unicode.Scalar($0)) })
        }
        // iTXt: compression flag, method, language tag\0, translated keyword\0, UTF-8 text.
        guard i + 2 <= body.count, body[i] == 0 else { return nil }
        i += 2
        guard let l = body[i...].firstIndex(of: 0) else { return nil }
        guard let t = body[(l + 1)...].firstIndex(of: 0) else { return nil }
        return String(decoding: body[(t + 1)...], as: UTF8.self)
    }

    static func readExactly(_ fd: Int32, _ n: Int) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: n)
        var got = 0
        while got < n {
            let r = out.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, n - got) }
            if r < 0 && errno == EINTR { continue }
            if r <= 0 { return nil }
            got += r
        }
        return out
    }

    /// Regular files under `dir`, not following symlinks; the standard layout is two levels
    /// deep (`fail/<app>/x.png`), a few more are allowed for odd tools.
    static func walk(_ dir: String, depth: Int, _ body: (String) -> Void) {
        guard depth < 6, let d = opendir(dir) else { return }
        defer { closedir(d) }
        while let e = readdir(d) {
            let name = DirectoryEntryName.string(e)
            if name == "." || name == ".." { continue }
            let p = ThumbnailGuard.join(dir, name)
            var st = stat()
            guard lstat(p, &st) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFDIR: walk(p, depth: depth + 1, body)
            case S_IFREG: body(p)
            default: continue
            }
        }
    }
}
