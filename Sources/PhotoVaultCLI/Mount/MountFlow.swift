import Foundation
import PhotoVaultCrypto
import PhotoVaultLock
import PhotoVaultPrivacy
import PhotoVaultStore

/// `photovault mount`, `unmount`, `lock`, `unlock` and `status`.
enum MountFlow {
    static func mount(_ given: ParsedArguments) throws -> Int32 {
        let args = try given.mergingMountOptionWords()
        var settings = MountSettings(store: args.storePath, mountpoint: args.mountpoint)
        settings.readOnly = args.flag("read-only")
        settings.allowOther = args.flag("allow-other")
        settings.foreground = args.flag("foreground")
        settings.idle = try args.duration("idle")
        if let i = settings.idle, i <= 0 {
            throw args.usageError("--idle must be more than 0 (leave it out never to lock for inactivity)")
        }
        if let d = try args.duration("lock-grace") { settings.lockGrace = d }
        if let m = args.value("on-lock") {
            guard let v = MountSettings.OnLock(rawValue: m) else { throw args.usageError("--on-lock takes 'unmount' or 'stay'") }
            settings.onLock = v
        }
        settings.useDBus = !args.flag("no-dbus")
        if args.flag("private-thumbnails") && args.flag("no-private-thumbnails") {
            throw args.usageError("--private-thumbnails and --no-private-thumbnails contradict each other")
        }
        settings.privateThumbnails = !args.flag("no-private-thumbnails")
        settings.desktopPrivacy = ProcessInfo.processInfo.environment["PHOTOVAULT_DESKTOP_PRIVACY"] != "off"

        try FuseDevice.check()
        if settings.allowOther { try FuseConf.checkAllowOther() }
        // A mount inside the store came up and put a stray directory into it (inside a user
        // tree, one the daemon lists itself); a store inside the mountpoint would be hidden
        // from its own daemon by the mount.
        let (realMP, realStore) = (RuntimeRegistry.canonical(settings.mountpoint), RuntimeRegistry.canonical(settings.store))
        if realMP == realStore || realMP.hasPrefix(realStore + "/") {
            throw args.usageError("the mountpoint \(realMP) is inside the store \(realStore): choose a directory outside it")
        }
        if realStore.hasPrefix(realMP + "/") {
            throw args.usageError("the store \(realStore) is inside the mountpoint \(realMP): choose a directory outside it")
        }
        try waitForClosingDaemon(RuntimeRegistry().entry(forMountpoint: settings.mountpoint))
        let madeMountpoint = try prepareMountpoint(settings.mountpoint, isDefault: args.argument("MOUNTPOINT") == nil)
        settings.givenMountpoint = settings.mountpoint.hasPrefix("/") ? settings.mountpoint
            : StorePath.join(FileManager.default.currentDirectoryPath, settings.mountpoint)
        settings.mountpoint = RuntimeRegistry.canonical(settings.mountpoint)
        settings.store = RuntimeRegistry.canonical(settings.store)
        if settings.desktopPrivacy,
           let w = IndexedFolders.warning(mountpoint: settings.mountpoint, environment: ProcessInfo.processInfo.environment) {
            FileHandle.standardError.write(Data("photovault: warning: \(w)\n".utf8))
        }

        let layout = StoreLayout(root: settings.store)
        let user = try args.userName()
        // The password the first run just set, if it ran: the mount uses it instead of asking
        // a third, unlabelled time.
        var firstPassword: SecureBytes?
        do { _ = try layout.loadConfig() } catch StoreError.storeNotInitialised(let path) {
            do {
                guard let p = try offerFirstRun(layout: layout, user: user, args: args) else {
                    // Without a terminal (systemd, a display manager) the offer could not be made.
                    if isatty(0) != 1 || isatty(2) != 1 { throw FirstUseAdvice.noStore(path) }
                    throw StoreError.storeNotInitialised(path: path)
                }
                firstPassword = p
            } catch {
                // A first run that created nothing leaves no empty ~/PhotoVault behind either.
                if madeMountpoint { rmdir(settings.mountpoint) }
                throw error
            }
        }
        let accounts = try AccountStore(layout: layout)
        // 'no such account' before the password, as 'user passwd' does (it came after it).
        try UserCommands.requireAccount(accounts, user)
        let password: SecureBytes
        if let p = firstPassword { password = p } else {
            do { password = try PasswordInput().password(args) } catch CLIError.noTerminal {
                throw FirstUseAdvice.noPasswordSource()
            }
        }
        defer { password.wipe() }
        let opened = try accounts.open(user: user, password: password)
        defer { opened.masterKey.wipe() }
        let tag = RuntimeRegistry.treeTag(opened.treeID)
        if let other = RuntimeRegistry().entries().first(where: { $0.store == settings.store && $0.treeTag == tag }) {
            try waitForClosingDaemon(other)
            if RuntimeRegistry.isRunning(other.pid, startTime: other.startTime) {
                throw CLIError.vaultAlreadyMounted(mountpoint: other.mountpoint, pid: other.pid)
            }
        }
        if settings.foreground {
            return MountDaemon.serve(settings: settings, masterKey: opened.masterKey.copy(), treeID: opened.treeID,
                                     reporter: nil, log: Logger.stderr())
        }
        do {
            _ = try DaemonLauncher.launch(settings: settings, masterKey: opened.masterKey, treeID: opened.treeID)
        } catch let d as DaemonFailure {
            throw d
        }
        print("Mounted the vault of \(DisplayText.escape(user)) at \(DisplayText.escape(settings.mountpoint))")
        return 0
    }

