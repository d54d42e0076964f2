import Foundation
import PhotoVaultCrypto
import PhotoVaultFS
import PhotoVaultLock
import PhotoVaultSession
import PhotoVaultPrivacy
import PhotoVaultStore
import CLinux

/// The mount daemon: owns the keys, the FUSE session and the lock sources of one mount.
/// Runs in the foreground (`mount -f`) or as the background child started by `DaemonLauncher`.
enum MountDaemon {
    /// Entry of the background child (`photovault __mount-daemon SETTINGS...`).
    static func childMain(_ arguments: [String]) -> Never {
        Sodium.makeProcessNotDumpable()
        let reporter = ReadyReporter(fd: 3)
        guard var settings = MountSettings(arguments: arguments) else {
            reporter.fail(code: 2, "bad daemon arguments"); exit(2)
        }
        settings.foreground = false
        // Before the first key: a locked-memory limit too small for the keys fails the mount
        // with one line and its own exit code (`serve` checks again, for `mount -f`).
        do { try SecureBytes.reserveLockedMemory() } catch {
            let e = StoreError.keyMemoryNotLocked
            reporter.fail(code: e.exitCode, e.description); exit(e.exitCode)
        }
        // The caller's working directory (a USB stick, a directory to be removed) must not stay
        // busy for as long as the vault is mounted; the paths are absolute (MountFlow made them
        // canonical).
        if settings.store.hasPrefix("/") && settings.mountpoint.hasPrefix("/") { _ = chdir("/") }
        // Keys arrive on fd 4: master key (32) || tree ID (16).
        let keyBuf = SecureBytes(count: 48)
        let n = keyBuf.withUnsafeMutableBytes { b -> Int in
            var got = 0
            while got < 48 {
                let r = read(4, b.baseAddress! + got, 48 - got)
                if r < 0 && errno == EINTR { continue }
                if r <= 0 { break }
                got += r
            }
            return got
        }
        close(4)
        // Descriptors inherited from the caller (pipes of a script, sockets) must not be
        // held open by a long-lived daemon.
        var fd: Int32 = 5
        while fd < 1024 { close(fd); fd += 1 }
        guard n == 48 else { reporter.fail(code: 1, "the mount daemon did not receive its keys"); exit(1) }
        let master = keyBuf.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<32])) }
        let treeID = keyBuf.withUnsafeBytes { Array($0[32..<48]) }
        keyBuf.wipe()
        let log = Logger.syslog()
        exit(serve(settings: settings, masterKey: master, treeID: treeID, reporter: reporter, log: log))
    }

    /// Mounts, reports readiness, runs until unmounted, wipes every key. Returns the exit code.
    static func serve(settings: MountSettings, masterKey: SecureBytes, treeID: [UInt8],
                      reporter: ReadyReporter?, log: @escaping @Sendable (String) -> Void) -> Int32 {
        Sodium.makeProcessNotDumpable()
        // A log line to a reader that is gone (`mount -f 2>&1 | tee log` after Ctrl-C, which
        // tee dies of too) must not kill the daemon before it unmounts: that left a dead
        // mount and lost the writes it had not flushed. Writes fail with EPIPE instead.
        signal(SIGPIPE, SIG_IGN)
        // Likewise a file-size limit (`ulimit -f`, limits.conf) reached by a write into the store:
        // the writer gets EFBIG. It killed the daemon, leaving a dead mount and losing the
        // writes it had not flushed.
        signal(SIGXFSZ, SIG_IGN)
        lockMemory(log: log)
        // Keys live in memory locked against swapping, or the vault is not mounted: libsodium
        // would otherwise hand out unlocked memory past RLIMIT_MEMLOCK without a word. This
        // locks a slab of every slot size (112 KiB); later files that find no locked memory
        // fail to open (ENOMEM and a log line), the mount stays.
        do { try SecureBytes.reserveLockedMemory() } catch {
            masterKey.wipe()
            return fail(reporter, StoreError.keyMemoryNotLocked)
        }
        let layout = StoreLayout(root: settings.store)
        let config: StoreConfig
        do { config = try layout.loadConfig() } catch {
            masterKey.wipe()
            return fail(reporter, error)
        }
        let keyring: UserKeyring
        do { keyring = try UserKeyring(masterKey: masterKey) } catch {
            masterKey.wipe()
            return fail(reporter, error)
        }
        masterKey.wipe()
        let tree = UserTree(root: layout.userTree(treeID), keyring: keyring, layout: config.layout)
        if let old = tree.restoreOwnerAccess() {
            Self.warn(String(format: "the vault's top folder had mode %03o (a chmod through an earlier mount), which shut you out of it; "
                        + "it now has %03o", old, old | 0o500), reporter: reporter, log: log)
        }
        // The daemon caches directory IDs, open files and headers, so nothing else may write
        // the tree while it is mounted. Offline writers (import, class set, fsck --repair)
        // take this lock exclusively: a shared lock held until unmount makes them fail with
        // 'store busy', while offline readers (export, fsck) still run (docs/OFFLINE.md).
        // Two daemons would race each other the same way, and the shared lock does not keep
        // them apart: the exclusive mount lock, taken first and only by daemons, does. Taken
        // before the shared one, so that finding the other daemon does not find this one.
        let mountLock: TreeLock?
        let treeLock: TreeLock
        do {
            do { mountLock = try TreeLock.mount(root: tree.root) } catch StoreError.storeBusy {
                throw TreeLockHolder.alreadyMounted(treeRoot: tree.root, store: settings.store,
                                                    treeTag: RuntimeRegistry.treeTag(treeID))
            }
            treeLock = try TreeLock(root: tree.root, mode: .shared)
            // A root whose `.pvdir` is damaged or of an unknown version used to mount (exit
            // 0, "Mounted") and then answer every listing with EIO; import and export say why.
            try tree.checkRoot()
            // What the drive under the store can do, tried now rather than at the first mkdir
            // (BackingCapabilities), in the store's directory rather than the tree (where a
            // probe that rclone keeps from removing its files would be fsck's to report);
            // a read-only one is tried again when a change needs it.
            if let caps = try? BackingCapabilities.probeAgain(path: settings.store), !caps.missing.isEmpty {
                log("the store's file system has no \(caps.missing.joined(separator: ", ")): see docs/STORAGE.md")
            }
        } catch {
            keyring.wipeAll()
            return fail(reporter, error)
        }
        var options = MountOptions(mountpoint: settings.mountpoint, readOnly: settings.readOnly,
                                   allowOther: settings.allowOther)
        options.logsPlaintextPaths = settings.foreground
        // Experiment knob for benchmarks (PERFORMANCE.md): the kernel's writeback cache.
        if ProcessInfo.processInfo.environment["PHOTOVAULT_WRITEBACK_CACHE"] == "1" { options.writebackCache = true }
        // And the read-ahead window (0: the kernel's default, what a mount by a non-root user gets).
        if let kb = ProcessInfo.processInfo.environment["PHOTOVAULT_READ_AHEAD_KB"].flatMap({ Int($0) }) { options.readAheadKB = kb }
        // And write-only handles through the page cache, as before change 25.
        if ProcessInfo.processInfo.environment["PHOTOVAULT_DIRECT_WRITES"] == "0" { options.directWrites = false }
        // And the background-request limit (0: the kernel's 12, as before change 26).
        if let n = ProcessInfo.processInfo.environment["PHOTOVAULT_MAX_BACKGROUND"].flatMap({ Int($0) }), n >= 0 { options.maxBackground = n }
        // And the request threads under SCHED_BATCH (1, change 33, the default until run L3)
        // or the default policy (0, the default now).
        switch ProcessInfo.processInfo.environment["PHOTOVAULT_BATCH_WORKERS"] {
        case "1": options.batchWorkers = true
        case "0": options.batchWorkers = false
        default: break
        }
        // Signals are watched from before the mount: one that came between the mount and the
        // start of the watcher (SIGTERM from a shutdown, Ctrl-C on `mount -f`) killed the
        // daemon and left a dead mount. Until the lock controller exists they are held.
        let early = EarlySignals()
        let signals = SignalWatcher(handler: { early.deliver($0) })
        signals.start()
        let fs: VaultFileSystem
        let mountpointLock = MountpointLock(settings.mountpoint)
        do {
            defer { mountpointLock.release() }
            fs = try VaultFileSystem(tree: tree, options: options, log: log)
            try fs.mount()
        } catch {
            signals.stop()
            keyring.wipeAll()
            return fail(reporter, error)
        }
        let registry = RuntimeRegistry()
        let canonicalMP = RuntimeRegistry.canonical(settings.mountpoint)
        let controller = LockController(fs: fs, settings: settings, log: log)
        // Under systemd (`mount -f` as a Type=notify unit) `systemctl status` shows the lock
        // state: checked after every lock event and every control request (lock, unlock).
        let status = settings.foreground && SystemdNotifier.isActive ? DaemonStatus(controller, canonicalMP) : nil
        let handler: @Sendable (LockReason) -> Void = { reason in
            controller.handle(reason)
            status?.update()
        }
        signals.settle()   // a signal handled by now may still be on its way to `early`
        let held = early.attach(handler)
        let stoppedBy = held.lazy.compactMap { r -> Int32? in if case .terminate(let sig) = r { return sig } else { return nil } }.first
        var idle: IdleTimer? = nil
        if let t = settings.idle {
            let timer = IdleTimer(timeout: t) { handler(.idle) }
            fs.onActivity = { timer.touch() }
            controller.onUnlocked = { timer.touch() }
            timer.start()
            idle = timer
        }
        var bus: BusLockWatcher? = nil
        if settings.useDBus {
            // A delay inhibitor only while unlocked: after a lock it is given up on purpose,
            // and one from a logind that (re)appears meanwhile is taken at the unlock.
            let w = BusLockWatcher(configuration: LockWatcherConfiguration(takeSleepInhibitor: true),
                                   onLock: handler, log: log,
                                   wantsSleepInhibitor: { controller.currentState == .unlocked })
            controller.releaseSleepInhibitor = { w.releaseSleepInhibitor() }
            controller.takeSleepInhibitor = { w.takeSleepInhibitor() }
            w.start()
            bus = w
            // Said where a screen lock could exist, once per session and kind, and not to a
            // mount that locks on --idle: every mount of a script or an ssh session printed it.
            if let warning = Self.busWarning(unreachable: w.unreachableBuses) {
                if settings.idle == nil && Self.screenLockPossible(ProcessInfo.processInfo.environment)
                    && Self.firstTime(warning, in: registry) {
                    Self.warn(warning, reporter: reporter, log: log)
                } else {
                    log("warning: " + warning)   // the journal still has it
                }
            }
        }
        var control: ControlSocketServer? = nil
        var keeper: RegistrationKeeper? = nil
        do {
            try registry.ensureDirectory()
            let server = ControlSocketServer(path: registry.socketPath(forMountpoint: canonicalMP), allowedUID: getuid(),
                                             handler: { req in
                                                 defer { status?.update() }
                                                 return ControlCommands.handle(req, controller: controller, fs: fs, treeRoot: tree.root)
                                             },
                                             log: log)
            try server.start()
            control = server
            let entry = RuntimeRegistry.Entry(mountpoint: canonicalMP, store: RuntimeRegistry.canonical(settings.store),
                                              pid: getpid(), treeTag: RuntimeRegistry.treeTag(treeID),
                                              startTime: RuntimeRegistry.processStat(getpid())?.startTime)
            keeper = RegistrationKeeper(server: server, registry: registry, entry: entry, log: log)
            try registry.register(entry)
        } catch {
            // Said by `photovault mount` itself, not only in the journal: the mount came up, but
            // lock, unlock and status will answer "no vault is mounted" for it.
            let warning = "control socket unavailable: \(error) ('photovault lock', 'unlock' and 'status' will not reach this mount)"
            Self.warn(warning, reporter: reporter, log: log)
        }
        let privacy = settings.desktopPrivacy
            ? DesktopPrivacy(mountpoint: canonicalMP, given: settings.givenMountpoint, thumbnails: settings.privateThumbnails,
                             probe: PrivacySweeper.probe, log: log)
            : nil
        if settings.desktopPrivacy && privacy == nil { log("desktop privacy: neither XDG_CACHE_HOME nor HOME is set; nothing to guard") }
        var vaultNames = VaultNames()
        if let p = privacy, p.wantsVaultNames {
            // From the ciphertext tree, not through the mount: a walk through FUSE would make
            // the kernel remember every entry (a descriptor each in this daemon).
            let prefixes = p.vaultPrefixes
            vaultNames.truncated = !tree.walkPlainPaths(maxEntries: VaultNames.limit, deadline: monotonicMs() / 1000 + VaultNames.timeLimit) {
                // The vault's own thumbnails are not photos anyone makes thumbnails of.
                if $0 != ThumbnailGuard.vaultDirectoryName && !$0.hasPrefix(ThumbnailGuard.vaultDirectoryName + "/") {
                    vaultNames.add(relativePath: $0, prefixes: prefixes)
                }
            }
        }
        privacy?.activate(names: vaultNames)
        if let p = privacy { controller.onLocked = { p.locked() } }
        log("mounted \(canonicalMP)")
        if let sig = stoppedBy {
            // Told to stop while it mounted: `photovault mount` hears of no mount, and none stays.
            log("signal \(sig) before the mount was ready: unmounting")
            reporter?.fail(code: 1, "the mount daemon was stopped by signal \(sig) (\(String(cString: strsignal(sig)))) "
                           + "before the mount was ready; nothing is mounted")
            controller.shutDown()
            fs.requestExit()
        } else if let r = reporter, !r.succeed() {
            // `photovault mount` is gone before it heard of the mount (Ctrl-C while it waited):
            // the user was told of no mount, so there is none. (The write used to kill the
            // daemon with SIGPIPE and leave a dead mount.)
            log("photovault mount exited before the mount was ready: unmounting")
            controller.shutDown()
            fs.requestExit()
        }
        if !settings.foreground { detachStdio() }
        if settings.foreground && stoppedBy == nil {
            // A `Type=notify` unit (`mount -f` under systemd): the mount is in the mount table and
            // requests to it wait for the loop below, so units ordered after this one find the
            // vault there. Only the foreground process is the unit's main process.
            SystemdNotifier.ready(status: DaemonStatus.text(.unlocked, canonicalMP))
        }
        for r in held where stoppedBy == nil { handler(r) }   // a lock signal (SIGUSR1) that came early
        keeper?.start()

        // Everything after the loop, done once: by this thread when the loop ends, or by the
        // mount watch when the loop cannot end (another namespace keeps the connection).
        let ending = DaemonEnding()
        let finish = {
            if settings.foreground { SystemdNotifier.stopping(status: "Unmounting \(canonicalMP) and zeroing its keys") }
            if let p = privacy { PrivacySweeper.handOver(p.deactivate(), privacy: p, settings: settings, log: log) }
            controller.shutDown()   // wipes the file system's keys; no unlock can follow
            keyring.wipeAll()
            signals.stop()
            idle?.stop()
            bus?.stop()
            keeper?.stop()
            control?.stop()
            registry.unregister(mountpoint: canonicalMP)
            treeLock.release()
            mountLock?.release()
            log("unmounted \(canonicalMP); keys zeroed")
        }
        let watch = MountWatch(mountpoint: canonicalMP)
        watch?.start {
            // Unmounted here, by whatever means. The keys go first; the loop then ends by itself
            // when that was the last copy of the mount. Otherwise (a copy in another mount
            // namespace, a file open in a lazily unmounted mount) the process ends, and with
            // its /dev/fuse descriptor the kernel aborts the connection: every copy answers
            // ENOTCONN from then on, and the user can mount again.
            log("the mount at \(canonicalMP) was unmounted: zeroing the keys")
            controller.shutDown()
            keyring.wipeAll()
            fs.mountLeftNamespace()
            if ending.loopEnded.wait(timeout: .now() + MountDaemon.loopEndWait) == .success { return }
            guard ending.claim() else { return }
            log("the mount lives on elsewhere (another mount namespace, or a file open in a detached mount): ending its connection")
            finish()
            _exit(0)
        }

        let code = fs.run()
        ending.loopEnded.signal()
        watch?.stop()
        // The watch may be finishing already: it ends the process when done.
        guard ending.claim() else { while true { pause() } }
        finish()
        return code
    }

    /// How long the mount watch gives the request loop to end by itself after an unmount.
    static let loopEndWait = 1.0

    /// A warning `photovault mount` prints (the journal's log when mounted in the foreground).
    static func warn(_ message: String, reporter: ReadyReporter?, log: (String) -> Void) {
        if let r = reporter { r.warn(message) } else { log("warning: " + message) }
    }

    /// What the user loses when a bus cannot be watched (shown by `photovault mount`, not
    /// only in the journal: a vault that will not lock with the screen must say so).
    static func busWarning(unreachable: [String]) -> String? {
        let advice = "; use --idle or 'photovault lock'"
        switch (unreachable.contains("system"), unreachable.contains("session")) {
        case (true, true): return "no D-Bus: the vault will not lock with the screen or on suspend" + advice
        case (true, false): return "no system D-Bus: the vault will not lock on suspend or with logind's session lock" + advice
        case (false, true): return "no session D-Bus: the vault will not lock with the screen saver" + advice
        case (false, false): return nil
        }
    }

    /// Whether this session could have a screen that locks: a graphical one (DISPLAY,
    /// WAYLAND_DISPLAY, XDG_SESSION_TYPE x11 or wayland) or one on a logind seat (XDG_SEAT).
    /// An ssh login, cron or a container has none, and a warning about screen locks only
    /// taught its users to ignore warnings.
    static func screenLockPossible(_ env: [String: String]) -> Bool {
        let set = { (k: String) in !(env[k] ?? "").isEmpty }
        return set("DISPLAY") || set("WAYLAND_DISPLAY") || set("XDG_SEAT")
            || ["x11", "wayland", "mir"].contains(env["XDG_SESSION_TYPE"] ?? "")
    }

    /// True the first time `warning` is asked about in this session (a marker file, named by
    /// the warning's hash, made in the runtime directory with O_EXCL); also when that
    /// directory cannot take it (better said twice than never).
    static func firstTime(_ warning: String, in registry: RuntimeRegistry) -> Bool {
        guard (try? registry.ensureDirectory()) != nil else { return true }
        var h: UInt64 = 0xcbf2_9ce4_8422_2325   // FNV-1a: stable across runs, unlike hashValue
        for b in warning.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        let path = registry.directory + "/said-" + String(h, radix: 16)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd); return true }
        return errno != EEXIST
    }

    private static func fail(_ reporter: ReadyReporter?, _ error: Error) -> Int32 {
        let (code, message) = ErrorReport.describe(error)
        if let r = reporter { r.fail(code: code, message) } else { FileHandle.standardError.write(Data("photovault: \(message)\n".utf8)) }
        return code
    }

    private static func detachStdio() {
        let fd = open("/dev/null", O_RDWR)
        if fd >= 0 { dup2(fd, 0); dup2(fd, 1); dup2(fd, 2); if fd > 2 { close(fd) } }
    }
}

