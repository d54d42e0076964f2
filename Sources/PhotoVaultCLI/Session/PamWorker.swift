import Foundation
import Glibc
import PhotoVaultCrypto
import PhotoVaultLock
import PhotoVaultSession
import PhotoVaultStore

/// The background half of `photovault pam` (`photovault __pam-worker USER [options]`, the
/// password on fd 3): becomes USER when started by root, opens the account with the login
/// password (`AccountStore.openWithLoginPassword`: login slot, else vault password, never
/// counted), then unlocks the account's locked mount or mounts the vault. Says nothing but
/// syslog lines that hold no secret; always exits 0.
enum PamWorker {
    struct Options {
        var mountpoint: String?
        var store: String?
        var idle: Double?
        var onLock: MountSettings.OnLock = .unmount
        var lockGrace: Double = 60
        var noMount = false
        var privateThumbnails = true   // as for photovault mount (docs/PRIVACY.md)

        init?(_ args: ArraySlice<String>) {
            var i = args.startIndex
            func next() -> String? { i += 1; return i < args.endIndex ? args[i] : nil }
            while i < args.endIndex {
                switch args[i] {
                case "--mountpoint": guard let v = next() else { return nil }; mountpoint = v
                case "--store": guard let v = next() else { return nil }; store = v
                case "--idle": guard let v = next(), let d = Defaults.parseDuration(v), d > 0 else { return nil }; idle = d
                case "--on-lock": guard let v = next(), let a = MountSettings.OnLock(rawValue: v) else { return nil }; onLock = a
                case "--lock-grace": guard let v = next(), let d = Defaults.parseDuration(v) else { return nil }; lockGrace = d
                case "--no-mount": noMount = true
                case "--private-thumbnails": privateThumbnails = true
                case "--no-private-thumbnails": privateThumbnails = false
                default: return nil
                }
                i += 1
            }
        }
    }

    static func main(_ args: [String]) -> Never {
        _ = Sodium.makeProcessNotDumpable()
        // The journal, and stderr for a worker run by hand (started by `pam`, it is /dev/null).
        let journal = Logger.syslog(), stderrLog = Logger.stderr()
        let log: @Sendable (String) -> Void = { journal($0); stderrLog($0) }
        let password = PamRequest.readPassword(3)
        close(3)
        guard let password, let user = args.first, let options = Options(args.dropFirst()) else {
            log("pam: nothing to do (no password, or a malformed line)")
            exit(0)
        }
        defer { password.wipe() }
        guard become(user) else {
            log("pam: not acting for that user (no such user, or run by another non-root user)")
            exit(0)
        }
        // The worker outlives the login's PAM conversation; it may not keep its caller's
        // working directory busy.
        _ = chdir("/")
        do { try open(user: user, password: password, options: options, log: log) } catch {
            log("pam: \(PhotoVaultCLI.describe(error).0)")
        }
        password.wipe()
        exit(0)
    }

    /// Runs as `user` from here on: as root (a display manager's PAM stack) the worker drops
    /// to that user for good (groups, gid, uid) before it reads anything of the user's; as
    /// any other user it acts only for itself. The environment pam_exec gives holds neither
    /// HOME nor XDG_RUNTIME_DIR: the user's home and /run/user/UID (when it is theirs) stand
    /// in, so the default store, mountpoint and runtime registry are the ones the user's
    /// session uses.
    static func become(_ user: String) -> Bool {
        guard let pw = getpwnam(user) else { return false }
        let uid = pw.pointee.pw_uid, gid = pw.pointee.pw_gid
        let home = String(cString: pw.pointee.pw_dir)
        if getuid() == 0 && uid != 0 {
            guard initgroups(pw.pointee.pw_name, gid) == 0, setgid(gid) == 0, setuid(uid) == 0,
                  setuid(0) != 0 else { return false }
            _ = Sodium.makeProcessNotDumpable()
        } else if getuid() != uid {
            return false
        }
        setenv("HOME", home, 1)
        setenv("USER", user, 1)
        setenv("LOGNAME", user, 1)
        unsetenv("XDG_RUNTIME_DIR")
        unsetenv("DBUS_SESSION_BUS_ADDRESS")
        SessionEnvironment.adoptUserRuntimeDirectory()
        return true
    }

