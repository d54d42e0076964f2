import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Edited, renamed, copied and damaged records (CREDENTIALS.md, "Record").
final class CredentialRecordTests: CredentialTestCase {
    var recordPath: String { layout.accountsDir + "/" + (try! recordFiles())[0] }

    func editRecord(_ path: String? = nil, _ edit: (inout [String: Any]) -> Void) throws {
        let p = path ?? recordPath
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: p))) as! [String: Any]
        edit(&json)
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: p))
    }

    func throttleFiles() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: layout.accountsDir).filter { $0.hasSuffix(".throttle") }
    }

    func testRecordCopiedFromAnotherStoreIsRefused() throws {
        // Store B shares A's record-name salt, so the copied record lands under exactly the
        // name B would look up: only the store ID in the associated data differs.
        var cb = StoreConfig()
        cb.accountNameSalt = store.config.accountNameSalt
        let lb = try makeStore("other", config: cb)
        let storeB = try AccountStore(layout: lb)
        XCTAssertNotEqual(storeB.config.storeID, store.config.storeID)
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let name = try recordFiles()[0]
        XCTAssertEqual(try AccountName.derive(user: "alice", config: storeB.config).recordFileName, name)
        try FileManager.default.copyItem(atPath: recordPath, toPath: lb.accountsDir + "/" + name)
        XCTAssertTrue(try storeB.exists(user: "alice"))
        assertThrows(.wrongPassword) { _ = try storeB.open(user: "alice", password: self.pw("alice-password")) }
        // The original still opens in its own store.
        _ = try store.open(user: "alice", password: pw("alice-password"))
    }

    func testRecordRenamedToAnotherUsersNameIsRefused() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let aliceName = try AccountName.derive(user: "alice", config: store.config).recordFileName
        _ = try store.add(user: "bob", password: pw("bob-password"), deviceBound: false, parameters: fast)
        let bobName = try AccountName.derive(user: "bob", config: store.config).recordFileName
        XCTAssertEqual(rename(layout.accountsDir + "/" + aliceName, layout.accountsDir + "/" + bobName), 0)
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "bob", password: self.pw("alice-password")) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "bob", password: self.pw("bob-password")) }
        assertThrows(.noSuchAccount) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
    }

    func testLoweredCostIsRefusedBeforeArgon2Runs() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        for (ops, mem) in [(1, 64 << 20), (2, 32 << 20), (1, 8 << 20)] {
            try editRecord { $0["kdf"] = ["opsLimit": ops, "memLimit": mem] }
            assertThrows(.weakKDFParameters) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
            assertThrows(.weakKDFParameters) { try self.store.changePassword(user: "alice", old: self.pw("alice-password"), new: self.pw("other-password")) }
        }
        // No password was judged, so no failure was counted.
        XCTAssertEqual(try throttleFiles(), [])
    }

    func testRecoveryResetRepairsALoweredCost() throws {
        let rk = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        try editRecord { $0["kdf"] = ["opsLimit": 1, "memLimit": 8 << 20] }
        assertThrows(.weakKDFParameters) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        // The recovery slot does not depend on the cost; the reset writes the default one.
        try store.resetPassword(user: "alice", recoveryKey: rk.formatted, new: pw("repaired password"))
        XCTAssertEqual(try AccountRecord.decode(FileIO.readFile(recordPath)).kdf, .standard)
        _ = try store.open(user: "alice", password: pw("repaired password"))
    }

    func testStoreFloorAboveTheGlobalFloorIsEnforced() throws {
        var c = StoreConfig()
        c.kdfFloor = Argon2Parameters(opsLimit: 3, memLimit: 64 << 20)
        let l = try makeStore("strict", config: c)
        let strict = try AccountStore(layout: l)
        assertThrows(.weakKDFParameters) { _ = try strict.add(user: "alice", password: self.pw("alice-password"), deviceBound: false, parameters: self.fast) }
        _ = try strict.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: c.kdfFloor)
        _ = try strict.open(user: "alice", password: pw("alice-password"))
    }

    func testRaisedButTamperedCostIsRefused() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        try editRecord { $0["kdf"] = ["opsLimit": 3, "memLimit": 64 << 20] }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        try editRecord { $0["kdf"] = ["opsLimit": 1000, "memLimit": 64 << 20] }
        XCTAssertThrowsError(try store.open(user: "alice", password: pw("alice-password"))) { e in
            guard case StoreError.corruptRecord = e else { return XCTFail("got \(e)") }
        }
    }

    func testTamperedFieldsAreRefused() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let original = try Data(contentsOf: URL(fileURLWithPath: recordPath))
        // Another salt: the password derives another key.
        try editRecord { $0["salt"] = Base64URL.encode(SecureRandom.bytes(16)) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        // A flipped ciphertext byte.
        try original.write(to: URL(fileURLWithPath: recordPath))
        try editRecord {
            var slot = Base64URL.decode($0["passwordSlot"] as! String)!
            slot[40] ^= 1
            $0["passwordSlot"] = Base64URL.encode(slot)
        }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        // Claiming device binding on an unbound record.
        try original.write(to: URL(fileURLWithPath: recordPath))
        let id = try DeviceSecret.id(of: DeviceSecret.loadOrCreate(at: DeviceSecret.path()))
        try editRecord { $0["deviceBound"] = true; $0["deviceID"] = Base64URL.encode(id) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        try original.write(to: URL(fileURLWithPath: recordPath))
        _ = try store.open(user: "alice", password: pw("alice-password"))
    }

    func testUnknownVersion() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        try editRecord { $0["version"] = 2 }
        assertThrows(.unknownVersion(found: 2, supported: 1)) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        // A future version may change every other field: the version is judged first.
        try editRecord { $0 = ["format": "photovault-account", "version": 7, "future": true] }
        assertThrows(.unknownVersion(found: 7, supported: 1)) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
    }

    func testCorruptRecords() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let original = try FileIO.readFile(recordPath)
        func expectCorrupt(_ bytes: [UInt8], line: UInt = #line) throws {
            try Data(bytes).write(to: URL(fileURLWithPath: recordPath))
            XCTAssertThrowsError(try store.open(user: "alice", password: pw("alice-password")), line: line) { e in
                guard case StoreError.corruptRecord = e else { return XCTFail("got \(e)", line: line) }
            }
        }
        try expectCorrupt(Array(original[0..<original.count / 2]))       // truncated
        try expectCorrupt([])                                              // empty
        try expectCorrupt(SecureRandom.bytes(300))                         // garbage
        try expectCorrupt(Array(#"{"format":"something-else","version":1}"#.utf8))
        try expectCorrupt(Array(#"{"format":"photovault-account"}"#.utf8))
        try expectCorrupt([UInt8](repeating: 0x20, count: AccountRecord.maximumFileSize + 1))
        try Data(original).write(to: URL(fileURLWithPath: recordPath))
        try editRecord { $0["passwordSlot"] = Base64URL.encode(SecureRandom.bytes(87)) }
        XCTAssertThrowsError(try store.open(user: "alice", password: pw("alice-password"))) { e in
            guard case StoreError.corruptRecord = e else { return XCTFail("got \(e)") }
        }
        try Data(original).write(to: URL(fileURLWithPath: recordPath))
        try editRecord { $0.removeValue(forKey: "recoverySlot") }
        XCTAssertThrowsError(try store.open(user: "alice", password: pw("alice-password"))) { e in
            guard case StoreError.corruptRecord = e else { return XCTFail("got \(e)") }
        }
    }

    /// Reads a record exactly as CREDENTIALS.md describes it, with nothing but libsodium
    /// primitives: proves the document is enough to write a compatible reader.
    func testRecordFollowsTheDocumentedFormat() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let opened = try store.open(user: "alice", password: pw("alice-password"))
        let cfg = store.config
        // File name: hex(Argon2id(NFC(user), accountNameSalt, accountNameKDF)) + ".rec"
        let nameHash = try Array("alice".utf8).withUnsafeBytes {
            try PasswordKDF.derive(password: $0, salt: cfg.accountNameSalt, parameters: cfg.accountNameKDF)
        }
        let fileName = nameHash.withUnsafeBytes { Base64Hex.hex(Array($0)) } + ".rec"
        XCTAssertEqual(try recordFiles(), [fileName])
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: layout.accountsDir + "/" + fileName))) as! [String: Any]
        XCTAssertEqual(Set(json.keys), ["format", "version", "kdf", "salt", "deviceBound", "passwordSlot", "recoverySlot"])
        XCTAssertEqual(json["format"] as? String, "photovault-account")
        XCTAssertEqual(json["version"] as? Int, 1)
        let kdf = json["kdf"] as! [String: Any]
        let ops = UInt64(kdf["opsLimit"] as! Int), mem = UInt64(kdf["memLimit"] as! Int)
        let salt = Base64URL.decode(json["salt"] as! String)!
        let slot = Base64URL.decode(json["passwordSlot"] as! String)!
        XCTAssertEqual(slot.count, 88)
        // AD = label || 0 || u32le version || storeID || u16le len || file name
        //      || u64le ops || u64le mem || salt || u8 deviceBound || 16 zero bytes
        var ad = Array("PhotoVault account record password slot".utf8) + [0, 1, 0, 0, 0] + cfg.storeID
        ad += [UInt8(fileName.utf8.count), 0] + Array(fileName.utf8)
        for v in [ops, mem] { for i in 0..<8 { ad.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) } }
        ad += salt + [0] + [UInt8](repeating: 0, count: 16)
        let kek = try PasswordKDF.derive(password: pw("alice-password"), salt: salt, parameters: Argon2Parameters(opsLimit: ops, memLimit: mem))
        let payload = try SecretBox.open(slot, key: kek, ad: ad)
        XCTAssertEqual(payload.count, 48)
        XCTAssertEqual(Array(payload[32..<48]), opened.treeID)
        XCTAssertTrue(opened.masterKey.withUnsafeBytes { constantTimeEqual(Array($0), Array(payload[0..<32])) })
    }
}
