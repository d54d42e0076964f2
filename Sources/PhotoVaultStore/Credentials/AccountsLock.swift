import Glibc

/// Exclusive `flock` on `accounts/.lock`, held for the whole of a mutation (add, password
/// change, reset, remove) so that two `photovault user ...` commands cannot interleave their
/// read-check-write steps. Readers (open, exists, count) do not take it: records are only
/// ever replaced by rename, so a reader sees the old or the new record, never a mix.
///
/// `flock` locks belong to the open file description, so two `AccountStore`s in one process
/// exclude each other just as two processes do.
enum AccountsLock {
    static let fileName = ".lock"

    /// Runs `body` holding the lock. Polls `LOCK_EX | LOCK_NB` until `timeout` seconds have
    /// passed, then throws `.storeBusy` (a blocking flock cannot time out without signals).
    /// Closing the descriptor releases the lock, also if the process dies.
    static func withLock<R>(accountsDir: String, timeout: Double, _ body: () throws -> R) throws -> R {
        let path = StorePath.join(accountsDir, fileName)
        // Never created through a symlink in its place (outside the store), never a FIFO.
        let fd = try FileIO.openRegular(AT_FDCWD, path, O_RDWR | O_CREAT, mode: 0o600, what: path)
        defer { close(fd) }
        let start = monotonicSeconds()
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            if e == EINTR { continue }
            guard e == EWOULDBLOCK else { throw StoreError.posix("flock \(path)", e) }
            if monotonicSeconds() - start >= timeout { throw StoreError.storeBusy }
            usleep(20_000)
        }
        return try body()
    }

    static func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
