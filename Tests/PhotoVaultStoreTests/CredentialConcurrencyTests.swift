import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Mutations are serialised by `flock(accounts/.lock)` (CREDENTIALS.md, "Concurrency").
final class CredentialConcurrencyTests: CredentialTestCase {
    func testConcurrentAddsFromTwoStoresLoseNothing() throws {
        let layout = self.layout!
        let fast = self.fast
        let guardFailures = NSLock()
        nonisolated(unsafe) var failures: [String] = []
        let finished = DispatchSemaphore(value: 0)
        for t in 0..<2 {
            Thread {
                defer { finished.signal() }
                do {
                    let s = try AccountStore(layout: layout)   // its own instance, its own lock fd
                    for i in 0..<3 {
                        _ = try s.add(user: "user-\(t)-\(i)", password: SecureBytes(copying: Array("password-\(t)-\(i)".utf8)),
                                      deviceBound: false, parameters: fast)
                    }
                } catch {
                    guardFailures.lock(); failures.append("\(error)"); guardFailures.unlock()
                }
            }.start()
        }
        finished.wait(); finished.wait()
        XCTAssertEqual(failures, [])
        XCTAssertEqual(try store.count(), 6)
        for t in 0..<2 { for i in 0..<3 {
            _ = try store.open(user: "user-\(t)-\(i)", password: pw("password-\(t)-\(i)"))
        } }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.usersDir).count, 6)
    }

    func testLockHeldByAnotherProcessGivesStoreBusy() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        // flock(1) takes the lock in another process and keeps it until its stdin closes.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = ["-x", layout.accountsDir + "/.lock", "/bin/sh", "-c", "echo locked; exec cat"]
        let input = Pipe(), output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        try holder.run()
        defer {
            try? input.fileHandleForWriting.close()
            holder.waitUntilExit()
        }
        let line = output.fileHandleForReading.availableData
        XCTAssertEqual(String(decoding: line, as: UTF8.self), "locked\n")

        var busy = store!
        busy.lockTimeout = 0.5
        let t0 = AccountsLock.monotonicSeconds()
        assertThrows(.storeBusy) { _ = try busy.add(user: "bob", password: self.pw("bob-password"), deviceBound: false, parameters: self.fast) }
        XCTAssertGreaterThanOrEqual(AccountsLock.monotonicSeconds() - t0, 0.5)
        assertThrows(.storeBusy) { try busy.changePassword(user: "alice", old: self.pw("alice-password"), new: self.pw("other password")) }
        assertThrows(.storeBusy) { try busy.remove(user: "alice", password: self.pw("alice-password"), deletePhotos: true) }
        // Readers do not need the lock.
        _ = try busy.open(user: "alice", password: pw("alice-password"))
        XCTAssertEqual(try busy.count(), 1)
        XCTAssertFalse(try busy.exists(user: "bob"))

        // Once the other process lets go, the same call succeeds.
        try input.fileHandleForWriting.close()
        holder.waitUntilExit()
        XCTAssertEqual(holder.terminationStatus, 0)
        _ = try busy.add(user: "bob", password: pw("bob-password"), deviceBound: false, parameters: fast)
        XCTAssertEqual(try busy.count(), 2)
    }

    func testWaitingForAShortLockSucceeds() throws {
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = ["-x", layout.accountsDir + "/.lock", "/bin/sh", "-c", "echo locked; sleep 0.4"]
        let output = Pipe()
        holder.standardOutput = output
        try holder.run()
        defer { holder.waitUntilExit() }
        XCTAssertEqual(String(decoding: output.fileHandleForReading.availableData, as: UTF8.self), "locked\n")
        var s = store!
        s.lockTimeout = 10
        _ = try s.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        XCTAssertEqual(try s.count(), 1)
    }

    /// Someone guessing one account's password waits out its throttle (up to 30 s a guess)
    /// without holding the store-wide lock: the other accounts can still be added, changed
    /// and removed meanwhile (they used to get 'store busy' after the lock timeout).
    func testThrottleWaitOfOneAccountDoesNotHoldTheLock() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        _ = try store.add(user: "carol", password: pw("carol-password"), deviceBound: false, parameters: fast)
        let name = try AccountName.derive(user: "alice", config: store.config)
        let json = "{\"failures\": 20, \"lastFailure\": \(Date().timeIntervalSince1970)}"
        try AtomicFile.write(Array(json.utf8), to: layout.accountsDir + "/" + name.throttleFileName)

        let waiting = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        let guessing = { (op: @escaping @Sendable (AccountStore) throws -> Void) in
            var guesser = self.store!
            guesser.throttle.sleep = { _ in waiting.signal(); release.wait() }
            let g = guesser
            Thread {
                defer { done.signal() }
                do { try op(g); XCTFail("a wrong password was accepted") } catch {
                    XCTAssertEqual(error as? StoreError, .wrongPassword, "the guess failed otherwise: \(error)")
                }
            }.start()
            XCTAssertEqual(waiting.wait(timeout: .now() + 20), .success)
        }
        var other = store!
        other.lockTimeout = 0.5
        guessing { try $0.remove(user: "alice", password: SecureBytes(copying: Array("guess-guess".utf8)), deletePhotos: true) }
        XCTAssertNoThrow(try other.add(user: "bob", password: pw("bob-password"), deviceBound: false, parameters: fast))
        release.signal(); done.wait()

        guessing { try $0.changePassword(user: "alice", old: SecureBytes(copying: Array("guess-guess".utf8)),
                                         new: SecureBytes(copying: Array("new password".utf8))) }
        XCTAssertNoThrow(try other.changePassword(user: "carol", old: pw("carol-password"), new: pw("carol-password-2")))
        release.signal(); done.wait()
        XCTAssertEqual(try store.count(), 3)
    }

    // MARK: a password change in two halves (the new password typed in between)

    /// begin + finish: the current password opens once, the key it unwrapped is rewrapped
    /// under the new one (same keys, same tree), under the lock.
    func testAPasswordChangeInTwoHalvesKeepsTheKeys() throws {
        let rk = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let before = try store.open(user: "alice", password: pw("alice-password"))
        let change = try store.beginPasswordChange(user: "alice", current: pw("alice-password"))
        defer { change.wipe() }
        try store.finishPasswordChange(change, new: pw("alice-new-password"))
        let after = try store.open(user: "alice", password: pw("alice-new-password"))
        XCTAssertEqual(try fingerprint(after), try fingerprint(before))
        XCTAssertEqual(after.treeID, before.treeID)
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        try store.resetPassword(user: "alice", recoveryKey: rk.formatted, new: pw("after a reset"))   // recovery slot untouched
        // Checks that cost nothing come first: a bad new password changes nothing.
        let again = try store.beginPasswordChange(user: "alice", current: pw("after a reset"))
        defer { again.wipe() }
        assertThrows(.passwordTooShort(minimum: 8)) { try self.store.finishPasswordChange(again, new: self.pw("short")) }
        assertThrows(.wrongPassword) { _ = try self.store.beginPasswordChange(user: "alice", current: self.pw("alice-new-password")) }
        XCTAssertNoThrow(try store.open(user: "alice", password: pw("after a reset")).wipe())
    }

    /// The record changed between the halves (another passwd, a reset, a remove and add from
    /// another store instance): the change is refused and the record left as the other
    /// command wrote it. A removed account is 'no such account'.
    func testAPasswordChangeWhoseRecordChangedMeanwhileIsRefused() throws {
        let rk = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let other = try AccountStore(layout: layout)
        func record() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: layout.accountsDir + "/" + recordFiles()[0])) }
        let meanwhile: [(String, () throws -> Void)] = [
            // Each leaves the same password: what changed is the record, not what opens it.
            ("passwd", { try other.changePassword(user: "alice", old: self.pw("alice-password"), new: self.pw("alice-password")) }),
            ("reset", { try other.resetPassword(user: "alice", recoveryKey: rk.formatted, new: self.pw("alice-password")) }),
            ("remove and add", {
                try other.remove(user: "alice", password: self.pw("alice-password"), deletePhotos: false)
                _ = try other.add(user: "alice", password: self.pw("alice-password"), deviceBound: false, parameters: self.fast)
            }),
        ]
        for (what, change) in meanwhile {
            let pending = try store.beginPasswordChange(user: "alice", current: pw("alice-password"))
            defer { pending.wipe() }
            try change()
            let written = try record()
            assertThrows(.accountChangedMeanwhile) { try self.store.finishPasswordChange(pending, new: self.pw("never written")) }
            XCTAssertEqual(try record(), written, what)
            assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("never written")) }
        }
        let pending = try store.beginPasswordChange(user: "alice", current: pw("alice-password"))
        try other.remove(user: "alice", password: pw("alice-password"), deletePhotos: true)
        assertThrows(.noSuchAccount) { try self.store.finishPasswordChange(pending, new: self.pw("never written")) }
        XCTAssertEqual(try recordFiles(), [])
    }
}
