import XCTest
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Issue "The encrypted store": changes to chunks (nonce, ciphertext, tag), swapped or moved
/// chunks and truncation inside a chunk are typed integrity errors, never wrong plaintext.
final class TamperContentTests: XCTestCase {
    private let cs = 4096

    /// A file of 2.5 chunks with distinct content per chunk; returns its path and plaintext.
    private func makeFile(_ dir: String, _ name: String, layout: ChunkLayout, keyring: UserKeyring,
                          seed: UInt64) throws -> (String, [UInt8]) {
        var rng = SeededGenerator(seed: seed)
        let plain = rng.bytes(2 * cs + cs / 2)
        let path = "\(dir)/\(name)"
        let f = try Fixture.createContent(at: path, layout: layout, keyring: keyring)
        try f.writeBytes(plain, at: 0)
        f.close()
        return (path, plain)
    }

    /// Opens the file and checks: reading the damaged chunk fails with `.integrity` (and
    /// leaves nothing in the buffer), reads of undamaged chunks still return the right bytes.
    private func expectChunkDamaged(_ path: String, chunk: Int, plain: [UInt8], layout: ChunkLayout,
                                    keyring: UserKeyring, _ label: String) throws {
        let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
        defer { f.close() }
        XCTAssertIntegrityError(try f.readAll(), "\(label): whole file")
        XCTAssertIntegrityError(try f.readBytes(UInt64(chunk * cs + 1), 5), "\(label): inside the chunk")
        for other in 0..<3 where other != chunk {
            let start = other * cs
            let end = min(plain.count, start + cs)
            XCTAssertEqual(try f.readBytes(UInt64(start), end - start), Array(plain[start..<end]), "\(label): chunk \(other)")
        }
        // A write that needs the damaged chunk (read-modify-write) fails too, and changes nothing.
        XCTAssertIntegrityError(try f.writeBytes([1], at: UInt64(chunk * cs + 3)), "\(label): partial write")
    }

    func testFlippedBytesInNonceCiphertextAndTag() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let dir = Fixture.tempDir(self)
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let (path, plain) = try makeFile(dir, "f", layout: layout, keyring: keyring, seed: 1)
            let original = Fixture.readFile(path)
            let ns = cipher.nonceSize
            for chunk in 0..<3 {
                let start = Int(layout.sealedOffset(ofChunk: UInt64(chunk)))
                let plainLen = min(cs, plain.count - chunk * cs)
                let ctStart = start + ns, tagStart = ctStart + plainLen
                let positions: [(String, Int)] =
                    [0, 1, ns / 2, ns - 1].map { ("nonce", start + $0) } +
                    [0, 1, plainLen / 3, plainLen / 2, plainLen - 2, plainLen - 1].map { ("ciphertext", ctStart + $0) } +
                    (0..<16).map { ("tag", tagStart + $0) }
                for (region, pos) in positions {
                    var t = original
                    t[pos] ^= 0x01
                    Fixture.writeFile(path, t)
                    try expectChunkDamaged(path, chunk: chunk, plain: plain, layout: layout, keyring: keyring,
                                           "\(cipher) chunk \(chunk) \(region) byte \(pos - start)")
                }
            }
            Fixture.writeFile(path, original)
            let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
            XCTAssertEqual(try f.readAll(), plain)
            f.close()
        }
    }

    func testZeroedChunkIsNotAHole() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let dir = Fixture.tempDir(self)
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let (path, plain) = try makeFile(dir, "f", layout: layout, keyring: keyring, seed: 2)
            var t = Fixture.readFile(path)
            let start = Int(layout.sealedOffset(ofChunk: 1))
            t.replaceSubrange(start..<(start + layout.sealedChunkSize), with: [UInt8](repeating: 0, count: layout.sealedChunkSize))
            Fixture.writeFile(path, t)
            try expectChunkDamaged(path, chunk: 1, plain: plain, layout: layout, keyring: keyring, "\(cipher) zeroed chunk")
        }
    }

    func testSwappedChunksOfOneFile() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let dir = Fixture.tempDir(self)
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let (path, _) = try makeFile(dir, "f", layout: layout, keyring: keyring, seed: 3)
            var t = Fixture.readFile(path)
            let a = Int(layout.sealedOffset(ofChunk: 0)), b = Int(layout.sealedOffset(ofChunk: 1))
            let n = layout.sealedChunkSize
            let chunk0 = Array(t[a..<(a + n)])
            t.replaceSubrange(a..<(a + n), with: t[b..<(b + n)])
            t.replaceSubrange(b..<(b + n), with: chunk0)
            Fixture.writeFile(path, t)
            let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
            defer { f.close() }
            XCTAssertIntegrityError(try f.readBytes(0, 10), "\(cipher) chunk 0")
            XCTAssertIntegrityError(try f.readBytes(UInt64(cs), 10), "\(cipher) chunk 1")
            XCTAssertEqual(try f.readBytes(UInt64(2 * cs), 10).count, 10)
        }
    }

    func testChunkMovedToTheSamePositionOfAnotherFile() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let dir = Fixture.tempDir(self)
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let (pathA, _) = try makeFile(dir, "a", layout: layout, keyring: keyring, seed: 4)
            let (pathB, plainB) = try makeFile(dir, "b", layout: layout, keyring: keyring, seed: 5)
            let a = Fixture.readFile(pathA)
            var b = Fixture.readFile(pathB)
            let s = Int(layout.sealedOffset(ofChunk: 1))
            b.replaceSubrange(s..<(s + layout.sealedChunkSize), with: a[s..<(s + layout.sealedChunkSize)])
            Fixture.writeFile(pathB, b)
            try expectChunkDamaged(pathB, chunk: 1, plain: plainB, layout: layout, keyring: keyring, "\(cipher) moved chunk")
        }
    }

    func testTruncatedInsideAChunk() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let dir = Fixture.tempDir(self)
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let (path, plain) = try makeFile(dir, "f", layout: layout, keyring: keyring, seed: 6)
            let original = Fixture.readFile(path)
            let lastStart = Int(layout.sealedOffset(ofChunk: 2))
            let midStart = Int(layout.sealedOffset(ofChunk: 1))
            // Cut points: inside the last chunk's ciphertext, inside its tag, leaving only a
            // nonce, and inside a middle chunk (which then looks like a short last chunk).
            let cuts = [original.count - 1, original.count - 10, lastStart + cipher.overhead + 1,
                        lastStart + cipher.overhead, lastStart + 3, midStart + 100, midStart + cs]
            for cut in cuts {
                Fixture.writeFile(path, Array(original.prefix(cut)))
                let label = "\(cipher) cut at \(cut)"
                let rem = (cut - 128) % layout.sealedChunkSize
                if rem > 0 && rem <= cipher.overhead {
                    // The size itself is impossible: detected without decrypting.
                    XCTAssertIntegrityError(try layout.plaintextSize(ciphertextSize: UInt64(cut)), label)
                    let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
                    XCTAssertIntegrityError(try f.size(), label)
                    XCTAssertIntegrityError(try f.readBytes(0, 10), label)
                    f.close()
                } else {
                    // The size looks valid but the shortened chunk fails authentication.
                    let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
                    let size = Int(try f.size())
                    XCTAssertLessThan(size, plain.count, label)
                    XCTAssertIntegrityError(try f.readAll(), label)
                    XCTAssertIntegrityError(try f.readBytes(UInt64(size - 1), 1), label)
                    XCTAssertEqual(try f.readBytes(0, 100), Array(plain[0..<100]), "\(label): chunk 0 intact")
                    f.close()
                }
            }
        }
    }
}
