import Foundation
import Glibc

/// Slows down repeated wrong passwords for one account, like a phone does
/// (CREDENTIALS.md, "Throttling"): `accounts/<name>.throttle` holds the number of
/// consecutive failures and the time of the last one. Before a password is judged, the
/// caller waits until `delay(failures)` seconds have passed since the last failure; once
/// the key is derived, the attempt is counted as a failure (`countAttempt`) before the
/// password is judged, and a right password deletes the file.
/// An attempt that cannot be counted (a full disk, EIO) is not judged: filling the store's
/// disk used to leave every guess uncounted, turning the delays off. So that a store whose
/// disk filled up still opens for its owner (to free space through the mount), a count that
/// meets ENOSPC is written into a block the throttle already holds, never into a freed one:
/// over the account's count file in place, or into `accounts/throttle-reserve` (one spare
/// block, made when an account is added), which is then renamed to be the count; a right
/// password renames its count back to be the reserve. The count used to be written after
/// deleting the reserve, into the block that freed: another process filling the disk took
/// it first, and the right password was refused (exit 19) with the reserve gone.
///
/// This only limits guessing *through photovault*. Anyone who can read the record can
/// guess offline at the Argon2id cost and ignore this file; anyone who can write the
/// directory can delete it. A read-only store (EROFS) still opens, uncounted: nobody fills
/// it, and nothing could be counted there. Guesses at one account are judged one at a time
/// (`AttemptLock`), so that each is counted and waits the delay the one before it set.
public struct LoginThrottle: Sendable {
    /// Failures allowed without any delay.
    public var freeAttempts: Int = 3
    public var maximumDelay: Double = 30
    /// Wall clock (seconds since the epoch); failures are recorded across processes.
    public var now: @Sendable () -> Double = { Date().timeIntervalSince1970 }
    public var sleep: @Sendable (Double) -> Void = { s in
        guard s > 0 else { return }
        var req = timespec(tv_sec: Int(s), tv_nsec: Int((s - s.rounded(.down)) * 1e9))
        var rem = timespec()
        while nanosleep(&req, &rem) != 0 && errno == EINTR { req = rem }
    }

    public init() {}

    /// Told how many seconds an attempt is about to wait, before it waits (the CLI says so on
    /// a terminal: the wait after wrong passwords was silent, and read as a hang). Set once,
    /// at start, before any thread could read it.
    nonisolated(unsafe) public static var announceWait: ((Double) -> Void)?

    /// 0 for the first `freeAttempts` failures, then 1, 2, 4, 8 ... seconds, capped.
    public func delay(afterFailures n: Int) -> Double {
        guard n > freeAttempts else { return 0 }
        let exponent = min(n - freeAttempts - 1, 30)
        return min(maximumDelay, Double(1 << exponent))
    }

    struct State: Codable, Equatable {
        var failures: Int
        var lastFailure: Double
    }

    func read(accountsDir: String, name: AccountName) -> State? {
        let path = StorePath.join(accountsDir, name.throttleFileName)
        guard let bytes = try? FileIO.readFile(path, limit: 4096) else { return nil }
        return try? JSONDecoder().decode(State.self, from: Data(bytes))
    }

    /// Waits as long as the recorded failures require.
    func waitBeforeAttempt(accountsDir: String, name: AccountName) {
        guard let s = read(accountsDir: accountsDir, name: name) else { return }
        let due = s.lastFailure + delay(afterFailures: s.failures)
        // A last-failure time in the future (clock moved back, or an edited file) is
        // clamped so the wait never exceeds the cap.
        let wait = min(due - now(), maximumDelay)
        if wait > 0 {
            Self.announceWait?(wait)
            sleep(wait)
        }
    }

