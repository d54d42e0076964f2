import Glibc
import CLinux

/// One password guess at a time per account, across processes (CREDENTIALS.md,
/// "Throttling"). Held from before the throttle's wait until the guess is counted and
/// judged, so the next guess waits for it and then for the delay its count set. Without it,
/// guesses started together all read the same count and waited the same (short) delay: six
/// parallel wrong passwords with the count at 6 were judged within about 20 s, against
/// about 118 s one after another, and two of them could count once.
///
/// A write lock on one byte of `accounts/.attempts` (an OFD lock, so two `AccountStore`s
/// in one process exclude each other too), at an offset taken from the record's file name:
/// another account's guesses do not wait for these. A separate file from `accounts/.lock`
/// (the store-wide flock of account changes), which a password change takes after this one.
enum AttemptLock {
    static let fileName = ".attempts"

    /// Runs `body` holding `name`'s attempt lock. Where the lock file cannot be opened for
    /// writing (a read-only store; a directory the caller cannot write, where the count
    /// cannot be written either and the guess is refused unjudged), `body` runs without it.
    static func withLock<R>(accountsDir: String, name: AccountName, _ body: () throws -> R) throws -> R {
        let path = StorePath.join(accountsDir, fileName)
        guard let fd = try? FileIO.openRegular(AT_FDCWD, path, O_RDWR | O_CREAT, mode: 0o600, what: path) else {
            return try body()
        }
        defer { close(fd) }   // releases the lock, also when the process dies
        while pv_ofd_lock_byte(fd, offset(of: name)) != 0 {
            let e = errno
            guard e == EINTR else { throw StoreError.posix("lock \(path)", e) }
        }
        return try body()
    }

    /// FNV-1a of the record's name, as a non-negative file offset.
    static func offset(of name: AccountName) -> Int64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in name.stem.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return Int64(h >> 2)
    }
}
