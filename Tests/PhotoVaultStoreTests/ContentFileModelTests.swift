import XCTest
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Random-access reads, writes and truncates of an encrypted file, checked operation by
/// operation against a plain byte array.
final class ContentFileModelTests: XCTestCase {
    private func configurations() -> [(ContentCipher, Int)] {
        ContentCipher.allCases.filter(\.isAvailable).flatMap { c in [(c, 4096), (c, 65536)] }
    }

    func testRandomOperationsMatchModel() throws {
        for (i, (cipher, chunk)) in configurations().enumerated() {
            try runModel(cipher: cipher, chunkSize: chunk, seed: UInt64(1000 + i), operations: 300)
        }
    }

    /// Offsets near chunk boundaries are where read-modify-write goes wrong: bias towards them.
    private func interestingOffset(_ rng: inout SeededGenerator, chunk: Int, upTo limit: Int) -> Int {
        switch Int.random(in: 0..<4, using: &rng) {
        case 0: return Int.random(in: 0...max(0, limit), using: &rng)
        case 1: return min(limit, Int.random(in: 0...(limit / chunk + 1), using: &rng) * chunk)
        default:
            let b = Int.random(in: 0...(limit / chunk + 1), using: &rng) * chunk
            return max(0, min(limit, b + Int.random(in: -17...17, using: &rng)))
        }
    }

    private func runModel(cipher: ContentCipher, chunkSize cs: Int, seed: UInt64, operations: Int) throws {
        let label = "\(cipher) chunk \(cs) seed \(seed)"
        let dir = Fixture.tempDir(self)
        let path = dir + "/f"
        let keyring = try Fixture.randomKeyring()
        let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
        var f = try Fixture.createContent(at: path, layout: layout, keyring: keyring)
        defer { f.close() }
        var model = [UInt8]()
        var rng = SeededGenerator(seed: seed)
        let maxSize = 6 * cs + 100
        var counts = [String: Int]()

        for step in 0..<operations {
            let op = Int.random(in: 0..<100, using: &rng)
            let where_ = "\(label) step \(step)"
            if op < 40 {
                counts["write", default: 0] += 1
                let off = interestingOffset(&rng, chunk: cs, upTo: min(maxSize, model.count + 2 * cs))
                var len = Bool.random(using: &rng) ? Int.random(in: 1...40, using: &rng) : Int.random(in: 0...(2 * cs + 50), using: &rng)
                len = min(len, maxSize - off)
                let data = rng.bytes(max(0, len))
                if off > model.count { counts["write past EOF", default: 0] += 1 }
                try f.writeBytes(data, at: UInt64(off))
                // A zero-length write changes nothing, even past the end (as write(2)).
                if !data.isEmpty {
                    if off + data.count > model.count { model += [UInt8](repeating: 0, count: off + data.count - model.count) }
                    model.replaceSubrange(off..<(off + data.count), with: data)
                }
            } else if op < 75 {
                counts["read", default: 0] += 1
                let off = interestingOffset(&rng, chunk: cs, upTo: model.count + cs)
                let len = Bool.random(using: &rng) ? Int.random(in: 1...40, using: &rng) : Int.random(in: 0...(3 * cs), using: &rng)
                let got = try f.readBytes(UInt64(off), len)
                let expected = off >= model.count ? [] : Array(model[off..<min(model.count, off + len)])
                XCTAssertEqual(got, expected, "\(where_): read \(len) at \(off)")
            } else if op < 92 {
                counts["truncate", default: 0] += 1
                let newSize = interestingOffset(&rng, chunk: cs, upTo: min(maxSize, model.count + 2 * cs))
                try f.truncate(to: UInt64(newSize))
                if newSize < model.count { model.removeSubrange(newSize...) }
                else { model += [UInt8](repeating: 0, count: newSize - model.count) }
            } else {
                counts["reopen", default: 0] += 1
                f.close()
                f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
            }
            // Invariants after every operation: sizes agree three ways.
            XCTAssertEqual(try f.size(), UInt64(model.count), where_)
            let cipherSize = Fixture.fileSize(path)
            XCTAssertEqual(cipherSize, layout.ciphertextSize(plaintextSize: UInt64(model.count)), where_)
            XCTAssertEqual(try layout.plaintextSize(ciphertextSize: cipherSize), UInt64(model.count), where_)
        }
        XCTAssertEqual(try f.readAll(), model, label)
        f.close()
        f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
        XCTAssertEqual(try f.readAll(), model, "\(label) after reopen")
        for k in ["write", "write past EOF", "read", "truncate", "reopen"] {
            XCTAssertGreaterThan(counts[k, default: 0], 0, "\(label): the random mix never did \(k)")
        }
    }