    static func open(user: String, password: SecureBytes, options: Options, log: (String) -> Void) throws {
        let store = RuntimeRegistry.canonical(options.store ?? Defaults.storePath())
        let accounts = try AccountStore(layout: StoreLayout(root: store))
        let registry = RuntimeRegistry()
        let mounts = registry.entries().filter { $0.store == store }
        // Each mount's lock events, read before the (slow) key derivation: a lock that comes
        // while it runs wins, as for 'photovault unlock'.
        var seen: [String: UInt64] = [:]
        for e in mounts {
            if let r = try? ControlClient.send(path: registry.socketPath(forMountpoint: e.mountpoint),
                                               request: ControlRequest(command: "lock-events"), timeout: 3),
               r.ok, let n = UInt64(r.message) { seen[e.mountpoint] = n }
        }
        guard let opened = accounts.openWithLoginPassword(user: user, password: password) else {
            log("pam: the password given opens no vault of this user; nothing done")
            return
        }
        defer { opened.wipe() }
        let tag = RuntimeRegistry.treeTag(opened.treeID)
        if let e = mounts.first(where: { $0.treeTag == tag }) {
            guard MountFlow.lockState(e.mountpoint) == LockController.State.locked.rawValue else { return }
            let reply = try unlock(e.mountpoint, registry: registry, masterKey: opened.masterKey, seen: seen[e.mountpoint])
            log("pam: \(e.mountpoint): \(reply.ok ? "unlocked" : reply.message)")
            return
        }
        guard !options.noMount else { return }
        // At login the session the mount belongs to is still being opened: wait for it (on a
        // systemd machine, at most 30 s; the login goes on meanwhile), so that the mount is
        // registered where the session's commands look and watches the session's lock.
        let session = UserSession.await(uid: getuid(), timeout: 30)
        if let rt = session.runtimeDirectory, RuntimeRegistry.isUsableRuntimeDirectory(rt) {
            setenv("XDG_RUNTIME_DIR", rt, 1)
            setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=\(rt)/bus", 1)
        }
        if let id = session.sessionID { setenv("XDG_SESSION_ID", id, 1) }
        var settings = MountSettings(store: store, mountpoint: options.mountpoint ?? Defaults.mountpoint())
        settings.idle = options.idle
        settings.onLock = options.onLock
        settings.lockGrace = options.lockGrace
        settings.privateThumbnails = options.privateThumbnails
        try FuseDevice.check()
        try MountFlow.prepareMountpoint(settings.mountpoint, isDefault: options.mountpoint == nil)
        settings.mountpoint = RuntimeRegistry.canonical(settings.mountpoint)
        _ = try DaemonLauncher.launch(settings: settings, masterKey: opened.masterKey, treeID: opened.treeID)
        log("pam: mounted the vault at \(settings.mountpoint)")
    }

    /// The daemon's unlock request: the master key, then the lock-event count read before the
    /// key derivation (8 bytes big-endian), assembled in secure memory.
    static func unlock(_ mp: String, registry: RuntimeRegistry, masterKey: SecureBytes, seen: UInt64?) throws -> ControlReply {
        let request = SecureBytes(count: seen == nil ? 32 : 40)
        defer { request.wipe() }
        request.withUnsafeMutableBytes { out in
            masterKey.withUnsafeBytes { out.copyMemory(from: $0) }
            if let seen { withUnsafeBytes(of: seen.bigEndian) { UnsafeMutableRawBufferPointer(rebasing: out[32...]).copyMemory(from: $0) } }
        }
        let payload = request.withUnsafeBytes { ControlPayload(copying: $0) }
        defer { payload.wipe() }
        return try ControlClient.send(path: registry.socketPath(forMountpoint: mp),
                                      request: ControlRequest(command: "unlock", payload: payload), timeout: 10)
    }
}
