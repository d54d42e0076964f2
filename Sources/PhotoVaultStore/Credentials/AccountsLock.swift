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
        removeStaleTemps(accountsDir: accountsDir)
        return try body()
    }

    /// Temp files (`.pvtmp-*`) older than this are left over from a writer that was killed
    /// (SIGTERM between creating one and its rename): a live one lasts a write and an fsync.
    static let staleTempAge: Int = 600

    /// Removes temp files that killed writers left in `accounts/`, each a copy of a record
    /// (ciphertext, but one that lingers for good). Best effort, under the lock, so no other
    /// account change is writing one; a login's throttle count writes its temp without the
    /// lock, which the age spares.
    static func removeStaleTemps(accountsDir: String) {
        let dfd = open(accountsDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { return }
        defer { close(dfd) }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        for e in (try? OfflineSys.list(dfd)) ?? [] where e.name.hasPrefix(AtomicFile.tempPrefix) {
            guard let st = try? OfflineSys.lstat(dfd, e.cName), st.st_mode & S_IFMT == S_IFREG,
                  now.tv_sec - st.st_mtim.tv_sec > staleTempAge else { continue }
            unlinkat(dfd, e.cName, 0)
        }
    }

    static func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