/// Makes the mount's registration (control socket and entry) again when it disappears: the
/// runtime directory goes at the user's last logout (systemd removes /run/user/<uid>) while a
/// lingering daemon keeps the vault mounted, and tmp cleaners age /tmp/photovault-<uid>.
/// Without it `status` said "no vault mounted" about a mounted, unlocked vault, and
/// `lock` could not reach it.
final class RegistrationKeeper: @unchecked Sendable {
    static let interval = 2.0
    private let server: ControlSocketServer
    private let registry: RuntimeRegistry
    private let entry: RuntimeRegistry.Entry
    private let log: @Sendable (String) -> Void
    private let stopRequest = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private var started = false

    init(server: ControlSocketServer, registry: RuntimeRegistry, entry: RuntimeRegistry.Entry,
         log: @escaping @Sendable (String) -> Void) {
        self.server = server
        self.registry = registry
        self.entry = entry
        self.log = log
    }

    func start() {
        started = true
        let t = Thread { [self] in
            defer { finished.signal() }
            var failing = false
            while stopRequest.wait(timeout: .now() + Self.interval) == .timedOut {
                let socketGone = !Self.exists(server.path)
                guard socketGone || !Self.exists(registry.entryPath(forMountpoint: entry.mountpoint)) else { continue }
                do {
                    if socketGone {
                        server.stop()
                        try registry.ensureDirectory()
                        try server.start()
                    }
                    try registry.register(entry)
                    log("registered again in \(registry.directory) (it had been removed)")
                    failing = false
                } catch {
                    if !failing { log("cannot register again in \(registry.directory): \(error)") }
                    failing = true
                }
            }
        }
        t.name = "photovault-registry"
        t.start()
    }

