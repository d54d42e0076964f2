import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Growing delays after wrong passwords (CREDENTIALS.md, "Throttling").
final class CredentialThrottleTests: CredentialTestCase {
    /// A fake clock: `sleep` advances it and records how long it was asked to wait.
    final class FakeTime: @unchecked Sendable {
        private let lock = NSLock()
        private var t: Double = 1_700_000_000
        private var log: [Double] = []
        var now: Double { lock.lock(); defer { lock.unlock() }; return t }
        var sleeps: [Double] { lock.lock(); defer { lock.unlock() }; return log }
        func sleep(_ s: Double) { lock.lock(); log.append(s); t += s; lock.unlock() }
        func advance(_ s: Double) { lock.lock(); t += s; lock.unlock() }
        func clear() { lock.lock(); log = []; lock.unlock() }
    }

    func testDelaySchedule() {
        let t = LoginThrottle()
        XCTAssertEqual((0...10).map { t.delay(afterFailures: $0) }, [0, 0, 0, 0, 1, 2, 4, 8, 16, 30, 30])
        XCTAssertEqual(t.delay(afterFailures: 10_000), 30)
    }

    func testWrongPasswordsWaitLongerEachTimeAndSuccessResets() throws {
        let time = FakeTime()
        store.throttle.now = { time.now }
        store.throttle.sleep = { time.sleep($0) }
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        for _ in 0..<7 {
            assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) }
        }
        // Attempts 1-4 judged at once; then 1, 2, 4 s before attempts 5, 6, 7.
        XCTAssertEqual(time.sleeps, [1, 2, 4])
        let throttleFile = layout.accountsDir + "/" + (try AccountName.derive(user: "alice", config: store.config)).throttleFileName
        XCTAssertEqual(access(throttleFile, F_OK), 0)

        // Time already spent since the last failure counts towards the delay.
        time.clear()
        time.advance(5)
        _ = try store.open(user: "alice", password: pw("alice-password"))   // after 7 failures: 8 s due, 5 passed
        XCTAssertEqual(time.sleeps, [3])
        XCTAssertNotEqual(access(throttleFile, F_OK), 0, "success clears the counter")

        time.clear()
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) }
        XCTAssertEqual(time.sleeps, [])
    }

    func testThrottleAppliesToPasswordChangeAndRemoveButNotOtherAccounts() throws {
        let time = FakeTime()
        store.throttle.now = { time.now }
        store.throttle.sleep = { time.sleep($0) }
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        _ = try store.add(user: "bob", password: pw("bob-password"), deviceBound: false, parameters: fast)
        for _ in 0..<4 { assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) } }
        assertThrows(.wrongPassword) { try self.store.changePassword(user: "alice", old: self.pw("guess-guess"), new: self.pw("new password")) }
        assertThrows(.wrongPassword) { try self.store.remove(user: "alice", password: self.pw("guess-guess"), deletePhotos: true) }
        XCTAssertEqual(time.sleeps, [1, 2])
        time.clear()
        _ = try store.open(user: "bob", password: pw("bob-password"))
        XCTAssertEqual(time.sleeps, [])
    }

    /// An edited counter (anyone who can write accounts/ can write it) must neither crash
    /// the command nor give free attempts: the largest count stays the largest, a negative
    /// one counts as zero.
    func testEditedCounterAtTheExtremesDoesNotCrashOrGiveFreeAttempts() throws {
        let time = FakeTime()
        store.throttle.now = { time.now }
        store.throttle.sleep = { time.sleep($0) }
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let name = try AccountName.derive(user: "alice", config: store.config)
        let path = layout.accountsDir + "/" + name.throttleFileName
        func put(_ failures: Int) throws {
            let json = "{\"failures\": \(failures), \"lastFailure\": \(time.now)}"
            try AtomicFile.write(Array(json.utf8), to: path)
        }
        try put(Int.max)
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) }
        XCTAssertEqual(store.throttle.read(accountsDir: layout.accountsDir, name: name)?.failures, Int.max)
        XCTAssertEqual(time.sleeps, [30])

        try put(-1_000)
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) }
        XCTAssertEqual(store.throttle.read(accountsDir: layout.accountsDir, name: name)?.failures, 1)
    }

    func testRealDelayIsObservedAcrossStoreInstances() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        var strict = try AccountStore(layout: layout)
        strict.throttle.freeAttempts = 0
        assertThrows(.wrongPassword) { _ = try strict.open(user: "alice", password: self.pw("guess-guess")) }
        // A different instance (as another process would) reads the counter from disk.
        var other = try AccountStore(layout: layout)
        other.throttle.freeAttempts = 0
        let t0 = Date()
        _ = try other.open(user: "alice", password: pw("alice-password"))
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(t0), 0.9)
    }

    /// An attempt whose count cannot be written (here a directory in the counter's place, so
    /// the rename over it fails with EISDIR) is not judged, the right password neither. A
    /// count that is in place but whose directory fsync failed is in effect: the attempt
    /// goes on.
    func testAnAttemptThatCannotBeCountedIsNotJudged() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let name = try AccountName.derive(user: "alice", config: store.config)
        let path = layout.accountsDir + "/" + name.throttleFileName
        XCTAssertEqual(mkdir(path, 0o700), 0)
        for password in ["guess-guess", "alice-password"] {
            assertThrows(.attemptNotCounted(errno: EISDIR)) { _ = try self.store.open(user: "alice", password: self.pw(password)) }
        }
        XCTAssertEqual(StoreError.attemptNotCounted(errno: EISDIR).exitCode, 1)
        XCTAssertEqual(rmdir(path), 0)

        failAccountsDirectorySync()
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("guess-guess")) }
        XCTAssertEqual(store.throttle.read(accountsDir: layout.accountsDir, name: name)?.failures, 1)
        try store.open(user: "alice", password: pw("alice-password")).wipe()
    }
}
