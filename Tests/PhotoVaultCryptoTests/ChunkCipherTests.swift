import XCTest
@testable import PhotoVaultCrypto

final class ChunkCipherTests: XCTestCase {
    private func seal(_ c: ChunkCipher, index: UInt64, _ plain: [UInt8], nonceIndex: Int = 0,
                      nonces: NonceSequence? = nil) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: plain.count + c.cipher.overhead)
        let seq = nonces ?? NonceSequence(cipher: c.cipher)
        var nonce = [UInt8](repeating: 0, count: c.cipher.nonceSize)
        nonce.withUnsafeMutableBytes { seq.nonce(nonceIndex, into: $0.baseAddress!) }
        plain.withUnsafeBytes { p in nonce.withUnsafeBytes { n in out.withUnsafeMutableBytes { o in
            c.seal(index: index, plaintext: p.baseAddress ?? UnsafeRawPointer(n.baseAddress!), count: plain.count,
                   nonce: n.baseAddress!, into: o.baseAddress!)
        } } }
        return out
    }

    private func open(_ c: ChunkCipher, index: UInt64, _ sealed: [UInt8]) throws -> [UInt8] {
        var out = [UInt8](repeating: 0xAA, count: max(0, sealed.count - c.cipher.overhead) + 1)
        try sealed.withUnsafeBytes { s in try out.withUnsafeMutableBytes { o in
            try c.open(index: index, sealed: s.baseAddress!, sealedCount: sealed.count, into: o.baseAddress!)
        } }
        return Array(out.dropLast())
    }

    func testRoundTripBothCiphers() throws {
        var rng = SeededGenerator(seed: 3)
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let c = try ChunkCipher(cipher: cipher, key: SecureBytes(randomCount: 32), fileID: rng.bytes(16))
            for n in [0, 1, 100, 4096, 65536] {
                let plain = rng.bytes(n)
                let sealed = seal(c, index: 5, plain)
                XCTAssertEqual(sealed.count, n + cipher.overhead)
                XCTAssertEqual(try open(c, index: 5, sealed), plain, "\(cipher) \(n)")
            }
        }
    }

    func testChunkIndexAndFileIDAreBound() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let key = SecureBytes(randomCount: 32)
            let idA = [UInt8](repeating: 1, count: 16), idB = [UInt8](repeating: 2, count: 16)
            let a = try ChunkCipher(cipher: cipher, key: key, fileID: idA)
            let b = try ChunkCipher(cipher: cipher, key: key.copy(), fileID: idB)
            let sealed = seal(a, index: 3, Array("chunk three".utf8))
            XCTAssertThrowsError(try open(a, index: 4, sealed)) { XCTAssertEqual($0 as? CryptoError, .authenticationFailed) }
            XCTAssertThrowsError(try open(b, index: 3, sealed)) { XCTAssertEqual($0 as? CryptoError, .authenticationFailed) }
            XCTAssertNoThrow(try open(a, index: 3, sealed))
        }
    }

    func testFailedOpenLeavesNoPlaintext() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let c = try ChunkCipher(cipher: cipher, key: SecureBytes(randomCount: 32), fileID: [UInt8](repeating: 9, count: 16))
            let plain = [UInt8](repeating: 0x41, count: 64)
            var sealed = seal(c, index: 0, plain)
            sealed[sealed.count - 1] ^= 1
            var out = [UInt8](repeating: 0x55, count: 64)
            XCTAssertThrowsError(try sealed.withUnsafeBytes { s in try out.withUnsafeMutableBytes { o in
                try c.open(index: 0, sealed: s.baseAddress!, sealedCount: sealed.count, into: o.baseAddress!)
            } })
            XCTAssertFalse(out.contains(0x41), "\(cipher): plaintext leaked after failed authentication")
        }
    }

    func testTooShortSealedChunkIsRejected() throws {
        let c = try ChunkCipher(cipher: .xchacha20poly1305, key: SecureBytes(randomCount: 32), fileID: [UInt8](repeating: 0, count: 16))
        XCTAssertThrowsError(try open(c, index: 0, [UInt8](repeating: 0, count: c.cipher.overhead - 1)))
    }

    func testWipeZeroesTheKey() throws {
        let key = SecureBytes(randomCount: 32)
        let c = try ChunkCipher(cipher: .xchacha20poly1305, key: key, fileID: [UInt8](repeating: 0, count: 16))
        XCTAssertFalse(c.isWiped)
        c.wipe()
        XCTAssertTrue(c.isWiped)
        XCTAssertTrue(key.isWiped)
    }

    func testNonceSequenceDiffersPerChunkAndPerRequest() {
        for cipher in ContentCipher.allCases {
            let seq = NonceSequence(cipher: cipher)
            var seen = Set<[UInt8]>()
            for i in 0..<1000 {
                var n = [UInt8](repeating: 0, count: cipher.nonceSize)
                n.withUnsafeMutableBytes { seq.nonce(i, into: $0.baseAddress!) }
                XCTAssertTrue(seen.insert(n).inserted)
            }
            // Only the last 4 bytes vary within a request.
            let prefixes = Set(seen.map { Array($0.prefix(cipher.nonceSize - 4)) })
            XCTAssertEqual(prefixes.count, 1)
            var first = [UInt8](repeating: 0, count: cipher.nonceSize)
            first.withUnsafeMutableBytes { NonceSequence(cipher: cipher).nonce(0, into: $0.baseAddress!) }
            XCTAssertFalse(seen.contains(first), "a second request drew the same base nonce")
        }
    }

    func testCipherMetadata() {
        XCTAssertEqual(ContentCipher.aes256gcm.overhead, 28)
        XCTAssertEqual(ContentCipher.xchacha20poly1305.overhead, 40)
        XCTAssertEqual(ContentCipher(name: "aes-256-gcm"), .aes256gcm)
        XCTAssertEqual(ContentCipher(name: "XChaCha20-Poly1305"), .xchacha20poly1305)
        XCTAssertNil(ContentCipher(name: "rot13"))
        XCTAssertTrue(ContentCipher.preferred.isAvailable)
    }
}