    func stop() {
        guard started else { return }
        started = false
        stopRequest.signal()
        finished.wait()
    }

    private static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }
}

/// Whichever of the request loop and the mount watch ends the daemon (see `serve`).
final class DaemonEnding: @unchecked Sendable {
    let loopEnded = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var claimed = false

    /// True for the first caller only.
    func claim() -> Bool {
        lock.withLock { defer { claimed = true }; return !claimed }
    }
}

/// The STATUS= line a `Type=notify` unit shows (`systemctl status`): the mount and its lock
/// state, sent when the state differs from the one last sent.
final class DaemonStatus: @unchecked Sendable {
    private let controller: LockController
    private let mountpoint: String
    private let lock = NSLock()
    private var sent: LockController.State = .unlocked   // READY=1 said so

    init(_ controller: LockController, _ mountpoint: String) {
        self.controller = controller
        self.mountpoint = mountpoint
    }

    func update() {
        lock.lock(); defer { lock.unlock() }
        let now = controller.currentState
        guard now != sent else { return }
        sent = now
        SystemdNotifier.status(Self.text(now, mountpoint))
    }

    static func text(_ state: LockController.State, _ mountpoint: String) -> String {
        switch state {
        case .unlocked: return "Mounted the vault at \(mountpoint), unlocked"
        case .locked: return "Mounted the vault at \(mountpoint), locked: files of class complete are unreadable "
            + "until 'photovault unlock'"
        case .grace, .closing: return "Locked: unmounting \(mountpoint) once the files open for writing there are done"
        }
    }
}

