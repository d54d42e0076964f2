import XCTest
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class HeaderTests: XCTestCase {
    func testLayoutAndRoundTripForEveryClassAndCipher() throws {
        let keyring = try Fixture.randomKeyring()
        for cipher in ContentCipher.allCases {
            for c in ProtectionClass.allCases {
                let h = FileHeader(protectionClass: c, cipher: cipher)
                let key = SecureBytes(randomCount: 32)
                let bytes = try h.encode(fileKey: key, keyring: keyring)
                XCTAssertEqual(bytes.count, 128)
                XCTAssertEqual(Array(bytes[0..<4]), [0x50, 0x56, 0x46, 0x00])
                XCTAssertEqual(bytes[4], 1); XCTAssertEqual(bytes[5], 0)
                XCTAssertEqual(bytes[6], c.rawValue)
                XCTAssertEqual(bytes[7], cipher.rawValue)
                XCTAssertEqual(Array(bytes[8..<24]), h.fileID)
                if c != .completeUnlessOpen {
                    XCTAssertEqual(Array(bytes[96..<128]), [UInt8](repeating: 0, count: 32), "unused slot tail is zero")
                }
                let (parsed, unwrapped) = try FileHeader.decode(bytes, keyring: keyring)
                XCTAssertEqual(parsed, h)
                XCTAssertEqual(bytesOf(unwrapped), bytesOf(key))
                XCTAssertEqual(try FileHeader.parse(bytes), h)
            }
        }
    }

    func testFileIDsAreRandom() {
        XCTAssertNotEqual(FileHeader(protectionClass: .complete, cipher: .aes256gcm).fileID,
                          FileHeader(protectionClass: .complete, cipher: .aes256gcm).fileID)
    }

    func testAnotherAccountCannotOpenTheHeader() throws {
        for c in ProtectionClass.allCases {
            let bytes = try FileHeader(protectionClass: c, cipher: .xchacha20poly1305)
                .encode(fileKey: SecureBytes(randomCount: 32), keyring: try Fixture.randomKeyring())
            XCTAssertIntegrityError(try FileHeader.decode(bytes, keyring: try Fixture.randomKeyring()), "\(c)")
        }
    }

    func testTruncatedHeaderIsAnIntegrityError() throws {
        let keyring = try Fixture.randomKeyring()
        let bytes = try FileHeader(protectionClass: .none, cipher: .aes256gcm).encode(fileKey: SecureBytes(randomCount: 32), keyring: keyring)
        for n in [0, 4, 24, 127] {
            XCTAssertIntegrityError(try FileHeader.decode(Array(bytes.prefix(n)), keyring: keyring), "\(n) bytes")
        }
    }

    func testUnknownVersionIsReportedAsSuch() throws {
        let keyring = try Fixture.randomKeyring()
        var bytes = try FileHeader(protectionClass: .none, cipher: .aes256gcm).encode(fileKey: SecureBytes(randomCount: 32), keyring: keyring)
        bytes[4] = 3
        XCTAssertThrowsError(try FileHeader.parse(bytes)) { XCTAssertEqual($0 as? StoreError, .unknownVersion(found: 3, supported: 2)) }
        // Version 2 (a file with holes) is read; its key slot binds the version byte too.
        bytes[4] = 2
        XCTAssertEqual(try FileHeader.parse(bytes).version, 2)
        XCTAssertIntegrityError(try FileHeader.decode(bytes, keyring: keyring), "a version byte changed without the key slot")
    }

    func testLockedClassesAreReportedAsLockedNotDamaged() throws {
        let keyring = try Fixture.randomKeyring()
        var headers: [ProtectionClass: [UInt8]] = [:]
        for c in ProtectionClass.allCases {
            headers[c] = try FileHeader(protectionClass: c, cipher: .aes256gcm).encode(fileKey: SecureBytes(randomCount: 32), keyring: keyring)
        }
        keyring.lock()
        for c in [ProtectionClass.complete, .completeUnlessOpen] {
            XCTAssertThrowsError(try FileHeader.decode(headers[c]!, keyring: keyring)) { XCTAssertEqual($0 as? StoreError, .locked) }
        }
        for c in [ProtectionClass.untilFirstAuth, .none] { XCTAssertNoThrow(try FileHeader.decode(headers[c]!, keyring: keyring)) }
        // While locked, a complete-unless-open header can still be written (public key only);
        // a complete one cannot.
        XCTAssertNoThrow(try FileHeader(protectionClass: .completeUnlessOpen, cipher: .aes256gcm)
            .encode(fileKey: SecureBytes(randomCount: 32), keyring: keyring))
        XCTAssertThrowsError(try FileHeader(protectionClass: .complete, cipher: .aes256gcm)
            .encode(fileKey: SecureBytes(randomCount: 32), keyring: keyring))
    }
}

func bytesOf(_ s: SecureBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }
