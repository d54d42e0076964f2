import Glibc

/// An flock on the mountpoint directory, held by a daemon from its "nothing is mounted
/// there" check to its mount. Two `mount` commands at one mountpoint (another account, or
/// another store) both passed the check and stacked their mounts: the later one hid the
/// first, took over its registry entry and left itself out of reach of lock and status
/// (`lock` then locked the hidden mount, not the visible one). The second daemon now waits
/// for the first to be mounted, then finds the mount and refuses (exit 16).
struct MountpointLock {
    private let fd: Int32

    /// Best effort: a directory that cannot be opened (the mount of another user's daemon), or
    /// a lock some other program keeps longer than `timeout`, is not waited for; the check
    /// that follows still runs.
    init(_ mountpoint: String, timeout: Double = 10) {
        let fd = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            let deadline = monotonicMs() + timeout * 1000
            while flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK && monotonicMs() < deadline { usleep(20_000) }
        }
        self.fd = fd
    }

    func release() { if fd >= 0 { close(fd) } }
}
