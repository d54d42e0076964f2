import XCTest
@testable import PhotoVaultCrypto

final class SecretBoxTests: XCTestCase {
    func testRoundTripAllSmallLengths() throws {
        let key = SecureBytes(randomCount: 32)
        var rng = SeededGenerator(seed: 11)
        for n in [0, 1, 15, 16, 17, 32, 100, 4096] {
            let msg = rng.bytes(n)
            let sealed = SecretBox.seal(msg, key: key, ad: [1, 2, 3])
            XCTAssertEqual(sealed.count, n + SecretBox.overhead)
            XCTAssertEqual(try SecretBox.open(sealed, key: key, ad: [1, 2, 3]), msg)
        }
    }

    func testNonceIsFreshEachSeal() {
        let key = SecureBytes(randomCount: 32)
        let a = SecretBox.seal([1, 2, 3], key: key, ad: [])
        let b = SecretBox.seal([1, 2, 3], key: key, ad: [])
        XCTAssertNotEqual(Array(a[0..<SecretBox.nonceSize]), Array(b[0..<SecretBox.nonceSize]))
        XCTAssertNotEqual(a, b)
    }

    func testAssociatedDataIsBound() {
        let key = SecureBytes(randomCount: 32)
        let sealed = SecretBox.seal(Array("secret".utf8), key: key, ad: Array("file-A".utf8))
        XCTAssertThrowsError(try SecretBox.open(sealed, key: key, ad: Array("file-B".utf8))) {
            XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
        }
        XCTAssertThrowsError(try SecretBox.open(sealed, key: key, ad: []))
    }

    func testWrongKeyAndEveryFlippedByteFail() {
        let key = SecureBytes(randomCount: 32)
        let sealed = SecretBox.seal(Array("a small secret".utf8), key: key, ad: [7])
        XCTAssertThrowsError(try SecretBox.open(sealed, key: SecureBytes(randomCount: 32), ad: [7]))
        for i in 0..<sealed.count {
            var t = sealed
            t[i] ^= 0x01
            XCTAssertThrowsError(try SecretBox.open(t, key: key, ad: [7]), "byte \(i)") {
                XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
            }
        }
        XCTAssertThrowsError(try SecretBox.open(Array(sealed.dropLast()), key: key, ad: [7]))
        XCTAssertThrowsError(try SecretBox.open(Array(sealed.prefix(SecretBox.overhead - 1)), key: key, ad: [7]))
    }

    func testWrapUnwrapIntoSecureMemory() throws {
        let kek = SecureBytes(randomCount: 32)
        let secret = SecureBytes(randomCount: 32)
        let wrapped = SecretBox.wrap(secret, under: kek, ad: Array("slot".utf8))
        XCTAssertEqual(wrapped.count, 32 + SecretBox.overhead)
        let back = try SecretBox.unwrap(wrapped, under: kek, ad: Array("slot".utf8))
        XCTAssertEqual(bytesOf(back), bytesOf(secret))
        XCTAssertThrowsError(try SecretBox.unwrap(wrapped, under: kek, ad: Array("other".utf8)))
        // Nothing to unwrap: an empty secret is refused rather than a zero-size allocation.
        XCTAssertThrowsError(try SecretBox.unwrap(Array(wrapped.prefix(SecretBox.overhead)), under: kek, ad: []))
    }

    func testOpenIntoWrongSizedBufferIsRejected() {
        let key = SecureBytes(randomCount: 32)
        let sealed = SecretBox.seal([1, 2, 3, 4], key: key, ad: [])
        var out = [UInt8](repeating: 0, count: 3)
        XCTAssertThrowsError(try sealed.withUnsafeBytes { s in
            try out.withUnsafeMutableBytes { try SecretBox.open(s, key: key, ad: [], into: $0) }
        }) { XCTAssertEqual($0 as? CryptoError, .invalidLength(expected: 4, got: 3)) }
    }
}

final class SealedBoxTests: XCTestCase {
    func testKeyPairIsDeterministicFromSeed() throws {
        let seed = SecureBytes(copying: [UInt8](repeating: 5, count: 32))
        let a = try SealedBox.keyPair(seed: seed), b = try SealedBox.keyPair(seed: seed)
        XCTAssertEqual(a.publicKey, b.publicKey)
        XCTAssertEqual(bytesOf(a.secretKey), bytesOf(b.secretKey))
        let c = try SealedBox.keyPair(seed: SecureBytes(copying: [UInt8](repeating: 6, count: 32)))
        XCTAssertNotEqual(a.publicKey, c.publicKey)
    }

    func testSealNeedsOnlyThePublicKeyAndOpensWithTheSecret() throws {
        let pair = try SealedBox.keyPair(seed: SecureBytes(randomCount: 32))
        let msg: [UInt8] = Array(0..<56).map { UInt8($0) }
        let sealed = msg.withUnsafeBytes { SealedBox.seal($0, to: pair.publicKey) }
        XCTAssertEqual(sealed.count, msg.count + SealedBox.overhead)
        let opened = try sealed.withUnsafeBytes { try SealedBox.open($0, publicKey: pair.publicKey, secretKey: pair.secretKey) }
        XCTAssertEqual(bytesOf(opened), msg)
        // Anonymous sealing is randomised (ephemeral key).
        let again = msg.withUnsafeBytes { SealedBox.seal($0, to: pair.publicKey) }
        XCTAssertNotEqual(again, sealed)
    }

    func testWrongKeyAndTamperingFail() throws {
        let pair = try SealedBox.keyPair(seed: SecureBytes(randomCount: 32))
        let other = try SealedBox.keyPair(seed: SecureBytes(randomCount: 32))
        let msg: [UInt8] = Array("file key and prefix".utf8)
        let sealed = msg.withUnsafeBytes { SealedBox.seal($0, to: pair.publicKey) }
        XCTAssertThrowsError(try sealed.withUnsafeBytes { try SealedBox.open($0, publicKey: other.publicKey, secretKey: other.secretKey) })
        for i in stride(from: 0, to: sealed.count, by: 3) {
            var t = sealed
            t[i] ^= 0x80
            XCTAssertThrowsError(try t.withUnsafeBytes { try SealedBox.open($0, publicKey: pair.publicKey, secretKey: pair.secretKey) },
                                 "byte \(i)") { XCTAssertEqual($0 as? CryptoError, .authenticationFailed) }
        }
        XCTAssertThrowsError(try Array(sealed.prefix(SealedBox.overhead)).withUnsafeBytes {
            try SealedBox.open($0, publicKey: pair.publicKey, secretKey: pair.secretKey)
        })
    }
}