/// Signals that come while the daemon mounts, held until its lock controller takes them.
final class EarlySignals: @unchecked Sendable {
    private let lock = NSLock()
    private var handler: (@Sendable (LockReason) -> Void)?
    private var held: [LockReason] = []

    func deliver(_ reason: LockReason) {
        lock.lock()
        guard let h = handler else { held.append(reason); lock.unlock(); return }
        lock.unlock()
        h(reason)
    }

    /// Hands every later signal to `handler`; returns those that came before.
    func attach(_ handler: @escaping @Sendable (LockReason) -> Void) -> [LockReason] {
        lock.lock(); defer { lock.unlock() }
        self.handler = handler
        defer { held = [] }
        return held
    }
}

/// The daemon's side of the ready pipe (fd 3): exactly one line, then closed.
final class ReadyReporter: @unchecked Sendable {
    private var fd: Int32
    init(fd: Int32) { self.fd = fd }
    /// False when nobody is reading any more (the waiting `photovault mount` is gone).
    @discardableResult
    func succeed() -> Bool { send("OK\n") }
    /// A line the waiting `photovault mount` prints as a warning (before OK).
    func warn(_ message: String) {
        guard fd >= 0 else { return }
        let b = Array("WARN \(DisplayText.escape(message))\n".utf8)
        _ = b.withUnsafeBytes { write(fd, $0.baseAddress!, b.count) }
    }
    /// `message` is one line: an error's, which `PhotoVaultCLI.describe` escaped already.
    func fail(code: Int32, _ message: String) { send("ERR \(code) \(message)\n") }
    @discardableResult
    private func send(_ s: String) -> Bool {
        guard fd >= 0 else { return false }
        let b = Array(s.utf8)
        let n = b.withUnsafeBytes { write(fd, $0.baseAddress!, b.count) }
        close(fd)
        fd = -1
        return n == b.count
    }
}

