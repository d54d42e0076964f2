import Foundation
import CLinux

/// Keeps thumbnails of vault photos out of the desktop's plaintext thumbnail cache
/// (freedesktop Thumbnail Managing Standard,
/// `$XDG_CACHE_HOME/thumbnails/{normal,large,x-large,xx-large,fail}/<md5(uri)>.png`).
/// The default of `photovault mount` (`--no-private-thumbnails` turns it off).
/// docs/THUMBNAILS.md has the measurements behind this design, docs/PRIVACY.md the whole picture.
///
/// While the vault is mounted, `thumbnails` in the cache is a symlink to `.thumbnails` inside
/// the mount, so file managers store their thumbnails encrypted in the vault; the user's own
/// thumbnail directory waits beside it as `thumbnails.photovault-aside`. The swap is one
/// `renameat2(RENAME_EXCHANGE)` each way, so the cache path is never missing in between (a
/// thumbnailer running at that moment could otherwise create a fresh plaintext directory).
///
/// After the unmount the symlink stays for a quarantine (`sweep`, run later by another
/// process): it then points into the plain, empty mountpoint, where saving fails, so a
/// thumbnailer still busy with vault photos (Nautilus wrote failure markers up to 26 s after a
/// lock) saves nothing. Thumbnails already in the real cache are purged by name and by
/// `Thumb::URI` (`ThumbnailPurge`) when mounting, at the unmount and after the quarantine.
///
/// After a crash the symlink likewise points into an unmounted directory where the standard
/// tools fail to save (mkdir of `thumbnails/normal` through a dangling symlink is ENOENT),
/// which leaks nothing. The next activation or sweep of any mount repairs it.
public final class ThumbnailGuard: @unchecked Sendable {
    /// The device number (st_dev) of the photovault mount at a path, or nil when none is
    /// mounted there (the CLI reads /proc/self/mountinfo for it).
    public typealias MountProbe = @Sendable (String) -> UInt64?

    /// Name of the directory inside the vault that receives the redirected thumbnails.
    public static let vaultDirectoryName = ".thumbnails"

    public let paths: PrivacyPaths
    /// Canonical mountpoint (realpath).
    public let mountpoint: String
    /// The mountpoint as given and as resolved: a URI keeps whatever path the file manager
    /// was shown, and thumbnail names are hashes of URIs.
    public let vaultPrefixes: [String]
    /// Symlink target: `<mountpoint>/.thumbnails`.
    public var redirectTarget: String { PrivacyPaths.join(mountpoint, ThumbnailGuard.vaultDirectoryName) }

    private let probe: MountProbe
    private let log: @Sendable (String) -> Void
    private let state = NSLock()
    private var cancelled = false
    private var redirected = false
    private var collected = VaultNames()
    private let workerDone = DispatchSemaphore(value: 0)
    private var workerStarted = false

    /// `mountpoint`: canonical; `given`: as the user typed it, made absolute (the same, or nil).
    public init(paths: PrivacyPaths, mountpoint: String, given: String? = nil, probe: @escaping MountProbe,
                log: @escaping @Sendable (String) -> Void) {
        self.paths = paths
        self.mountpoint = PrivacyPaths.trimSlashes(mountpoint)
        let g = given.map { ThumbnailPurge.normalize(PrivacyPaths.trimSlashes($0)) } ?? self.mountpoint
        vaultPrefixes = Array(Set([g, self.mountpoint])).sorted()
        self.probe = probe
        self.log = log
    }

    /// Called by the mount daemon once the FUSE mount exists (before it serves requests), with
    /// the thumbnail names of the vault's entries: repairs a redirect left by a crash or a
    /// finished quarantine, purges old vault thumbnails, and starts the redirect, which
    /// completes as soon as the daemon answers requests.
    public func activate(names: VaultNames = VaultNames()) {
        state.withLock { collected = names }
        repairStale()
        // Thumbnails that an earlier unguarded session left: by Thumb::URI, and by name
        // (pcmanfm's carry no Thumb::URI).
        report(purge(names: names.names), when: "before mounting")
        guard let dev = probe(mountpoint) else {
            log("private thumbnails: \(mountpoint) is not a live photovault mount; purge only")
            return
        }
        state.withLock { workerStarted = true }
        // The redirect creates `.thumbnails` through the mount, which needs the FUSE loop
        // that starts after this returns: it must not block the daemon's main thread.
        let t = Thread { [self] in
            defer { workerDone.signal() }
            work(expectedDevice: dev)
        }
        t.name = "photovault-thumbnails"
        t.start()
    }