    /// How long `mount` waits for a daemon that is going away.
    static let closingWait = 5.0

    /// A daemon that is going away (after `lock` with `--on-lock unmount`, the idle timer, a
    /// signal) still holds its mountpoint, registry entry and mount lock for a moment, or for as
    /// long as its lock grace lets files open for writing finish, or (its mount detached) until
    /// the files still open there are closed. `mount` used to answer "a vault is already
    /// mounted" / "this vault is already mounted" then, which `unmount` contradicted ("no vault
    /// is mounted"). It waits a little for such a daemon and, if it is still there, says so.
    static func waitForClosingDaemon(_ entry: RuntimeRegistry.Entry?) throws {
        guard let e = entry else { return }
        let reply = try? ControlClient.send(path: RuntimeRegistry().socketPath(forMountpoint: e.mountpoint),
                                            request: ControlRequest(command: "status"), timeout: 3)
        let state = stateField(reply?.message)
        let mounted = MountInfoEntry.at(e.mountpoint)?.fsType == MountInfoEntry.photoVaultType
        // Unreachable and no longer mounted: past its control socket, on its way out.
        guard state == LockController.State.grace.rawValue || state == LockController.State.closing.rawValue
                || (reply == nil && !mounted) else { return }
        let deadline = monotonicMs() + closingWait * 1000
        while RuntimeRegistry.isRunning(e.pid, startTime: e.startTime) && monotonicMs() < deadline { usleep(50_000) }
        if RuntimeRegistry.isRunning(e.pid, startTime: e.startTime) {
            throw CLIError.vaultClosing(mountpoint: e.mountpoint, pid: e.pid)
        }
    }

    /// The `state=` field of a daemon's status line (a `LockController.State` raw value).
    static func stateField(_ status: String?) -> String? {
        status?.split(separator: " ").first { $0.hasPrefix("state=") }.map { String($0.dropFirst(6)) }
    }

    /// The lock state of this user's daemon at `mp`; nil when it cannot be reached.
    static func lockState(_ mp: String) -> String? {
        let socket = RuntimeRegistry().socketPath(forMountpoint: mp)
        if let r = try? ControlClient.send(path: socket, request: ControlRequest(command: "state"), timeout: 3), r.ok {
            return r.message
        }
        // A daemon started before it knew "state": the same field of its status line.
        return stateField((try? ControlClient.send(path: socket, request: ControlRequest(command: "status"), timeout: 10))?.message)
    }

