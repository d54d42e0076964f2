import Glibc
import CLinux
import Synchronization

/// What the file system under a store can do, found by trying it in a scratch directory,
/// never guessed from the file system's name (exFAT and NTFS through FUSE, sshfs and rclone
/// all say "fuse" to statfs, and each differs). docs/STORAGE.md has the table.
///
/// Probed once per device and process: `init` probes the store's directory, the mount daemon
/// the tree it serves, before anything else; the offline tools probe a device the first
/// time a fallback may be needed there (`of(_:)`). The probe makes one `.pvtmp-probe-*`
/// directory beside the store's own entries, holding only empty files and a word of
/// nonsense (no name, content or key of the vault), and removes it again; a crash during it
/// leaves that directory, which fsck reports as a temp leftover like any other.
public struct BackingCapabilities: Sendable, Equatable, CustomStringConvertible {
    /// link(2) giving one inode two names: exFAT says EPERM, an rclone mount EIO, and sshfs
    /// makes links whose names have inode numbers of their own. Without it a create-if-absent
    /// renames (`NoReplace`) and the mount refuses `ln` with EPERM.
    public var hardLinks = true
    /// renameat2(RENAME_NOREPLACE) that refuses a taken name: exFAT, NTFS (ntfs-3g), sshfs and
    /// rclone mounts say EINVAL. Without it, a check and rename under the writers' lock.
    public var renameNoReplace = true
    /// renameat2(RENAME_EXCHANGE). Without it, a directory moved over an empty one sets the
    /// old one aside first, and a user's exchange is refused with EINVAL (as exFAT does).
    public var renameExchange = true
    /// A file just written in a directory can still be read once the directory is renamed.
    /// rclone's VFS cache (1.60, `--vfs-cache-mode writes`) answers EIO until its upload is
    /// done, so a new vault directory, built under a temp name and renamed, had an unreadable
    /// `.pvdir` for seconds. Without it a new directory takes its name first (`DirectoryInfo`).
    public var renamedDirectoryKeepsNewFiles = true
    /// open(O_TMPFILE). PhotoVault does not use it (a temp file always has a `.pvtmp-` name,
    /// so fsck can find and remove a killed writer's), probed for the table only.
    public var tmpFile = true
    /// user.* extended attributes (the mount's xattrs, sealed): exFAT says EOPNOTSUPP, an
    /// rclone mount EIO; the mount then keeps only its virtual ones and refuses others with
    /// EOPNOTSUPP.
    public var xattrs = true
    /// symlink(2) (the mount's symlinks, targets sealed): exFAT says ENOSYS, an rclone mount
    /// EIO; the mount then refuses `ln -s` with EPERM.
    public var symlinks = true
    /// flock(2) (tree, account and mount locks). Without it a store is refused at mount and
    /// for every change: the locks are what keeps two writers apart.
    public var fileLocks = true
    /// fsync(2) of a directory (crash safety of every new name).
    public var directoryFsync = true
    /// The finest mtime step the file system keeps, in nanoseconds (ext4: 1; NTFS: 100;
    /// exFAT through exfat-fuse: 1,000,000,000).
    public var mtimeResolutionNs: Int64 = 1
    /// A name looked up in another case finds the entry (exFAT; NTFS as Windows sees it).
    public var caseInsensitive = false
    /// Longest name in bytes (statvfs f_namemax).
    public var nameMax = 255

    public init() {}

    public var description: String {
        func yn(_ b: Bool) -> String { b ? "yes" : "no" }
        return "hard links \(yn(hardLinks)), rename noreplace \(yn(renameNoReplace)), exchange \(yn(renameExchange)), "
            + "O_TMPFILE \(yn(tmpFile)), xattrs \(yn(xattrs)), symlinks \(yn(symlinks)), flock \(yn(fileLocks)), "
            + "directory fsync \(yn(directoryFsync)), renamed directory keeps new files \(yn(renamedDirectoryKeepsNewFiles)), mtime step \(mtimeResolutionNs) ns, "
            + "case-insensitive \(yn(caseInsensitive)), names up to \(nameMax) bytes"
    }

    /// What is missing, for a log line ("hard links", "symlinks", ...); empty on ext4.
    public var missing: [String] {
        [(hardLinks, "hard links"), (renameNoReplace, "renameat2 RENAME_NOREPLACE"), (renameExchange, "RENAME_EXCHANGE"),
         (xattrs, "extended attributes"), (symlinks, "symlinks"), (fileLocks, "flock"),
         (directoryFsync, "directory fsync"), (renamedDirectoryKeepsNewFiles, "files kept across a directory rename"), (!caseInsensitive, "case-sensitive names")].filter { !$0.0 }.map { $0.1 }
    }

    // MARK: - Probing

    private static let cache = Mutex<[UInt64: BackingCapabilities]>([:])

    /// Tests only: what the next probe of any device finds is replaced by `override`'s answer,
    /// to run a fallback on a file system that would not need it.
    nonisolated(unsafe) static var override: ((inout BackingCapabilities) -> Void)?

