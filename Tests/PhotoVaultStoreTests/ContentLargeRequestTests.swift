import XCTest
import Glibc
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Large requests (up to FUSE's 1 MiB) are sealed into one buffer and written with one
/// pwrite, and opened from one pread: the bytes, the chunk order and the failure reporting
/// must be the same as one chunk at a time.
final class ContentLargeRequestTests: XCTestCase {
    private let keyring = try! Fixture.keyring()   // a test process never runs short of locked memory

    private func makeFile(_ cipher: ContentCipher, _ cs: Int) throws -> (ContentFile, String) {
        let dir = Fixture.tempDir(self)
        let path = dir + "/f"
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let f = try ContentFile.create(fd: fd, layout: ChunkLayout(cipher: cipher, chunkSize: cs),
                                       keyring: keyring, protectionClass: .complete)
        return (f, path)
    }

    func testLargeUnalignedWritesAndReadsMatchTheModel() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            for cs in [4096, 16384] {
                let (f, _) = try makeFile(cipher, cs)
                var rng = SystemRandomNumberGenerator()
                var model = [UInt8]()
                for _ in 0..<5 {
                    let off = Int.random(in: 0...(model.count + 3 * cs), using: &rng)
                    let len = Int.random(in: 64 * 1024...(512 << 10) + 77, using: &rng)
                    let data = (0..<len).map { _ in UInt8.random(in: 0...255, using: &rng) }
                    XCTAssertEqual(try data.withUnsafeBytes { try f.write(from: $0.baseAddress!, count: len, offset: UInt64(off)) }, len)
                    if off + len > model.count { model += [UInt8](repeating: 0, count: off + len - model.count) }
                    model.replaceSubrange(off..<(off + len), with: data)
                    // One whole read and one odd slice, both many chunks long.
                    var all = [UInt8](repeating: 0, count: model.count)
                    XCTAssertEqual(try all.withUnsafeMutableBytes { try f.read(into: $0.baseAddress!, count: model.count, offset: 0) }, model.count)
                    XCTAssertEqual(all, model, "\(cipher) \(cs): whole read differs")
                    let s = Int.random(in: 0..<max(1, model.count / 2), using: &rng)
                    let n = min(model.count - s, 300_001)
                    var part = [UInt8](repeating: 0, count: n)
                    XCTAssertEqual(try part.withUnsafeMutableBytes { try f.read(into: $0.baseAddress!, count: n, offset: UInt64(s)) }, n)
                    XCTAssertEqual(part, Array(model[s..<(s + n)]), "\(cipher) \(cs): slice differs")
                }
                f.close()
            }
        }
    }

    func testDamageInsideALargeReadIsReportedAndNoPlaintextIsReturned() throws {
        let cs = 4096
        let (f, path) = try makeFile(.preferred, cs)
        let data = [UInt8](repeating: 0x41, count: 1 << 20)
        _ = try data.withUnsafeBytes { try f.write(from: $0.baseAddress!, count: data.count, offset: 0) }
        f.close()
        // Flip one byte of chunk 100's ciphertext.
        var bytes = Fixture.readFile(path)
        let layout = ChunkLayout(cipher: .preferred, chunkSize: cs)
        bytes[Int(layout.sealedOffset(ofChunk: 100)) + layout.cipher.nonceSize + 5] ^= 1
        Fixture.writeFile(path, bytes)
        let fd = open(path, O_RDWR)
        let g = try ContentFile(fd: fd, layout: layout, keyring: keyring)
        var out = [UInt8](repeating: 0xEE, count: 1 << 20)
        XCTAssertThrowsError(try out.withUnsafeMutableBytes { try g.read(into: $0.baseAddress!, count: 1 << 20, offset: 0) }) { e in
            guard case StoreError.integrity(_, let d) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(d.contains("chunk 100"), d)
        }
        XCTAssertFalse(out.contains(0x41), "plaintext leaked into the buffer of a failed read")
        g.close()
    }
}