    /// The mountpoint must be an empty directory that is not already mounted; the default
    /// one (~/PhotoVault) is created when missing. Whether it was created here.
    @discardableResult
    static func prepareMountpoint(_ mp: String, isDefault: Bool) throws -> Bool {
        var st = stat()
        if stat(mp, &st) != 0 {
            let err = errno
            // A FUSE mount whose daemon died (SIGKILL, crash) stays until it is unmounted, and
            // every access to it fails with ENOTCONN.
            if err == ENOTCONN, let dead = MountInfoEntry.at(mp) {
                throw CLIError.deadMount(dead.mountpoint, fsType: dead.fsType)
            }
            // Each case says what is wrong (all used to say "is not an empty directory").
            guard err == ENOENT, isDefault else {
                throw CLIError.mountpointUnusable(mp, why: err == ENOENT ? "does not exist" : String(cString: strerror(err)))
            }
            guard mkdir(mp, 0o700) == 0 else { throw StoreError.posix("mkdir \(mp)") }
            return true
        }
        if isMountpoint(mp) { throw CLIError.alreadyMounted(mp) }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { throw CLIError.mountpointUnusable(mp, why: "is not a directory") }
        let entries: [String]
        do { entries = try FileManager.default.contentsOfDirectory(atPath: mp) } catch {
            throw CLIError.mountpointUnusable(mp, why: "cannot be listed")
        }
        guard entries.isEmpty else { throw CLIError.mountpointNotEmptyDirectory(mp) }
        return false
    }

    /// First launch on a fresh machine: offer to create the store and the account, as a
    /// photo-vault app does. Only on a terminal; scripts get the 'not initialised' error.
    /// Returns the new account's password (the caller mounts with it and wipes it), nil when
    /// the offer is not made or declined.
    static func offerFirstRun(layout: StoreLayout, user: String, args: ParsedArguments) throws -> SecureBytes? {
        guard isatty(0) == 1, isatty(2) == 1, (try? PasswordInput.source(args)) == .terminal else { return nil }
        FileHandle.standardError.write(Data("No PhotoVault store at \(DisplayText.escape(layout.root)).\nCreate it, with an account for '\(DisplayText.escape(user))'? [y/N] ".utf8))
        guard let answer = readLine(), answer.lowercased().hasPrefix("y") else { return nil }
        try AccountName.checkNew(user)
        // The password first, judged before anything is created: a mistyped confirmation or a
        // too-short password used to leave a store without an account, so the next mount no
        // longer offered this and said only "no such account".
        let password = try newPasswordWithRetries(args)
        var handedOver = false
        defer { if !handedOver { password.wipe() } }
        try layout.initialise(config: StoreConfig())
        // The same Argon2id cost as 'user add' (PHOTOVAULT_KDF_PROFILE), which it used to ignore.
        let recovery: RecoveryKey
        do {
            recovery = try AccountStore(layout: layout).add(user: user, password: password, deviceBound: false,
                                                            parameters: KDFProfile.forNewAccounts)
        } catch {
            // A store without its account made the next mount say only 'no such account'
            // instead of offering this again: the config that marks the store goes too.
            unlink(layout.configPath)
            throw error
        }
        defer { recovery.wipe() }
        // Nobody saw the key: the account goes again, and so does the config that marks the
        // store, so the next mount makes this offer again (as after a mistyped password).
        try UserCommands.showOrUndo(recovery, after: "Created the store and the account '\(user)'.\n"
                                    + "Recovery key (write it down; it is shown only once):\n\n",
                                    undone: "no store or account was created",
                                    ifUndoFails: "remove \(layout.root) and run the command again") {
            try AccountStore(layout: layout).remove(user: user, password: password, deletePhotos: true)
            guard unlink(layout.configPath) == 0 else { throw StoreError.posix("unlink \(layout.configPath)") }
        }
        handedOver = true
        return password
    }