    /// The capabilities of the file system holding directory `dirfd`, probed there the first
    /// time this process asks about that device. A directory where nothing can be made (a
    /// read-only store, an export destination without write permission) answers with every
    /// capability, not kept: whatever is then tried fails with its own error.
    public static func of(_ dirfd: Int32) -> BackingCapabilities {
        var st = stat()
        guard fstat(dirfd, &st) == 0 else { return BackingCapabilities() }
        let dev = UInt64(st.st_dev)
        if let known = cache.withLock({ $0[dev] }) { return known }
        guard st.st_mode & S_IFMT == S_IFDIR, let found = try? probe(dirfd) else { return BackingCapabilities() }
        cache.withLock { $0[dev] = found }
        return found
    }

    /// What an earlier probe found for the device holding `fd` (a file or a directory), with
    /// no probe now: every capability when that device was not probed.
    public static func known(_ fd: Int32) -> BackingCapabilities {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return BackingCapabilities() }
        return cache.withLock { $0[UInt64(st.st_dev)] } ?? BackingCapabilities()
    }

    /// `of` for a directory by path (the offline commands probe the store's directory first).
    @discardableResult
    public static func of(path: String) -> BackingCapabilities {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return BackingCapabilities() }
        defer { close(fd) }
        return of(fd)
    }

    /// Probes now, even if this device was probed before, and keeps the answer (init, mount).
    @discardableResult
    public static func probeAgain(_ dirfd: Int32) throws -> BackingCapabilities {
        var st = stat()
        guard fstat(dirfd, &st) == 0 else { throw StoreError.posix("fstat") }
        let found = try probe(dirfd)
        cache.withLock { $0[UInt64(st.st_dev)] = found }
        return found
    }

    /// Same, for a path (the CLI's `init` and the mount daemon).
    @discardableResult
    public static func probeAgain(path: String) throws -> BackingCapabilities {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(path)") }
        defer { close(fd) }
        return try probeAgain(fd)
    }

    static func forget() { cache.withLock { $0.removeAll() } }

    static let probePrefix = AtomicFile.tempPrefix + "probe-"

    /// One step for `DeferredSignals`: an import's SIGINT or SIGTERM during the probe waits
    /// until the scratch directory is gone (it used to be left in the store).
    private static func probe(_ parent: Int32) throws -> BackingCapabilities {
        try DeferredSignals.during { try probeUnderDeferredSignals(parent) }
    }

    private static func probeUnderDeferredSignals(_ parent: Int32) throws -> BackingCapabilities {
        removeStaleProbes(parent)
        let dirName = probePrefix + Base64Hex.random(6)
        guard mkdirat(parent, dirName, 0o700) == 0 else { throw StoreError.posix("mkdir \(dirName)") }
        let d = openat(parent, dirName, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard d >= 0 else {
            let e = errno
            unlinkat(parent, dirName, AT_REMOVEDIR)
            throw StoreError.posix("open \(dirName)", e)
        }
        defer {
            // Whatever the probes left (each removes its own when it can), then the directory.
            // Not synced: a scratch directory that a crash brings back is removed by the next
            // probe, and every fsync here delays every offline command on a slow drive.
            if let entries = try? OfflineSys.list(d) {
                for e in entries {
                    if unlinkat(d, e.cName, 0) != 0 { unlinkat(d, e.cName, AT_REMOVEDIR) }
                }
            }
            close(d)
            unlinkat(parent, dirName, AT_REMOVEDIR)
        }
        var c = BackingCapabilities()
        // Every probe file has the temp prefix too: a crash in the middle leaves a directory
        // that fsck --repair removes whole, as it does a killed writer's temp directory.
        func t(_ n: String) -> String { AtomicFile.tempPrefix + n }
        let tA = t("a"), tB = t("b"), tL = t("l"), tN = t("n"), tS = t("s")
        func make(_ name: String) -> Bool {
            let fd = openat(d, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return false }
            close(fd)
            return true
        }
        func exists(_ name: String) -> Bool {
            var st = stat()
            return fstatat(d, name, &st, AT_SYMLINK_NOFOLLOW) == 0
        }
        guard make(tA), make(tB) else { throw StoreError.posix("create a probe file") }

        // Both names must be one inode: sshfs makes the link on the server but numbers each
        // name's inode apart, so the mount and fsck would take them for two files.
        var sa = stat(), sl = stat()
        c.hardLinks = linkat(d, tA, d, tL, 0) == 0 && fstatat(d, tA, &sa, AT_SYMLINK_NOFOLLOW) == 0
            && fstatat(d, tL, &sl, AT_SYMLINK_NOFOLLOW) == 0 && sa.st_ino == sl.st_ino && sl.st_nlink >= 2
        // NOREPLACE must both move to a free name and refuse a taken one: a file system that
        // took the flag and replaced anyway would be worse than one that refuses it.
        if pv_renameat2(d, tA, d, tN, UInt32(PV_RENAME_NOREPLACE)) == 0 {
            c.renameNoReplace = pv_renameat2(d, tN, d, tB, UInt32(PV_RENAME_NOREPLACE)) != 0 && errno == EEXIST
                && exists(tN) && exists(tB)
            _ = renameat(d, tN, d, tA)
        } else {
            c.renameNoReplace = false
        }
        c.renameExchange = pv_renameat2(d, tA, d, tB, UInt32(PV_RENAME_EXCHANGE)) == 0
        let tmp = openat(d, ".", O_WRONLY | 0o20200000 /* O_TMPFILE */ | O_CLOEXEC, 0o600)
        c.tmpFile = tmp >= 0
        if tmp >= 0 { close(tmp) }
        let fa = openat(d, tA, O_RDWR | O_CLOEXEC)
        if fa >= 0 {
            let v: [UInt8] = [0x70, 0x76]
            c.xattrs = CLinux.fsetxattr(fa, "user.pvprobe", v, v.count, 0) == 0
            c.fileLocks = flock(fa, LOCK_EX | LOCK_NB) == 0
            if c.fileLocks { _ = flock(fa, LOCK_UN) }
            c.mtimeResolutionNs = mtimeStep(fa)
            close(fa)
        }
        c.symlinks = symlinkat(tA, d, tS) == 0
        c.directoryFsync = fsync(d) == 0
        c.renamedDirectoryKeepsNewFiles = renamedDirectoryKeepsNewFile(d, t("d1"), t("d2"), t("f"))
        c.caseInsensitive = make(t("pvCase")) && exists(t("PVCASE"))
        var vfs = statvfs()
        if fstatvfs(d, &vfs) == 0, vfs.f_namemax > 0 { c.nameMax = Int(vfs.f_namemax) }
        override?(&c)
        return c
    }

    /// Removes what earlier probes could not: on an rclone mount the file written for the
    /// directory-rename probe cannot be removed until its upload is done. Only probe
    /// directories a minute old (a probe takes milliseconds), holding only probe files.
    private static func removeStaleProbes(_ parent: Int32) {
        guard let entries = try? OfflineSys.list(parent) else { return }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        for e in entries where e.name.hasPrefix(probePrefix) {
            guard let st = try? OfflineSys.lstat(parent, e.cName), OfflineSys.isDirectory(st),
                  Int(now.tv_sec) - Int(st.st_mtim.tv_sec) > 60 else { continue }
            func clear(_ dfd: Int32, _ name: [CChar], depth: Int) {
                let fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard fd >= 0 else { return }
                for i in (try? OfflineSys.list(fd)) ?? [] where i.name.hasPrefix(AtomicFile.tempPrefix) {
                    if unlinkat(fd, i.cName, 0) != 0 && depth < 2 { clear(fd, i.cName, depth: depth + 1) }
                }
                close(fd)
                unlinkat(dfd, name, AT_REMOVEDIR)
            }
            clear(parent, e.cName, depth: 0)
        }
    }

    /// Writes a file in a new directory, renames the directory and reads the file back.
    private static func renamedDirectoryKeepsNewFile(_ d: Int32, _ d1: String, _ d2: String, _ f: String) -> Bool {
        guard mkdirat(d, d1, 0o700) == 0 else { return true }
        defer {
            _ = unlinkat(d, d1 + "/" + f, 0); _ = unlinkat(d, d1, AT_REMOVEDIR)
            _ = unlinkat(d, d2 + "/" + f, 0); _ = unlinkat(d, d2, AT_REMOVEDIR)
        }
        let w = openat(d, d1 + "/" + f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard w >= 0 else { return true }
        let wrote = write(w, "pv", 2) == 2
        close(w)
        guard wrote, renameat(d, d1, d, d2) == 0 else { return true }
        let r = openat(d, d2 + "/" + f, O_RDONLY | O_CLOEXEC)
        guard r >= 0 else { return false }
        defer { close(r) }
        var buf = [UInt8](repeating: 0, count: 2)
        return read(r, &buf, 2) == 2 && buf == [0x70, 0x76]
    }

    /// Sets an mtime with every digit of its nanoseconds in use and reads back what was kept.
    private static func mtimeStep(_ fd: Int32) -> Int64 {
        let wanted = timespec(tv_sec: 1_600_000_001, tv_nsec: 123_456_789)
        var st = stat()
        guard futimens(fd, [wanted, wanted]) == 0, fstat(fd, &st) == 0 else { return 1 }
        let lost = (Int64(wanted.tv_sec) * 1_000_000_000 + Int64(wanted.tv_nsec))
            - (Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
        for step: Int64 in [1, 100, 1_000, 1_000_000, 10_000_000, 1_000_000_000, 2_000_000_000] where abs(lost) < step {
            return step
        }
        return 2_000_000_000
    }
}