    func testHolesReadAsZerosAndAreSealed() throws {
        for (cipher, cs) in configurations() {
            let path = Fixture.tempDir(self) + "/holes"
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let f = try Fixture.createContent(at: path, layout: layout, keyring: keyring)
            defer { f.close() }
            try f.writeBytes([1, 2, 3], at: 0)
            try f.writeBytes([9], at: UInt64(3 * cs + 5))   // hole spanning whole chunks
            var expected = [UInt8](repeating: 0, count: 3 * cs + 6)
            expected[0] = 1; expected[1] = 2; expected[2] = 3; expected[3 * cs + 5] = 9
            XCTAssertEqual(try f.readAll(), expected)
            // No chunk of the hole is left as an unauthenticated run of zeros.
            let raw = Fixture.readFile(path)
            for i in 0..<3 {
                let start = Int(layout.sealedOffset(ofChunk: UInt64(i)))
                XCTAssertFalse(raw[start..<(start + layout.sealedChunkSize)].allSatisfy { $0 == 0 }, "chunk \(i) of the hole")
            }
            try f.truncate(to: UInt64(5 * cs + 1))   // truncate up: another hole
            expected += [UInt8](repeating: 0, count: 2 * cs - 5)
            XCTAssertEqual(try f.readAll(), expected)
        }
    }

    func testTruncateDownAtAndInsideChunks() throws {
        for (cipher, cs) in configurations() {
            let path = Fixture.tempDir(self) + "/t"
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: cs)
            let f = try Fixture.createContent(at: path, layout: layout, keyring: keyring)
            defer { f.close() }
            var rng = SeededGenerator(seed: UInt64(cs))
            var model = rng.bytes(4 * cs + 10)
            try f.writeBytes(model, at: 0)
            for newSize in [4 * cs + 3, 3 * cs, 2 * cs + 1, 2 * cs - 1, cs, 1, 0] {
                try f.truncate(to: UInt64(newSize))
                model.removeSubrange(newSize...)
                XCTAssertEqual(try f.readAll(), model, "\(cipher) \(cs) truncate to \(newSize)")
                XCTAssertEqual(Fixture.fileSize(path), layout.ciphertextSize(plaintextSize: UInt64(newSize)))
            }
        }
    }

    func testEmptyCiphertextFileIsAnEmptyPlaintextFile() throws {
        let path = Fixture.tempDir(self) + "/empty"
        Fixture.writeFile(path, [])
        let keyring = try Fixture.randomKeyring()
        let layout = ChunkLayout(cipher: .xchacha20poly1305, chunkSize: 4096)
        let f = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
        defer { f.close() }
        XCTAssertNil(f.header)
        XCTAssertEqual(try f.size(), 0)
        XCTAssertEqual(try f.readBytes(0, 10), [])
        try f.truncate(to: 0)
        XCTAssertEqual(Fixture.fileSize(path), 0, "truncate to 0 of an empty file writes nothing")
        try f.writeBytes([7, 7], at: 1)   // the first write creates the header
        XCTAssertNotNil(f.header)
        XCTAssertEqual(try f.readAll(), [0, 7, 7])
    }
}