    /// Counts the attempt about to be judged as a failure, durably (the right password then
    /// deletes the count). Throws `.attemptNotCounted` when it cannot be written: the caller
    /// must not judge the password then.
    func countAttempt(accountsDir: String, name: AccountName) throws {
        // Saturating, and never below zero: the file is not trusted (an edited counter of
        // Int.max used to trap on the increment, so every wrong password crashed).
        let previous = max(0, read(accountsDir: accountsDir, name: name)?.failures ?? 0)
        let state = State(failures: previous == Int.max ? Int.max : previous + 1, lastFailure: now())
        do {
            let dfd = open(accountsDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard dfd >= 0 else { throw StoreError.posix("open \(accountsDir)") }
            defer { close(dfd) }
            let bytes = Array(try JSONEncoder().encode(state))
            do {
                try AtomicFile.place(bytes, in: dfd, name: name.throttleFileName, replacing: true)
            } catch let full as StoreError where full.errno == ENOSPC || full.errno == EDQUOT {
                guard try Self.countInPlace(bytes, dfd: dfd, name: name) else { throw full }
            }
            // In place, so counted for every later attempt; only a crash could still undo it.
            try? AtomicFile.syncDirectory(dfd, name.throttleFileName)
        } catch {
            let e = (error as? StoreError)?.errno ?? EIO
            if e != EROFS { throw StoreError.attemptNotCounted(errno: e) }
        }
    }

    func recordSuccess(accountsDir: String, name: AccountName) {
        let dfd = open(accountsDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { return }
        defer { close(dfd) }
        // Without a reserve, the count's block becomes it (renamed, not freed: on a full disk
        // a freed block is taken by whatever fills it before a new reserve could be made).
        let noReserve = faccessat(dfd, Self.reserveFileName, F_OK, AT_SYMLINK_NOFOLLOW) != 0
        if noReserve && renameat(dfd, name.throttleFileName, dfd, Self.reserveFileName) == 0
            || unlinkat(dfd, name.throttleFileName, 0) == 0 {
            _ = fsync(dfd)
        }
        Self.keepReserve(in: dfd)
    }

    /// Writes the count `bytes` on a full disk without asking for a block: over the account's
    /// count file in place (padded with spaces, which JSON ignores, so the file never
    /// shrinks), else into the reserve, renamed then to be the count. False when neither is
    /// there. On a copy-on-write file system (btrfs) an overwrite needs a new block too, and
    /// fails with ENOSPC like any write. A crash during the overwrite could tear it; a count
    /// that does not decode reads as none (the delays start again).
    static func countInPlace(_ bytes: [UInt8], dfd: Int32, name: AccountName) throws -> Bool {
        for (file, isReserve) in [(name.throttleFileName, false), (reserveFileName, true)] {
            let fd: Int32
            do { fd = try FileIO.openRegular(dfd, file, O_WRONLY, what: file) } catch StoreError.io(let e, _) where e == ENOENT {
                continue
            }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw StoreError.posix("stat \(file)") }
            let padded = bytes + [UInt8](repeating: 0x20, count: max(0, Int(st.st_size) - bytes.count))
            let n = padded.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, 0) }
            guard n == padded.count else { throw StoreError.posix("write \(file)") }
            guard FileIO.fsync(fd) == 0 else { throw StoreError.posix("fsync \(file)") }
            if isReserve {
                guard renameat(dfd, reserveFileName, dfd, name.throttleFileName) == 0 else {
                    throw StoreError.posix("rename \(reserveFileName)")
                }
            }
            return true
        }
        return false
    }

    /// The spare block `countAttempt` writes a count into on a full disk (4 KiB in `accounts/`:
    /// zeros, or an earlier count that a right password renamed back).
    static let reserveFileName = "throttle-reserve"

    /// Makes the spare block if it is missing; best effort (a full disk leaves it missing).
    static func keepReserve(in accountsDirFD: Int32) {
        guard faccessat(accountsDirFD, reserveFileName, F_OK, AT_SYMLINK_NOFOLLOW) != 0 else { return }
        try? AtomicFile.place([UInt8](repeating: 0, count: 4096), in: accountsDirFD, name: reserveFileName, replacing: false)
    }
}
