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
}
