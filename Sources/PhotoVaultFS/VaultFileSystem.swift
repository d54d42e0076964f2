import Glibc
import CFuse
import CLinux
import PhotoVaultCrypto
import PhotoVaultStore

/// The mounted vault: a libfuse3 low-level filesystem showing one user's plaintext tree
/// while only ciphertext is written to the backing directory.
///
/// Threads: libfuse calls the operations from its worker threads; all shared state sits
/// in `InodeTable` (mutex), per-inode state (inode mutex) and per-file content (rwlock).
public final class VaultFileSystem: @unchecked Sendable {
    let options: MountOptions
    let backend: TreeBackend
    let table: InodeTable
    /// What the file system under the tree can do (probed once: the daemon probes before it
    /// builds this): what it cannot hold is refused as a local file system of that kind does.
    let backing: BackingCapabilities
    let log: @Sendable (String) -> Void
    let timeout: Double
    /// Write-only opens get `FOPEN_DIRECT_IO` (`MountOptions.directWrites`): asked for, no
    /// writeback cache, and a kernel that keeps other handles' caches coherent. Fixed per mount.
    let writeOnlyBypassesCache: Bool
    /// Root daemon with `--allow-other`: new entries are given to the user who made them.
    let entriesBelongToCallers: Bool
    private let lifecycle = PMutex()
    private var session: OpaquePointer?
    private var mounted = false
    private var exitRequested = false
    /// Read-locked by every request (once: requests never nest), write-locked by
    /// `wipeAll()`, which a busy mount must not be able to hold off.
    let gate = PRWLock(preferWriters: true)
    private var wiped = false
    /// Set during the lock grace period: every new open or create is refused (EACCES).
    private let openGate = PMutex()
    private var refusingOpens = false
    /// Read under `gate`.
    var isWiped: Bool { wiped }
    /// The /dev/fuse hooks that negotiate what libfuse 3.14 cannot.
    let deviceIO = DeviceIO()
    /// The mount's read-ahead window after `mount()`, KiB (nil: unknown).
    public private(set) var readAheadKB: Int?

    /// Called at the start of every request (idle timer). Set before `mount()`.
    public var onActivity: (@Sendable () -> Void)?

    /// Mounts a plain passthrough of `root` (no encryption): the adapter's own tests.
    convenience init(plainRoot root: String, options: MountOptions, log: @escaping @Sendable (String) -> Void) throws {
        try self.init(rootPath: root, backend: PlainBackend(), options: options, log: log)
    }

