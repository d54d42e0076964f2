import Foundation
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// The recovery key: format, typo detection, password reset (CREDENTIALS.md, "Recovery key").
final class CredentialRecoveryTests: CredentialTestCase {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")

    func fixedKey() -> RecoveryKey { RecoveryKey(bytes: SecureBytes(copying: (0..<32).map { UInt8($0 * 7 + 3) })) }

    /// The two key-encryption keys that are plain BLAKE2b (CREDENTIALS.md): the expected
    /// values were computed independently, with Python's hashlib.blake2b.
    func testRecoveryAndDeviceKEKsMatchIndependentBLAKE2b() {
        let rk = RecoveryKey(bytes: SecureBytes(copying: Array(0..<32)))
        XCTAssertEqual(rk.keyEncryptionKey().withUnsafeBytes { Self.hex($0) },
                       "2fa084d1eaffebbff1652b685857eb4f2ff4c59ed1de13f63607c8ad6dfd1092")
        let bound = DeviceSecret.bind(SecureBytes(copying: Array(200..<232)), to: SecureBytes(copying: Array(100..<132)))
        XCTAssertEqual(bound.withUnsafeBytes { Self.hex($0) },
                       "b54f23fad656b3f16e502c07bac960925dcab6ebffd978c29ff50782715acdc7")
    }

    static func hex(_ b: UnsafeRawBufferPointer) -> String { b.map { String(format: "%02x", $0) }.joined() }

    func testFormatIsFourteenGroupsOfFourBase32() throws {
        let text = RecoveryKey().formatted
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        XCTAssertEqual(groups.count, 14)
        for g in groups {
            XCTAssertEqual(g.count, 4)
            XCTAssertTrue(g.allSatisfy { alphabet.contains($0) }, String(g))
        }
    }

    func testBase32MatchesRFC4648() {
        // RFC 4648 section 10 test vector "foobar" -> MZXW6YTBOI (unpadded).
        let out = Array("foobar".utf8).withUnsafeBytes { RecoveryKey.base32($0) }
        XCTAssertEqual(String(decoding: out, as: UTF8.self), "MZXW6YTBOI")
    }

    func testParseRoundTripAndLenientSpelling() throws {
        let k = fixedKey()
        let text = k.formatted
        for variant in [text, text.lowercased(), text.replacingOccurrences(of: "-", with: ""),
                        text.replacingOccurrences(of: "-", with: " ") + "\n"] {
            let p = try RecoveryKey.parse(variant)
            XCTAssertTrue(p.bytes.withUnsafeBytes { x in k.bytes.withUnsafeBytes { constantTimeEqual(x, $0) } })
        }
    }

    /// A key pasted twice is reported with its real length (the parser keeps at most 57
    /// characters, so its buffer never reallocates and leaves a copy behind).
    func testOverlongInputIsCountedInTheMessage() {
        let text = fixedKey().formatted
        XCTAssertThrowsError(try RecoveryKey.parse(text + " " + text)) { e in
            XCTAssertEqual(e as? StoreError, .invalidArgument(
                "a recovery key has 56 letters and digits (14 groups of 4); this one has 112"))
        }
    }

    func testEverySingleCharacterTypoIsCaught() throws {
        let chars = Array(fixedKey().formatted.replacingOccurrences(of: "-", with: ""))
        XCTAssertEqual(chars.count, 56)
        for i in 0..<chars.count {
            for delta in [1, 17] {
                var typo = chars
                typo[i] = alphabet[(alphabet.firstIndex(of: chars[i])! + delta) % 32]
                XCTAssertThrowsError(try RecoveryKey.parse(String(typo)), "position \(i)") { e in
                    guard case StoreError.invalidArgument = e else { return XCTFail("got \(e)") }
                }
            }
        }
        // Swapped neighbours, a dropped character, a foreign character.
        for i in 0..<(chars.count - 1) where chars[i] != chars[i + 1] {
            var t = chars; t.swapAt(i, i + 1)
            XCTAssertThrowsError(try RecoveryKey.parse(String(t)), "swap at \(i)")
        }
        XCTAssertThrowsError(try RecoveryKey.parse(String(chars.dropLast())))
        var foreign = chars; foreign[5] = "0"
        XCTAssertThrowsError(try RecoveryKey.parse(String(foreign)))
    }

    func testResetPasswordWithRecoveryKey() throws {
        let rk = try store.add(user: "alice", password: pw("forgotten password"), deviceBound: false, parameters: fast)
        let recovery = rk.formatted
        rk.wipe()
        let before = try store.open(user: "alice", password: pw("forgotten password"))
        try store.resetPassword(user: "alice", recoveryKey: recovery.lowercased(), new: pw("brand new password"))
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("forgotten password")) }
        let after = try store.open(user: "alice", password: pw("brand new password"))
        XCTAssertEqual(after.treeID, before.treeID)
        XCTAssertEqual(try fingerprint(after), try fingerprint(before))
        // The recovery key keeps working, also handed over in secure memory (as the CLI reads it).
        try store.resetPassword(user: "alice", recoveryKey: SecureBytes(copying: Array(recovery.utf8)), new: pw("yet another one"))
        _ = try store.open(user: "alice", password: pw("yet another one"))
    }

    func testMistypedOrForeignRecoveryKeyIsRejected() throws {
        let rk = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let bobKey = try store.add(user: "bob", password: pw("bob-password"), deviceBound: false, parameters: fast).formatted
        var chars = Array(rk.formatted)
        chars[0] = chars[0] == "A" ? "B" : "A"
        XCTAssertThrowsError(try store.resetPassword(user: "alice", recoveryKey: String(chars), new: pw("new password"))) { e in
            XCTAssertEqual(e as? StoreError, .invalidArgument("the recovery key is mistyped (its checksum does not match)"))
        }
        XCTAssertThrowsError(try store.resetPassword(user: "alice", recoveryKey: bobKey, new: pw("new password"))) { e in
            XCTAssertEqual(e as? StoreError, .invalidArgument("that recovery key does not open this account"))
        }
        assertThrows(.passwordTooShort(minimum: 8)) { try self.store.resetPassword(user: "alice", recoveryKey: rk.formatted, new: self.pw("short")) }
        assertThrows(.noSuchAccount) { try self.store.resetPassword(user: "carol", recoveryKey: rk.formatted, new: self.pw("new password")) }
        // Nothing changed.
        _ = try store.open(user: "alice", password: pw("alice-password"))
    }
}