    /// Called after the mount is gone: waits for the worker to finish or give up, and purges
    /// every vault thumbnail from the real cache. The redirect stays (now pointing where
    /// nothing can be saved) until `sweep`, unless `restoreNow`. Returns the vault's
    /// thumbnail names, for the sweep.
    @discardableResult
    public func deactivate(restoreNow: Bool) -> VaultNames {
        let started = state.withLock { () -> Bool in cancelled = true; return workerStarted }
        if started && workerDone.wait(timeout: .now() + 15) == .timedOut {
            log("private thumbnails: the redirect did not finish in time")
        }
        if restoreNow { restore(force: true) }
        let names = state.withLock { collected }
        report(purge(names: names.names), when: "after unmounting")
        return names
    }

    /// After the quarantine (in the process that outlives the daemon): puts the user's
    /// directory back unless a live mount holds the redirect now, and purges once more.
    public func sweep(names: Set<String>) -> [String] {
        repairStale()
        return purge(names: names)
    }

    /// True once the cache path is this mount's symlink (tests wait for it).
    public var isRedirected: Bool { state.withLock { redirected } }

    // MARK: - Redirect and restore

    private func work(expectedDevice dev: UInt64) {
        redirect(expectedDevice: dev)
    }

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
        if PrivacyPaths.readlink(c) == redirectTarget { return }   // left by a crash or quarantine of this mountpoint
        if PrivacyPaths.lexists(a) {
            // Another live mount holds the redirect (a stale one was repaired already).
            throw ThumbnailGuardError.alreadyRedirected(PrivacyPaths.readlink(c) ?? "?")
        }
        if !PrivacyPaths.lexists(c) {
            try PrivacyPaths.mkdirs(c)
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
        if let target = PrivacyPaths.readlink(c), ThumbnailGuard.isRedirect(target) {
            let ours = target == redirectTarget
            let live = probe(PrivacyPaths.dirname(target)) != nil
            guard (ours && force) || !live else { return }
            if PrivacyPaths.lexists(a) {
                if pv_renameat2(AT_FDCWD, a, AT_FDCWD, c, UInt32(PV_RENAME_EXCHANGE)) == 0 {
                    if PrivacyPaths.readlink(a) != nil { unlink(a) }
                } else {
                    unlink(c)
                    rename(a, c)
                }
            } else {
                unlink(c)
            }
            PrivacyPaths.syncDirectory(PrivacyPaths.dirname(c))
            return
        }
        // No redirect at the cache path but the user's directory still aside (the symlink
        // was removed by hand, or a tool made a new directory): bring it back.
        guard PrivacyPaths.isDirectory(a) else { return }
        if !PrivacyPaths.lexists(c) {
            rename(a, c)
        } else if PrivacyPaths.isDirectory(c) {
            ThumbnailGuard.merge(a, into: c)
        }
    }

    private func repairStale() { restore(force: false) }

    // MARK: - Purge

    /// Deletes every thumbnail naming a vault file from the real cache directories (never
    /// through a symlink into a vault). Returns the paths removed.
    @discardableResult
    public func purge(names: Set<String> = []) -> [String] {
        var dirs: [String] = []
        for d in [paths.cache, paths.aside] + (paths.legacy.map { [$0] } ?? [])
        where PrivacyPaths.isDirectory(d) || ThumbnailGuard.isUserSymlinkToDirectory(d) {
            dirs.append(d)
        }
        return ThumbnailPurge.purge(directories: dirs, vaultPrefixes: vaultPrefixes, names: names)
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

    /// The user's own symlinked cache (say to a tmpfs): purged through the link. A redirect
    /// into a vault is not followed.
    static func isUserSymlinkToDirectory(_ p: String) -> Bool {
        guard let t = PrivacyPaths.readlink(p), !isRedirect(t) else { return false }
        var st = stat()
        return stat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// Moves every entry of `src` that `dst` lacks into `dst` (recursively for directories
    /// present in both), then removes what is left of `src` (duplicates only).
    static func merge(_ src: String, into dst: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: src)) ?? [] {
            let s = PrivacyPaths.join(src, name), d = PrivacyPaths.join(dst, name)
            if !PrivacyPaths.lexists(d) { rename(s, d); continue }
            if PrivacyPaths.isDirectory(s) && PrivacyPaths.isDirectory(d) { merge(s, into: d) }
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
