import XCTest
@testable import PhotoVaultCrypto

final class UserKeyringTests: XCTestCase {
    private func classKey(_ k: UserKeyring, _ c: ProtectionClass) throws -> [UInt8] {
        try k.withClassKey(c) { bytesOf($0) }
    }

    func testDerivedFromMasterKeyDeterministically() throws {
        let a = try UserKeyring(masterKey: fixedMasterKey()), b = try UserKeyring(masterKey: fixedMasterKey())
        XCTAssertEqual(a.classBPublicKey, b.classBPublicKey)
        for c in [ProtectionClass.complete, .untilFirstAuth, .none] {
            XCTAssertEqual(try classKey(a, c), try classKey(b, c))
            XCTAssertEqual(try classKey(a, c),
                           bytesOf(try SubkeyDerivation.derive(from: fixedMasterKey(), id: UInt64(c == .complete ? 1 : c == .untilFirstAuth ? 3 : 4),
                                                           context: UserKeyring.context)))
        }
        XCTAssertEqual(bytesOf(a.metadataKey), bytesOf(try SubkeyDerivation.derive(from: fixedMasterKey(), id: 7, context: "PVacct01")))
        let keys = try [classKey(a, .complete), classKey(a, .untilFirstAuth), classKey(a, .none), bytesOf(a.metadataKey)]
        XCTAssertEqual(Set(keys).count, 4)
        let other = try UserKeyring(masterKey: fixedMasterKey(offset: 1))
        XCTAssertNotEqual(other.classBPublicKey, a.classBPublicKey)
    }

    func testLockForgetsCompleteAndClassBSecretOnly() throws {
        let k = try UserKeyring(masterKey: fixedMasterKey())
        let ufa = try classKey(k, .untilFirstAuth), none = try classKey(k, .none)
        let pub = k.classBPublicKey
        let meta = bytesOf(k.metadataKey)
        let sealedName = k.names.seal(Array("a.jpg".utf8), domain: [UInt8](repeating: 0, count: 16))
        for c in ProtectionClass.allCases { XCTAssertTrue(k.canOpen(c)) }

        k.lock()
        XCTAssertTrue(k.isLocked)
        XCTAssertFalse(k.canOpen(.complete))
        XCTAssertFalse(k.canOpen(.completeUnlessOpen))
        XCTAssertTrue(k.canOpen(.untilFirstAuth))
        XCTAssertTrue(k.canOpen(.none))
        XCTAssertThrowsError(try classKey(k, .complete)) { XCTAssertEqual($0 as? CryptoError, .keyUnavailable) }
        XCTAssertThrowsError(try k.withClassBSecretKey { _ in () }) { XCTAssertEqual($0 as? CryptoError, .keyUnavailable) }
        XCTAssertEqual(try classKey(k, .untilFirstAuth), ufa)
        XCTAssertEqual(try classKey(k, .none), none)
        XCTAssertEqual(k.classBPublicKey, pub)
        XCTAssertEqual(bytesOf(k.metadataKey), meta)
        XCTAssertEqual(try k.names.open(sealedName, domain: [UInt8](repeating: 0, count: 16)), Array("a.jpg".utf8))
    }

    func testUnlockRestoresOnlyWithTheSameMasterKey() throws {
        let k = try UserKeyring(masterKey: fixedMasterKey())
        let complete = try classKey(k, .complete)
        k.lock()
        XCTAssertFalse(try k.unlock(masterKey: fixedMasterKey(offset: 9)))   // another account's key: ignored
        XCTAssertTrue(k.isLocked)
        XCTAssertFalse(k.canOpen(.complete))
        XCTAssertTrue(try k.unlock(masterKey: fixedMasterKey()))
        XCTAssertFalse(k.isLocked)
        XCTAssertEqual(try classKey(k, .complete), complete)
        XCTAssertTrue(k.canOpen(.completeUnlessOpen))
    }

    func testWipeAllForgetsEverything() throws {
        let k = try UserKeyring(masterKey: fixedMasterKey())
        k.wipeAll()
        for c in ProtectionClass.allCases { XCTAssertFalse(k.canOpen(c)) }
        XCTAssertTrue(k.metadataKey.isWiped)
        XCTAssertThrowsError(try k.withClassKey(.none) { _ in () })
    }

    func testProtectionClassNames() {
        for c in ProtectionClass.allCases { XCTAssertEqual(ProtectionClass(name: c.name), c) }
        XCTAssertNil(ProtectionClass(name: "sometimes"))
        XCTAssertEqual(ProtectionClass.default, .complete)
    }
}

final class PasswordKDFTests: XCTestCase {
    func testDeterministicAndSaltSensitive() throws {
        let pw = Array("correct horse".utf8)
        let salt = [UInt8](repeating: 3, count: PasswordKDF.saltSize)
        let a = try pw.withUnsafeBytes { try PasswordKDF.derive(password: $0, salt: salt, parameters: .testing) }
        let b = try pw.withUnsafeBytes { try PasswordKDF.derive(password: $0, salt: salt, parameters: .testing) }
        XCTAssertEqual(bytesOf(a), bytesOf(b))
        let c = try pw.withUnsafeBytes { try PasswordKDF.derive(password: $0, salt: [UInt8](repeating: 4, count: 16), parameters: .testing) }
        XCTAssertNotEqual(bytesOf(a), bytesOf(c))
        XCTAssertThrowsError(try pw.withUnsafeBytes { try PasswordKDF.derive(password: $0, salt: [1, 2], parameters: .testing) }) {
            XCTAssertEqual($0 as? CryptoError, .invalidLength(expected: 16, got: 2))
        }
    }

    /// A memory limit beyond Int is an error, not a trap (callers bound it first).
    func testOutOfRangeMemoryLimitThrows() {
        let pw = Array("correct horse".utf8)
        let salt = [UInt8](repeating: 3, count: PasswordKDF.saltSize)
        let huge = Argon2Parameters(opsLimit: 1, memLimit: UInt64(Int.max) + 1)
        XCTAssertThrowsError(try pw.withUnsafeBytes { try PasswordKDF.derive(password: $0, salt: salt, parameters: huge) }) {
            guard case .libsodiumFailure(let what)? = $0 as? CryptoError else { return XCTFail("\($0)") }
            XCTAssertTrue(what.contains("out of range"), what)
        }
    }

    func testParameterFloorOrdering() {
        XCTAssertTrue(Argon2Parameters.standard.isAtLeast(.floor))
        XCTAssertFalse(Argon2Parameters.testing.isAtLeast(.floor))
        XCTAssertFalse(Argon2Parameters(opsLimit: 10, memLimit: 1 << 20).isAtLeast(.floor))
    }
}