    /// How many times the first run asks for a new password, as passwd(1) does.
    static let firstRunTries = 3

    /// A new password from the terminal, asked twice and judged by `PasswordPolicy`: a
    /// too-short or empty one, or a retype that differs, is said in one line and asked again,
    /// up to `firstRunTries` times (it used to end the whole set-up at the first slip); the
    /// last failure is thrown.
    static func newPasswordWithRetries(_ args: ParsedArguments) throws -> SecureBytes {
        var attempt = 1
        while true {
            do {
                let password = try PasswordInput().password(args, confirm: true)
                do { try PasswordPolicy.check(password) } catch { password.wipe(); throw error }
                return password
            } catch let error where attempt < firstRunTries && isRetryableNewPassword(error) {
                FileHandle.standardError.write(Data("\(PhotoVaultCLI.describe(error).0); try again\n".utf8))
                attempt += 1
            }
        }
    }

    static func isRetryableNewPassword(_ error: Error) -> Bool {
        switch error {
        case CLIError.passwordsDoNotMatch, StoreError.passwordTooShort, StoreError.emptyPassword: return true
        default: return false
        }
    }

    static func unmount(_ args: ParsedArguments) throws -> Int32 {
        let mp = RuntimeRegistry.canonical(args.mountpoint)
        // Only a PhotoVault mount: fusermount3 run by root unmounts whatever is there (a
        // tmpfs, /proc), and on /proc it said only "busy".
        guard let mounted = MountInfoEntry.at(mp) else { throw CLIError.notMounted(mp) }
        guard mounted.fsType == MountInfoEntry.photoVaultType else {
            throw CLIError.notPhotoVaultMount(mp, fsType: mounted.fsType)
        }
        if let owner = mounted.ownerUID, owner != getuid(), getuid() != 0 {
            // fusermount3 said only "entry for ... not found in /etc/mtab".
            throw CLIError.otherUsersMount(mp, uid: owner)
        }
        let entry = RuntimeRegistry().entry(forMountpoint: mp)
        let (status, output) = runTool(["fusermount3", "-u", mp])
        if status != 0 {
            if output.contains("busy") { throw CLIError.mountBusy(mp) }
            throw CLIError.failed("unmounting \(mp) failed: \(output.trimmedWhitespace())")
        }
        // Wait for the daemon to zero its keys and exit. Not with kill(pid, 0), which also
        // succeeds on the zombie it is until its new parent reaps it: under a parent that reaps
        // late (a container's init, a subreaper) every unmount took up to 10 s.
        if let e = entry {
            let deadline = monotonicMs() + 10_000
            while RuntimeRegistry.isRunning(e.pid, startTime: e.startTime) && monotonicMs() < deadline { usleep(20_000) }
            // It ends even while another mount namespace holds a copy of the mount (MountWatch);
            // one that does not must not be reported as unmounted: it may still hold the keys.
            if RuntimeRegistry.isRunning(e.pid, startTime: e.startTime) {
                throw CLIError.failed("\(mp) is unmounted, but its daemon (photovault process \(e.pid)) has not ended: "
                                      + "kill it (kill \(e.pid)) to make sure its keys are gone")
            }
        }
        return 0
    }

    /// A lock of a vault that is not mounted (a lock unmounted it, or it never was) or is
    /// locked already has reached what was asked: exit 0 with a note, as `lock` twice in a
    /// script must not fail. A dead mount, another user's, or one out of reach still fail.
    static func lock(_ args: ParsedArguments) throws -> Int32 {
        let mp = RuntimeRegistry.canonical(args.mountpoint)
        try RuntimeRegistry().checkDirectory()
        if RuntimeRegistry().entry(forMountpoint: mp) == nil, case .notMounted = unregistered(mp) {
            print("no vault is mounted at \(mp): nothing to lock")
            return 0
        }
        let reply = try control(mp, ControlRequest(command: "lock"))
        print(reply.message)
        return 0
    }

