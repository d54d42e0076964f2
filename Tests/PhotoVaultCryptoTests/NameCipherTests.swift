import XCTest
@testable import PhotoVaultCrypto

final class NameCipherTests: XCTestCase {
    let cipher = NameCipher(macKey: SecureBytes(copying: [UInt8](repeating: 1, count: 32)),
                            encKey: SecureBytes(copying: [UInt8](repeating: 2, count: 32)))
    let d1 = [UInt8](repeating: 0x11, count: 16)
    let d2 = [UInt8](repeating: 0x22, count: 16)

    func testDeterministicPerDomainAndPadded() throws {
        for n in 1...80 {
            let name = [UInt8](repeating: 0x61, count: n)
            let a = cipher.seal(name, domain: d1)
            XCTAssertEqual(a, cipher.seal(name, domain: d1))
            XCTAssertNotEqual(a, cipher.seal(name, domain: d2))
            XCTAssertEqual(a.count, NameCipher.sivSize + (n + 15) / 16 * 16)
            XCTAssertEqual(try cipher.open(a, domain: d1), name)
            XCTAssertThrowsError(try cipher.open(a, domain: d2))
        }
    }

    func testEveryFlippedByteIsRejected() {
        let sealed = cipher.seal(Array("IMG_0001.HEIC".utf8), domain: d1)
        for i in 0..<sealed.count {
            for mask: UInt8 in [0x01, 0x80] {
                var t = sealed
                t[i] ^= mask
                XCTAssertThrowsError(try cipher.open(t, domain: d1), "byte \(i)") {
                    XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
                }
            }
        }
    }

    func testMalformedLengthsAreRejected() {
        let sealed = cipher.seal(Array("x".utf8), domain: d1)
        XCTAssertThrowsError(try cipher.open(Array(sealed.prefix(24)), domain: d1))
        XCTAssertThrowsError(try cipher.open(Array(sealed.dropLast()), domain: d1))
        XCTAssertThrowsError(try cipher.open(sealed + [0], domain: d1))
        XCTAssertThrowsError(try cipher.open([], domain: d1))
    }

    func testNamesDifferingOnlyInPaddingAreDistinct() throws {
        // "a" and "a\0" would pad identically if NULs were allowed; names never contain NUL
        // and the opener rejects a decrypted interior NUL. Check near-identical names differ.
        let a = cipher.seal(Array("a".utf8), domain: d1)
        let b = cipher.seal(Array("b".utf8), domain: d1)
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(try cipher.open(b, domain: d1), Array("b".utf8))
    }

    func testUnicodeAndMaximumLength() throws {
        let uni = Array("Фото 📷 café — 写真.jpg".utf8)
        XCTAssertEqual(try cipher.open(cipher.seal(uni, domain: d1), domain: d1), uni)
        let long = [UInt8](repeating: 0x7A, count: 255)
        XCTAssertEqual(try cipher.open(cipher.seal(long, domain: d1), domain: d1), long)
    }
}
