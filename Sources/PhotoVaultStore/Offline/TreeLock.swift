import Glibc

/// `flock(2)` on a user tree's root directory, held for the whole of an offline operation:
/// exclusive for writers (import, `fsck --repair`, class changes), shared for readers
/// (export, fsck, class get/list). Two offline writers never interleave, and a writer never
/// runs under a reader. A mount daemon that holds a shared lock on the same directory for
/// its lifetime keeps offline writers out while it is mounted (docs/OFFLINE.md).
///
/// Mount daemons also hold the mount lock (`TreeLock.mount`), an exclusive flock that only
/// they take, so that one account's tree is mounted at most once at a time.
///
/// The lock belongs to this object's own open file description, so two locks in one process
/// exclude each other just as two processes do. It is released by `release()`, on deinit,
/// or by the kernel if the process dies.
public final class TreeLock {
    public enum Mode: Sendable { case shared, exclusive }

    private var fd: Int32
    public let mode: Mode

    /// Polls the non-blocking lock until `timeout` seconds have passed, then throws
    /// `.storeBusy` (a blocking flock cannot time out without signals).
    public convenience init(root: String, mode: Mode, timeout: Double = 2) throws {
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(root)") }
        try self.init(fd: fd, path: root, mode: mode, timeout: timeout)
    }

    /// Empty file at a tree's root that mount daemons lock exclusively (FORMAT.md §1). It
    /// cannot be the root itself: one open file description has one flock, and the root's is
    /// the shared lock offline readers take beside a mount. Nor the root's `.pvdir`: it is
    /// replaced by rename, and a lock on the old inode would exclude nobody.
    public static let mountLockName = ".pvmount"

    /// The mount lock of the tree at `root`, created (empty, 0400) on first use; `.storeBusy`
    /// when another daemon mounts the tree. nil on a read-only filesystem, where the file
    /// cannot be created and no daemon can write the tree either. With `create` false, nil
    /// when it does not exist (a tree never mounted): nothing in the tree is changed.
    public static func mount(root: String, timeout: Double = 2, create: Bool = true) throws -> TreeLock? {
        let path = StorePath.join(root, mountLockName)
        // A FIFO in its place would block the open for good, a symlink lead out of the store.
        let fd: Int32
        do { fd = try FileIO.openRegular(AT_FDCWD, path, O_RDONLY | (create ? O_CREAT : 0), mode: 0o400, what: path) }
        catch StoreError.io(let e, _) where e == EROFS || (e == ENOENT && !create) { return nil }
        return try TreeLock(fd: fd, path: path, mode: .exclusive, timeout: timeout)
    }

    /// Takes over `fd`, closing it on failure.
    private init(fd: Int32, path: String, mode: Mode, timeout: Double) throws {
        let op = (mode == .exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let start = Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        while flock(fd, op) != 0 {
            let e = errno
            if e == EINTR { continue }
            guard e == EWOULDBLOCK else { close(fd); throw StoreError.posix("flock \(path)", e) }
            clock_gettime(CLOCK_MONOTONIC, &ts)
            if Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9 - start >= timeout { close(fd); throw StoreError.storeBusy }
            usleep(20_000)
        }
        self.fd = fd
        self.mode = mode
    }

    public func release() {
        if fd >= 0 { close(fd); fd = -1 }
    }

    deinit { release() }
}