    init(rootPath: String, backend: TreeBackend, options: MountOptions, log: @escaping @Sendable (String) -> Void) throws {
        let fd = Glibc.open(rootPath, PV_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw MountError.backingUnavailable(rootPath, errno) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { let e = errno; close(fd); throw MountError.backingUnavailable(rootPath, e) }
        self.options = options
        self.backend = backend
        self.log = log
        self.timeout = options.cacheTimeout
        writeOnlyBypassesCache = options.directWrites && !options.writebackCache
            && KernelRelease.directWritesKeepCachesCoherent
        entriesBelongToCallers = options.allowOther && geteuid() == 0
        backing = BackingCapabilities.of(fd)
        // First: the descriptor cache sizes itself by the limit.
        VaultFileSystem.raiseFileLimit()
        // Nodes are allocated by whichever worker serves the lookup and freed by whichever
        // serves the FORGET; with an arena per thread, memory one arena freed was not reused
        // by the next listing served from another (RSS 51 -> 65 -> 69 MiB over three cold
        // `ls -lR` of 100,000 files), and the daemon's locked memory (mlockall) cannot be
        // handed back (madvise fails on locked pages). One arena: 54 -> 52 -> 59 MiB.
        _ = pv_malloc_single_arena()
        table = InodeTable(rootFD: fd, rootStat: st, keepsNames: options.logsPlaintextPaths || options.debug)
    }

    deinit {
        if let se = session { fuse_session_destroy(se) }
        table.closeAll()
        close(table.rootFD)
    }

    /// The nodes the kernel remembers share a bounded set of descriptors (`DescriptorCache`,
    /// sized by this limit), but every open file holds one of its own: the soft limit is
    /// raised to the hard one (a daemon with CAP_SYS_RESOURCE, root, raises both to the
    /// system's `nr_open`), so that opening many files at once is limited by the same
    /// number as for any program.
    private static func raiseFileLimit() {
        var rl = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &rl) == 0 else { return }
        if let text = try? FileIO.readFile("/proc/sys/fs/nr_open", limit: 64),
           let max = rlim_t(String(decoding: text.filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self)),
           max > rl.rlim_max {
            var raised = rlimit(rlim_cur: max, rlim_max: max)
            if setrlimit(RLIMIT_NOFILE_VALUE, &raised) == 0 { return }
        }
        if rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max
            _ = setrlimit(RLIMIT_NOFILE_VALUE, &rl)
        }
    }

    /// Closes the descriptors the cache evicted, once every request that may still hold one
    /// has ended: taking the request gate for writing waits for them (and holds new ones
    /// back for that moment only; it is let go before anything is closed).
    func closeRetiredDescriptors() {
        table.descriptors.closeRetired { gate.withWriteLock {} }
    }

    // MARK: - Session lifecycle

    /// Creates the libfuse session and mounts it. Throws `MountError`.
    public func mount() throws {
        guard Glibc.access("/dev/fuse", R_OK | W_OK) == 0 else { throw MountError.fuseUnavailable(errno) }
        let mp = options.mountpoint
        var st = stat()
        guard stat(mp, &st) == 0 else {
            if errno == ENOTCONN { throw MountError.alreadyMounted(mp) }
            throw MountError.mountpointMissing(mp)
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw MountError.mountpointNotDirectory(mp) }
        if VaultFileSystem.isMountPoint(mp) { throw MountError.alreadyMounted(mp) }

        var mountOpts = ["fsname=\(options.fsName)", "subtype=\(options.fsName)"]
        if options.maxRead > 0 { mountOpts.append("max_read=\(options.maxRead)") }
        if options.readOnly { mountOpts.append("ro") }
        if options.allowOther { mountOpts += ["allow_other", "default_permissions"] }
        var argv = ["photovault", "-o", mountOpts.joined(separator: ",")]
        if options.debug { argv.append("-d") }

        // The kernel already applied the caller's umask to every mode it sends us.
        umask(0)

        var cStrings: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var ops = FuseOps.table()
        let se: OpaquePointer? = cStrings.withUnsafeMutableBufferPointer { buf in
            var args = fuse_args(argc: Int32(argv.count), argv: buf.baseAddress, allocated: 0)
            let s = fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size,
                                     Unmanaged.passUnretained(self).toOpaque())
            if args.allocated != 0 { fuse_opt_free_args(&args) }
            return s
        }
        guard let se else { throw MountError.sessionFailed }
        guard fuse_session_mount(se, mp) == 0 else {
            fuse_session_destroy(se)
            throw MountError.mountFailed(mp)
        }
        if !DeviceIO.install(on: se) { log("could not hook /dev/fuse; every write will ask for security.capability") }
        readAheadKB = ReadAhead.raise(mountpoint: mp, to: options.readAheadKB)
        lifecycle.withLock {
            session = se
            mounted = true
        }
    }

    /// Serves requests until unmounted (`fusermount3 -u`) or `requestExit()`. Returns 0 on a
    /// clean exit. Unmounts, destroys the session and wipes every key before returning.
    public func run() -> Int32 {
        guard let se = lifecycle.withLock({ session }) else { return -1 }
        // libfuse's workers are created by this thread and later by one another, and take
        // its policy with them (`MountOptions.batchWorkers`).
        if options.batchWorkers && pv_sched_batch_self() != 0 {
            log("could not switch the request threads to SCHED_BATCH (errno \(errno)); keeping the default policy")
        }
        let cfg = fuse_loop_cfg_create()
        fuse_loop_cfg_set_max_threads(cfg, 16)
        fuse_loop_cfg_set_idle_threads(cfg, 4)
        let rc = fuse_session_loop_mt(se, cfg)
        fuse_loop_cfg_destroy(cfg)
        lifecycle.withLock {
            if mounted { fuse_session_unmount(se); mounted = false }
            fuse_session_destroy(se)
            session = nil
        }
        // Keys first: `wipeAll()` finds the open files' keys through the inode table, and
        // handles the kernel never released still hold them.
        wipeAll()
        table.closeAll()
        // A signal exit (positive) or an exit we asked for is a clean end.
        return rc < 0 && !lifecycle.withLock({ exitRequested }) ? rc : 0
    }

    /// Ends `run()` from any thread: marks the session finished and unmounts, which wakes
    /// the workers blocked on /dev/fuse.
    public func requestExit() {
        let mp: String? = lifecycle.withLock {
            exitRequested = true
            guard let se = session, mounted else { return nil }
            fuse_session_exit(se)
            return options.mountpoint
        }
        guard let mp else { return }
        if geteuid() == 0 {
            if umount2(mp, 0) != 0 { _ = umount2(mp, Int32(MNT_DETACH)) }
        } else {
            VaultFileSystem.spawnWait("/usr/bin/fusermount3", ["-u", "-z", "--", mp])
        }
    }

    /// The mount has left the daemon's namespace (unmounted there, maybe alive in another one):
    /// marks the session finished without unmounting anything, since whatever is at the
    /// mountpoint now is not this mount. `run()` returns once the kernel ends the connection;
    /// while another copy of the mount lives it does not, and the caller ends the process.
    public func mountLeftNamespace() {
        lifecycle.withLock {
            exitRequested = true
            if let se = session { fuse_session_exit(se) }
            mounted = false
        }
    }

    /// Lock grace period (`--on-lock unmount`): handles already open may finish, but no new
    /// open or create succeeds from now on.
    public func refuseNewOpens() {
        openGate.withLock { refusingOpens = true }
    }

    var opensRefused: Bool { openGate.withLock { refusingOpens } }

    /// Device lock: forgets the class keys and the file keys of open `complete` files.
    public func lock() {
        // Drop plaintext pages from the kernel's cache first (it would otherwise keep serving
        // reads of `complete` files after lock); with writeback caching this also flushes
        // dirty pages to us while the keys still exist.
        dropKernelCache()
        // Behind the gate: an open or create in flight could otherwise unwrap a file key
        // before the class key goes and register its file after the snapshot below, leaving
        // a `complete` file readable while locked. Requests in flight finish first; new ones
        // wait until the keys are gone.
        gate.withWriteLock {
            backend.lock()
            for f in table.openFiles() where f.content.protectionClass == .complete { f.content.wipeKey() }
        }
        // A READ served between that first pass and the wipe put plaintext back into the
        // cache: through a handle still open, or one opened, read and closed in between. Reads
        // and opens of `complete` files fail from now on, so one more pass over every file
        // leaves nothing (it waits for replies still on their way).
        dropKernelCache()
        log("vault locked")
    }

    /// Unmount (or lock with no grace left): every key, class and file, is zeroed. Requests
    /// in flight finish first; later ones are refused with EACCES. Idempotent.
    public func wipeAll() {
        // Before the gate closes: invalidation may make the kernel write dirty pages back.
        if !gate.withReadLock({ wiped }) { dropKernelCache() }
        let wipedOpen: [UInt64]? = gate.withWriteLock {
            if wiped { return nil }
            wiped = true
            let open = table.openFiles()
            for f in open { f.content.wipeKey() }
            backend.wipeAll()
            return open.map(\.id)
        }
        // Requests in flight have finished and later ones are refused: drop what was read
        // between the first pass and the wipe. Only open handles could reach those pages.
        if let wipedOpen { dropKernelCache(wipedOpen) }
    }

    /// Asks the kernel to drop every cached page of the regular files `ids` (nil: every one
    /// it knows), so no plaintext stays readable from the page cache once keys are gone.
    ///
    /// Holds `lifecycle` throughout, so `run()` cannot destroy the session under a
    /// notification. A notification never waits on `run()`: whatever ends the loop (an
    /// unmount, `requestExit()`) has already aborted the connection, which ends any wait.
    private func dropKernelCache(_ ids: [UInt64]? = nil) {
        let targets = ids ?? table.regularFileIDs()
        lifecycle.withLock {
            guard mounted, let se = session else { return }
            for id in targets { _ = fuse_lowlevel_notify_inval_inode(se, id, 0, 0) }
        }
    }

    /// Asks the kernel to read inode `ino`'s attributes again: a write or an O_TRUNC open that
    /// dropped setuid/setgid bits (`SetIDBits`) leaves its cached mode stale otherwise (a
    /// `stat` asking for the mode only would show the bits). Sent before the request's reply,
    /// so the caller sees the new mode as soon as its call returns; the kernel takes no lock
    /// for it that the request holds.
    func modeChangedUnderneath(_ ino: UInt64) {
        lifecycle.withLock {
            guard mounted, let se = session else { return }
            _ = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0)
        }
    }

    /// Open handles per protection class (files opened several times count once per handle).
    public func statusCounts() -> [ProtectionClass: Int] {
        var out: [ProtectionClass: Int] = [:]
        for (c, opens, _) in table.openCounts() {
            if let cls = c.protectionClass { out[cls, default: 0] += opens }
        }
        return out
    }

    /// Open handles that write, of class `cls`: the lock grace period waits for these.
    public func openWriteHandles(of cls: ProtectionClass) -> Int {
        table.openCounts().filter { $0.content.protectionClass == cls }.reduce(0) { $0 + $1.writers }
    }

    static func isMountPoint(_ path: String) -> Bool { mountDevice(path) != nil }

    /// "MAJ:MIN" of the newest mount at `path` (from /proc/self/mountinfo), nil if none.
    static func mountDevice(_ path: String) -> String? {
        guard let f = fopen("/proc/self/mountinfo", "r") else { return nil }
        defer { fclose(f) }
        var line: UnsafeMutablePointer<CChar>?
        var cap = 0
        defer { free(line) }
        let resolved = realpath(path, nil).map { p -> String in defer { free(p) }; return String(cString: p) } ?? path
        var found: String?
        while getline(&line, &cap, f) > 0 {
            let fields = String(cString: line!).split(separator: " ")
            if fields.count > 4, unescapeMountField(String(fields[4])) == resolved { found = String(fields[2]) }
        }
        return found
    }

    /// mountinfo escapes space, tab, newline and backslash as octal.
    static func unescapeMountField(_ s: String) -> String {
        var out: [UInt8] = []
        let b = Array(s.utf8)
        var i = 0
        while i < b.count {
            if b[i] == 0x5c, i + 3 < b.count,
               let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                out.append(v)
                i += 4
            } else {
                out.append(b[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    @discardableResult
    static func spawnWait(_ path: String, _ args: [String]) -> Int32 {
        var pid: pid_t = 0
        let all = [path] + args
        var cargs: [UnsafeMutablePointer<CChar>?] = all.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        guard posix_spawn(&pid, path, nil, nil, &cargs, environ) == 0 else { return -1 }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return status
    }
}

let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)

extension VaultFileSystem {
    /// Mounts one user's encrypted tree.
    public convenience init(tree: UserTree, options: MountOptions, log: @escaping @Sendable (String) -> Void) throws {
        try self.init(rootPath: tree.root, backend: EncryptedBackend(tree: tree), options: options, log: log)
    }

    /// After `photovault unlock`: restores the class keys. Files whose keys were forgotten
    /// at lock must be reopened (their old handles keep failing with EACCES). Returns false,
    /// changing nothing, for a key that is not this vault's; throws
    /// `CryptoError.memoryNotLocked`, changing nothing, when the keys find no locked memory.
    public func unlock(masterKey: SecureBytes) throws -> Bool {
        if let b = backend as? EncryptedBackend, try !b.tree.keyring.unlock(masterKey: masterKey) { return false }
        log("vault unlocked")
        return true
    }
}
