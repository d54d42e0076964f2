import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Nothing a user types ends up in the store; the real unlock cost.
final class CredentialLeakTests: CredentialTestCase {
    func testNoUserNameOrPasswordInAnyStoreFile() throws {
        let users = ["alice-the-photographer", "Bob Example", "Zoë"]
        let passwords = ["alice-secret-pw", "bob's secret", "zoë secret pw", "changed-secret", "reset-secret-pw"]
        var recovery = [String]()
        for (i, u) in users.enumerated() {
            recovery.append(try store.add(user: u, password: pw(passwords[i]), deviceBound: i == 2, parameters: fast).formatted)
        }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: users[0], password: self.pw("wrong-guess-pw")) }
        try store.changePassword(user: users[0], old: pw(passwords[0]), new: pw(passwords[3]))
        try store.resetPassword(user: users[1], recoveryKey: recovery[1], new: pw(passwords[4]))

        var needles = [String]()
        for s in users + passwords + ["wrong-guess-pw"] + recovery {
            needles += [s, s.lowercased(), Base64URL.encode(Array(s.utf8)), Base64Hex.hex(Array(s.utf8))]
        }
        needles += recovery.map { $0.replacingOccurrences(of: "-", with: "") }
        var files = 0
        let e = FileManager.default.enumerator(atPath: layout.root)!
        while let rel = e.nextObject() as? String {
            let path = layout.root + "/" + rel
            var st = stat()
            guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            files += 1
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            // Also the file name itself.
            for n in needles {
                XCTAssertNil(data.range(of: Data(n.utf8)), "\(n) found in \(rel)")
                XCTAssertFalse(rel.contains(n), "\(n) in the name \(rel)")
            }
        }
        XCTAssertGreaterThanOrEqual(files, 4)   // config, 3 records (+ tree root infos)
    }

    /// Peak resident memory (VmHWM) in KiB, from /proc/self/status.
    func peakRSS() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }!
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])!
    }

    /// Measures one unlock at the default cost (the number quoted in CREDENTIALS.md).
    func testUnlockTimeAtStandardCost() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: .standard)
        // Writing 5 to clear_refs resets the peak-RSS counter, so the peak below is this unlock's.
        try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        let baseline = try peakRSS()
        var times = [Double]()
        for _ in 0..<3 {
            let t0 = Date()
            let a = try store.open(user: "alice", password: pw("alice-password"))
            times.append(Date().timeIntervalSince(t0))
            a.wipe()
        }
        let peak = try peakRSS()
        let t0 = Date()
        let kek = try PasswordKDF.derive(password: pw("alice-password"), salt: SecureRandom.bytes(16), parameters: .standard)
        let argonOnly = Date().timeIntervalSince(t0)
        kek.wipe()
        print(String(format: "CREDENTIAL-COST: unlock at .standard (ops 3, 256 MiB): %.3f / %.3f / %.3f s (Argon2id alone %.3f s); peak RSS during unlock +%d MiB",
                     times[0], times[1], times[2], argonOnly, (peak - baseline) / 1024))
        XCTAssertEqual(times.count, 3)
        XCTAssertGreaterThanOrEqual(peak - baseline, 200 * 1024, "Argon2id at .standard should really touch ~256 MiB")
    }
}

/// Opening an account leaves no time on its record: the record's access time, next to the
/// `.pvmount` a mount creates and the tree root it lists, told which tree is whose.
final class CredentialAccessTimeTests: CredentialTestCase {
    func atime(_ path: String) -> timespec {
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0, path)
        return st.st_atim
    }

    func testOpeningAnAccountLeavesTheRecordsAccessTimeAlone() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let record = store.recordPath(try AccountName.derive(user: "alice", config: store.config))
        // An access time older than the modification time: relatime updates it on the next read.
        var st = stat()
        XCTAssertEqual(stat(record, &st), 0)
        var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), st.st_mtim]
        XCTAssertEqual(utimensat(AT_FDCWD, record, &times, 0), 0)

        let a = try store.open(user: "alice", password: pw("alice-password"))
        a.wipe()
        XCTAssertTrue(try store.exists(user: "alice"))
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("wrong-password")) }
        XCTAssertEqual(atime(record).tv_sec, 1_000_000, "opening the account updated its record's access time")

        // The file system does record access times: a plain read moves it.
        let fd = open(record, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var byte: UInt8 = 0
        XCTAssertEqual(read(fd, &byte, 1), 1)
        close(fd)
        XCTAssertNotEqual(atime(record).tv_sec, 1_000_000, "this file system does not update access times: the test proves nothing")
    }
}
