import XCTest
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// The plaintext size is computed from the ciphertext size alone (stat needs no decryption).
final class ContentSizeTests: XCTestCase {
    func testComputedSizeEqualsRealSize() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            for cs in [4096, 65536] {
                let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
                let keyring = Fixture.randomKeyring()
                let dir = Fixture.tempDir(self)
                for (i, size) in [0, 1, cs - 1, cs, cs + 1, 2 * cs, 2 * cs + 1, 3 * cs - 1, 5 * cs + cs / 2].enumerated() {
                    let path = "\(dir)/f\(i)"
                    let f = try Fixture.createContent(at: path, layout: layout, keyring: keyring)
                    try f.writeBytes([UInt8](repeating: 0x5A, count: size), at: 0)
                    f.close()
                    let c = Fixture.fileSize(path)
                    XCTAssertEqual(c, layout.ciphertextSize(plaintextSize: UInt64(size)), "\(cipher) \(cs) \(size)")
                    XCTAssertEqual(try layout.plaintextSize(ciphertextSize: c), UInt64(size), "\(cipher) \(cs) \(size)")
                    XCTAssertEqual(layout.reportedSize(ciphertextSize: c), UInt64(size))
                    let g = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
                    XCTAssertEqual(try g.size(), UInt64(size))
                    XCTAssertEqual(try g.readAll().count, size)
                    g.close()
                }
            }
        }
    }

    func testGeometry() throws {
        let layout = ChunkLayout(cipher: .aes256gcm, chunkSize: 4096)
        XCTAssertEqual(layout.sealedChunkSize, 4096 + 12 + 16)
        XCTAssertEqual(layout.sealedOffset(ofChunk: 0), 128)
        XCTAssertEqual(layout.sealedOffset(ofChunk: 2), 128 + 2 * 4124)
        XCTAssertEqual(layout.ciphertextSize(plaintextSize: 0), 128)
        XCTAssertEqual(layout.ciphertextSize(plaintextSize: 1), 128 + 1 + 28)
        XCTAssertEqual(try layout.plaintextSize(ciphertextSize: 0), 0)
        XCTAssertEqual(try layout.plaintextSize(ciphertextSize: 128), 0)
    }

    func testImpossibleSizesAreIntegrityErrors() {
        for cipher in ContentCipher.allCases {
            let layout = ChunkLayout(cipher: cipher, chunkSize: 4096)
            for c in [1, 64, 127] { XCTAssertIntegrityError(try layout.plaintextSize(ciphertextSize: UInt64(c))) }
            for extra in 1...cipher.overhead {
                XCTAssertIntegrityError(try layout.plaintextSize(ciphertextSize: UInt64(128 + extra)))
                XCTAssertIntegrityError(try layout.plaintextSize(ciphertextSize: UInt64(128 + layout.sealedChunkSize + extra)))
            }
            XCTAssertEqual(try layout.plaintextSize(ciphertextSize: UInt64(128 + cipher.overhead + 1)), 1)
            // stat rounds a damaged size down instead of failing.
            XCTAssertEqual(layout.reportedSize(ciphertextSize: 100), 0)
            XCTAssertEqual(layout.reportedSize(ciphertextSize: UInt64(128 + layout.sealedChunkSize + 3)), 4096)
        }
    }
}
