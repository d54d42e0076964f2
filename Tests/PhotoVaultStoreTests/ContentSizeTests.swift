import XCTest
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// The plaintext size is computed from the ciphertext size alone (stat needs no decryption).
final class ContentSizeTests: XCTestCase {
    func testComputedSizeEqualsRealSize() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            for cs in [4096, 65536] {
                let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
                let keyring = try Fixture.randomKeyring()
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

    /// A truncate or write past `maximumPlaintextSize` fails with EFBIG and changes nothing (a
    /// 1-byte file truncated to 9.2e18 bytes trapped converting its ciphertext growth to Int64).
    func testBeyondTheMaximumSizeIsEFBIGAndChangesNothing() throws {
        let max = ChunkLayout.maximumPlaintextSize
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            // Every ciphertext of an allowed size fits an off_t, at the smallest chunk size.
            let layout = ChunkLayout(cipher: cipher, chunkSize: 4096)
            XCTAssertLessThan(layout.ciphertextSize(plaintextSize: max), UInt64(Int64.max))
            let keyring = try Fixture.randomKeyring()
            let dir = Fixture.tempDir(self)
            for (name, content) in [("one", [UInt8(0x41)]), ("chunk", [UInt8](repeating: 0x42, count: 4096)), ("empty", [])] {
                let path = "\(dir)/\(name)"
                Fixture.writeFile(path, [])
                let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
                defer { f.close() }
                if !content.isEmpty { try f.writeBytes(content, at: 0) }
                let before = Fixture.readFile(path)
                let requests: [(String, () throws -> Void)] = [
                    ("truncate 9200000000000000000", { try f.truncate(to: 9_200_000_000_000_000_000) }),
                    ("truncate max + 1", { try f.truncate(to: max + 1) }),
                    ("truncate UInt64.max", { try f.truncate(to: UInt64.max) }),
                    ("write at 9200000000000000000", { try f.writeBytes([1], at: 9_200_000_000_000_000_000) }),
                    ("write at Int64.max - 1", { try f.writeBytes([1], at: UInt64(Int64.max) - 1) }),
                    ("write across max", { try f.writeBytes([1, 2], at: max - 1) }),
                    ("write at max", { try f.writeBytes([1], at: max) }),
                ]
                for (label, request) in requests {
                    XCTAssertThrowsError(try request(), "\(cipher) \(name): \(label)") {
                        XCTAssertEqual(($0 as? StoreError)?.errno, EFBIG, "\(cipher) \(name): \(label): \($0)")
                    }
                    XCTAssertEqual(Fixture.readFile(path), before, "\(cipher) \(name): \(label) changed the file")
                }
                XCTAssertEqual(try f.readAll(), content)
            }
        }
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