    static func unlock(_ args: ParsedArguments) throws -> Int32 {
        let mp = RuntimeRegistry.canonical(args.mountpoint)
        // As lock and status do: an untrusted registry lists nothing, and unlock then said
        // "no vault is mounted" about a mounted vault.
        try RuntimeRegistry().checkDirectory()
        guard let entry = RuntimeRegistry().entry(forMountpoint: mp) else {
            let why = unregistered(mp)
            // After `lock` (which unmounts by default) "no vault is mounted" did not say what to do.
            if case .notMounted = why { throw CLIError.notMountedToUnlock(mp) }
            throw why
        }
        let layout = StoreLayout(root: entry.store)
        let user = try args.userName()
        let accounts = try AccountStore(layout: layout)
        // 'no such account' before the password, as 'user passwd' does (it came after it).
        try UserCommands.requireAccount(accounts, user)
        // An unlocked vault needs no password: said at once, exit 0 (it asked for the
        // password, derived the key, and then failed with "the mount is not locked").
        if lockState(mp) == LockController.State.unlocked.rawValue {
            print("the vault at \(mp) is not locked")
            return 0
        }
        let password = try PasswordInput().password(args)
        defer { password.wipe() }
        // Lock events so far, read before the (slow) key derivation: a lock that comes while
        // it runs (the lid closed, the screen locked) makes the daemon refuse this unlock.
        // A daemon older than this question answers "unknown command"; it gets the key alone.
        let events = try control(mp, ControlRequest(command: "lock-events"))
        let seen: UInt64? = events.ok ? UInt64(events.message) : nil
        if events.ok && seen == nil { throw CLIError.failed("unexpected answer from the daemon of \(mp)") }
        let opened = try accounts.open(user: user, password: password)
        defer { opened.masterKey.wipe() }
        guard RuntimeRegistry.treeTag(opened.treeID) == entry.treeTag else {
            throw CLIError.failed("that account is not the one mounted at \(mp)")
        }
        // Key, then the count (8 bytes big-endian), assembled in secure memory.
        let request = SecureBytes(count: seen == nil ? 32 : 40)
        defer { request.wipe() }
        request.withUnsafeMutableBytes { out in
            opened.masterKey.withUnsafeBytes { out.copyMemory(from: $0) }
            if let seen { withUnsafeBytes(of: seen.bigEndian) { UnsafeMutableRawBufferPointer(rebasing: out[32...]).copyMemory(from: $0) } }
        }
        let payload = request.withUnsafeBytes { ControlPayload(copying: $0) }
        let reply = try control(mp, ControlRequest(command: "unlock", payload: payload))
        payload.wipe()
        guard reply.ok else {
            // With the daemon's exit status when it is one of ours (30: its keys found no
            // locked memory), else 1.
            let code = Int32(reply.status)
            throw DaemonFailure(code: ExitCodes.meaning(of: code) == nil ? ExitCodes.generic : code, message: reply.message)
        }
        print(reply.message)
        return 0
    }

