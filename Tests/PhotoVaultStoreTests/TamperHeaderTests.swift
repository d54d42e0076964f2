import XCTest
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Issue "The encrypted store": flipping any single byte of a file header makes the file
/// unreadable with a typed error, never wrong plaintext.
final class TamperHeaderTests: XCTestCase {
    func testEveryHeaderByteFlipIsDetected() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            for c in ProtectionClass.allCases {
                let dir = Fixture.tempDir(self)
                let keyring = try Fixture.randomKeyring()
                let layout = ChunkLayout(cipher: cipher, chunkSize: 4096)
                let path = dir + "/f"
                let f = try Fixture.createContent(at: path, layout: layout, keyring: keyring, protectionClass: c)
                try f.writeBytes(Array(repeating: 0x42, count: 5000), at: 0)
                f.close()
                let original = Fixture.readFile(path)
                for i in 0..<FileHeader.size {
                    for mask: UInt8 in [0x01, 0x80] {
                        var t = original
                        t[i] ^= mask
                        Fixture.writeFile(path, t)
                        let label = "\(cipher) \(c) byte \(i) ^ \(mask)"
                        do {
                            let g = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
                            defer { g.close() }
                            XCTFail("\(label): header opened; read gives \(String(describing: try? g.readAll().prefix(4)))")
                        } catch StoreError.integrity {
                            // expected
                        } catch StoreError.unknownVersion(let found, _) where i == 4 || i == 5,
                                StoreError.unknownVersionOf(_, let found, _) where i == 4 || i == 5 {
                            // The version field is checked before anything else (FORMAT.md: a
                            // reader refuses a version it does not know): also EIO, exit 10.
                            XCTAssertNotEqual(found, 1, label)
                        } catch {
                            XCTFail("\(label): unexpected \(error)")
                        }
                    }
                }
                Fixture.writeFile(path, original)
                let g = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
                XCTAssertEqual(try g.readAll(), Array(repeating: 0x42, count: 5000))
                g.close()
            }
        }
    }

    func testHeaderCopiedOntoAnotherFileIsDetected() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let dir = Fixture.tempDir(self)
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: 4096)
            for name in ["a", "b"] {
                let f = try Fixture.createContent(at: "\(dir)/\(name)", layout: layout, keyring: keyring)
                try f.writeBytes(Array(repeating: name == "a" ? 0x61 : 0x62, count: 9000), at: 0)
                f.close()
            }
            var b = Fixture.readFile(dir + "/b")
            b.replaceSubrange(0..<128, with: Fixture.readFile(dir + "/a")[0..<128])
            Fixture.writeFile(dir + "/b", b)
            // The header itself is valid (it is a's), but b's chunks are bound to b's file ID and key.
            let g = try Fixture.openContent(at: dir + "/b", layout: layout, keyring: keyring)
            defer { g.close() }
            XCTAssertEqual(try g.size(), 9000)
            XCTAssertIntegrityError(try g.readAll())
            for chunk in 0..<3 { XCTAssertIntegrityError(try g.readBytes(UInt64(chunk * 4096), 10), "chunk \(chunk)") }
        }
    }

    func testHeaderCipherMustMatchTheStore() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.randomKeyring()
        let f = try Fixture.createContent(at: dir + "/f", layout: ChunkLayout(cipher: .xchacha20poly1305, chunkSize: 4096), keyring: keyring)
        try f.writeBytes([1, 2, 3], at: 0)
        f.close()
        XCTAssertIntegrityError(try Fixture.openContent(at: dir + "/f", layout: ChunkLayout(cipher: .aes256gcm, chunkSize: 4096), keyring: keyring))
    }

    func testShortCiphertextFilesAreDamaged() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.randomKeyring()
        let layout = ChunkLayout(cipher: .xchacha20poly1305, chunkSize: 4096)
        let f = try Fixture.createContent(at: dir + "/f", layout: layout, keyring: keyring)
        f.close()
        let header = Fixture.readFile(dir + "/f")
        for n in [1, 50, 127] {
            Fixture.writeFile(dir + "/f", Array(header.prefix(n)))
            XCTAssertIntegrityError(try Fixture.openContent(at: dir + "/f", layout: layout, keyring: keyring), "\(n) bytes")
        }
    }
}