/// Control-socket commands of a live mount (`photovault lock`, `status`, `unlock`).
enum ControlCommands {
    static let lockedSinceMessage = "the vault was locked again while the key was being derived "
        + "(screen lock, suspend or 'photovault lock'); it stays locked: run 'photovault unlock' again"

    static func handle(_ req: ControlRequest, controller: LockController, fs: VaultFileSystem, treeRoot: String) -> ControlReply {
        switch req.command {
        case "lock":
            // A second lock has nothing left to do: it says so (the answer was "locked" either way).
            let before = controller.currentState
            controller.handle(.controlSocket)
            return .success(before == .unlocked ? "locked" : "already locked")
        case "status":
            let files = ClassCensus.count(treeRoot: treeRoot)
            let open = fs.statusCounts()
            let parts = ProtectionClass.allCases.map { "\($0.name)=\(files[$0] ?? 0)" }
            let openParts = ProtectionClass.allCases.map { "\(open[$0] ?? 0)" }
            return .success("state=\(controller.currentState.rawValue) files: " + parts.joined(separator: " ")
                            + " open handles: " + openParts.joined(separator: "/"))
        case "state":
            // The lock state alone (status also counts every file's class, reading each header).
            return .success(controller.currentState.rawValue)
        case "lock-events":
            return .success("\(controller.lockEventCount)")
        case "unlock":
            // The master key, then (from a client that asked "lock-events" first) that count,
            // 8 bytes big-endian.
            guard req.payload.count == 32 || req.payload.count == 40 else { return .failure("bad unlock request") }
            defer { req.payload.wipe() }
            // The master key's copy too needs locked memory, which may be what ran out.
            guard let mk = try? req.payload.withUnsafeBytes({ try SecureBytes(lockedCopying: UnsafeRawBufferPointer(rebasing: $0[0..<32])) }) else {
                return noLockedMemoryReply()
            }
            let seen: UInt64? = req.payload.count == 40
                ? req.payload.withUnsafeBytes { $0[32..<40].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } } : nil
            req.payload.wipe()
            defer { mk.wipe() }
            switch controller.unlock(masterKey: mk, seenLockEvents: seen) {
            case .unlocked: return .success("unlocked")
            case .notLocked: return .failure("the mount is not locked")
            case .wrongKey: return .failure("that key does not open the vault mounted here")
            case .lockedSince: return .failure(ControlCommands.lockedSinceMessage)
            case .noLockedMemory: return noLockedMemoryReply()
            }
        default:
            return .failure("unknown command \(req.command)")
        }
    }

    /// An unlock whose keys found no locked memory (the daemon's RLIMIT_MEMLOCK used up by
    /// the keys of open files, or lowered since the mount): the mount stays, locked. Exit code
    /// 30, and what to do about it: the daemon's own limit is the one that counts, so the
    /// caller's `ulimit -l` is no help.
    static func noLockedMemoryReply() -> ControlReply {
        let pid = getpid()
        let limit = CryptoError.lockedMemoryLimit.map { "is \($0), all in use" } ?? "is reached"
        return .failure("the vault stays locked: the mount daemon (pid \(pid)) cannot keep its keys in locked memory "
                        + "(its locked-memory limit, ulimit -l, \(limit)): close files open in the vault or raise its limit "
                        + "(prlimit --pid \(pid) --memlock=BYTES; LimitMEMLOCK= in a systemd unit), then run 'photovault unlock' again",
                        status: UInt8(StoreError.keyMemoryNotLocked.exitCode))
    }
}