    /// Every PhotoVault mount of this user, one line each: `MP<TAB>pid=N<TAB>store=S<TAB>state=...`.
    /// This session's registry first, then the daemons found through /proc (a vault mounted
    /// from another session, with another XDG_RUNTIME_DIR, which `status` did not list; its
    /// state through its own session's socket), then any other PhotoVault mount of this user
    /// in mountinfo: a dead one (its daemon killed) or one whose daemon is out of sight (a
    /// foreground mount: `store=unknown`).
    static func status(_ args: ParsedArguments) throws -> Int32 {
        try RuntimeRegistry().checkDirectory()
        let entries = RuntimeRegistry().entries()
        var listed = Set(entries.map(\.mountpoint))
        var lines: [String] = []
        for e in entries {
            let reply = try? ControlClient.send(path: RuntimeRegistry().socketPath(forMountpoint: e.mountpoint),
                                                request: ControlRequest(command: "status"), timeout: 3)
            lines.append("\(DisplayText.escape(e.mountpoint))\tpid=\(e.pid)\tstore=\(DisplayText.escape(e.store))\t\(reply?.message ?? "state=unknown")")
        }
        let mine = MountInfoEntry.all().filter { $0.fsType == MountInfoEntry.photoVaultType && $0.ownerUID == getuid() }
        let mounted = Set(mine.map(\.mountpoint))
        for d in MountedVaults.daemons() where mounted.contains(d.settings.mountpoint) && !listed.contains(d.settings.mountpoint) {
            listed.insert(d.settings.mountpoint)
            lines.append("\(DisplayText.escape(d.settings.mountpoint))\tpid=\(d.pid)\tstore=\(DisplayText.escape(d.settings.store))\t"
                         + (MountedVaults.status(of: d) ?? "state=unknown") + " (mounted from another session)")
        }
        for m in mine where !listed.contains(m.mountpoint) {
            listed.insert(m.mountpoint)
            var st = stat()
            if stat(m.mountpoint, &st) != 0 && errno == ENOTCONN {
                // Nothing registers a killed daemon's mount any more, but it is still in the way.
                let shown = DisplayText.escape(m.mountpoint)
                lines.append("\(shown)\tstate=dead (its daemon is gone: run 'photovault unmount \(shown)')")
            } else {
                lines.append("\(DisplayText.escape(m.mountpoint))\tstore=unknown\tstate=unknown (its daemon cannot be reached from here)")
            }
        }
        if lines.isEmpty { print("no vault mounted"); return 0 }
        for l in lines { print(l) }
        return 0
    }

    private static func control(_ mountpoint: String, _ request: ControlRequest) throws -> ControlReply {
        let mp = RuntimeRegistry.canonical(mountpoint)
        try RuntimeRegistry().checkDirectory()
        guard RuntimeRegistry().entry(forMountpoint: mp) != nil else { throw unregistered(mp) }
        do {
            return try ControlClient.send(path: RuntimeRegistry().socketPath(forMountpoint: mp), request: request, timeout: 10)
        } catch {
            throw CLIError.failed("cannot reach the daemon of \(mp): \(error)")
        }
    }

    /// Why `lock`/`unlock` find no mount of this user registered at `mp`: another user's
    /// PhotoVault mount, a dead one, or one whose daemon could not register (they used to say
    /// "no vault is mounted").
    private static func unregistered(_ mp: String) -> CLIError {
        guard let m = MountInfoEntry.at(mp), m.fsType == MountInfoEntry.photoVaultType else { return .notMounted(mp) }
        if let owner = m.ownerUID, owner != getuid() { return .otherUsersMount(mp, uid: owner) }
        var st = stat()
        if stat(mp, &st) != 0 && errno == ENOTCONN { return .deadMount(m.mountpoint, fsType: m.fsType) }
        // A live mount of this user whose daemon could not register (`mount` warned of it):
        // "no vault is mounted" was false.
        // Not only a socket that could not be made: a mount made from another session (another
        // XDG_RUNTIME_DIR: cron, sudo) is registered in that session's registry, not this one.
        return .failed("the vault at \(m.mountpoint) is mounted, but its daemon is not registered in "
                       + "\(RuntimeRegistry().directory) (it was mounted from another session, with another XDG_RUNTIME_DIR, "
                       + "or its control socket could not be made when it was mounted), so lock and unlock cannot reach it "
                       + "from here; 'photovault unmount \(m.mountpoint)' still works")
    }

    /// Runs a tool, returning its status and combined output.
    static func runTool(_ argv: [String]) -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = argv
        // Messages in English whatever the user's locale: callers look for strerror texts.
        var env = ProcessInfo.processInfo.environment
        env["LC_ALL"] = "C"
        p.environment = env
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        do { try p.run() } catch { return (127, "\(error)") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