/// Log sinks: stderr in the foreground, syslog (the journal) in the background.
enum Logger {
    static func stderr() -> @Sendable (String) -> Void {
        // write(2), not FileHandle, whose write traps on an error (EPIPE, EIO).
        { msg in
            let line = Array("photovault: \(DisplayText.escape(msg))\n".utf8)
            _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress!, $0.count) }
        }
    }
    /// openlog(3) keeps the pointer, not the text: a Swift string passed to it directly is a
    /// temporary, and every message went out without its tag (`[PID]: ...`, nothing for
    /// `journalctl -t photovault` to find). This copy lives as long as the process.
    nonisolated(unsafe) static let syslogIdent = strdup("photovault")

    static func syslog() -> @Sendable (String) -> Void {
        openlog(syslogIdent, LOG_PID, LOG_USER)
        return { msg in
            DisplayText.escape(msg).withCString { m in pv_syslog(LOG_NOTICE, m) }
        }
    }
}

extension MountDaemon {
    /// Plaintext crosses buffers outside `sodium_malloc` (libfuse's request buffers, read
    /// replies, names): the whole daemon is locked in RAM so none of it reaches swap. Only
    /// with CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK: under a finite limit, MCL_FUTURE
    /// would make a later mmap (a new worker's stack, a malloc arena) fail once the locked
    /// size reached it. Without it nothing is locked; that matters only when swap is on,
    /// and then the daemon log says so.
    static func lockMemory(log: @Sendable (String) -> Void) {
        var lim = rlimit()
        getrlimit(__rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue), &lim)
        let unlimited = lim.rlim_cur == rlim_t.max
        var reason = "ulimit -l is \(lim.rlim_cur / 1024) KiB and CAP_IPC_LOCK is not held"
        if unlimited || hasIPCLockCapability() {
            let err = Sodium.lockAllMemory()
            if err == 0 { SecretBuffer.noteWholeProcessLocked(); return }
            reason = "mlockall: " + String(cString: strerror(err))
        }
        if swapIsActive() {
            log("warning: memory not locked (\(reason)): plaintext buffers may reach swap; use encrypted swap or run the mount with CAP_IPC_LOCK")
        }
    }

    /// CAP_IPC_LOCK (bit 14) in the effective set, from /proc/self/status's CapEff.
    static func hasIPCLockCapability() -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let mask = UInt64(line.dropFirst("CapEff:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return mask & (1 << 14) != 0
    }

    /// True when /proc/swaps lists a swap device or file (its first line is a header).
    static func swapIsActive() -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/swaps", encoding: .utf8) else { return false }
        return text.split(separator: "\n").count > 1
    }
}

/// Process-level entry points used by `main.swift`.
public enum ProcessSetup {
    /// Every photovault process handles passwords or keys: none may be dumped or ptraced.
    /// And none keeps a key in memory that can be swapped: a locked-memory limit too small
    /// for even the first key (`ulimit -l 0`) ends the command with one line and exit code
    /// 30, not a crash (later keys fail the operation that needs them the same way).
    public static func hardenProcess() {
        Sodium.makeProcessNotDumpable()
        SecureBytes.lockFailureHandler = {
            let e = StoreError.keyMemoryNotLocked
            let line = Array("photovault: \(e.description)\n".utf8)
            _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress!, $0.count) }
            exit(e.exitCode)
        }
    }

    /// A caller that closed stdin, stdout or stderr (`photovault mount >&- 2>&-` in a script)
    /// would have the next descriptors opened land there: the mount's pipes to its daemon
    /// (which then mixed them up: SIGPIPE, exit 141, nothing mounted), a store file or
    /// /dev/fuse, which a message meant for stderr would then be written into. They are
    /// opened on /dev/null first, as daemons do, but the wrong way round (stdin write-only,
    /// stdout and stderr read-only): every read or write there still fails with EBADF, as on
    /// the closed descriptor. Opened the right way, /dev/null swallowed what was meant for the
    /// caller: `user add >&-` kept an account whose recovery key went nowhere, `export -
    /// >&-` exported a photo into nothing, and `import - <&-` stored an empty file, each with
    /// exit code 0.
    public static func openStandardDescriptors() {
        for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) < 0 {
            let n = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY)
            if n >= 0 && n != fd { dup2(n, fd); close(n) }
        }
    }

    /// A SIGCHLD the caller ignored (SIG_IGN, or SA_NOCLDWAIT) survives exec: the kernel then
    /// reaps our children itself and waitpid fails with ECHILD, so the mount daemon looked
    /// reaped by someone else, and a failing --extpass command or tool (Foundation's Process
    /// leaves the status at 0 then) read as a success. The default is restored first.
    public static func restoreChildSignal() {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = SIG_DFL
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        sigaction(SIGCHLD, &action, nil)
    }

    /// Runs the background mount daemon if this process was started as one.
    public static func runDaemonIfRequested(_ argv: [String]) {
        if argv.count > 1 && argv[1] == DaemonLauncher.daemonCommand {
            MountDaemon.childMain(Array(argv.dropFirst(2)))
        }
        if argv.count > 1 && argv[1] == PamCommand.workerCommand {
            PamWorker.main(Array(argv.dropFirst(2)))
        }
        if argv.count > 1 && argv[1] == PrivacySweeper.command {
            PrivacySweeper.childMain(Array(argv.dropFirst(2)))
        }
    }
}
