import XCTest
import Glibc
@testable import PhotoVaultCrypto

/// Small secrets share locked slabs; what matters is that a slot is zero when it is handed
/// out, zero once its secret is wiped, never shared by two live secrets, and locked in RAM.
final class SecureSlotsTests: XCTestCase {
    func testSizeClasses() {
        XCTAssertEqual(SecureSlots.sizeClass(1), 0)
        XCTAssertEqual(SecureSlots.sizeClass(32), 0)
        XCTAssertEqual(SecureSlots.sizeClass(64), 0)
        XCTAssertEqual(SecureSlots.sizeClass(65), 1)
        XCTAssertEqual(SecureSlots.sizeClass(512), 3)
        XCTAssertEqual(SecureSlots.sizeClass(1024), 4)
        XCTAssertEqual(SecureSlots.sizeClass(1025), 5)
        XCTAssertEqual(SecureSlots.sizeClass(4096), 6)
        XCTAssertNil(SecureSlots.sizeClass(4097))
    }

    func testWipedSecretLeavesItsSlotZeroed() {
        let s = SecureBytes(copying: [UInt8](repeating: 0xA5, count: 32))
        let raw = UnsafeRawPointer(s.unsafePointer)
        s.wipe()
        // The slab stays mapped, so the slot can be read after the wipe.
        XCTAssertEqual(Array(UnsafeRawBufferPointer(start: raw, count: SecureSlots.slotSize(ofClass: 0))),
                       [UInt8](repeating: 0, count: SecureSlots.slotSize(ofClass: 0)))
        // Whoever gets a slot next gets it zero-filled.
        let t = SecureBytes(count: 32)
        XCTAssertEqual(bytesOf(t), [UInt8](repeating: 0, count: 32))
    }

    func testLiveSecretsNeverShareASlot() {
        var secrets: [SecureBytes] = []
        for i in 0..<600 {   // more than one slab of 64-byte and of 512-byte slots
            let n = i % 2 == 0 ? 32 : 512
            secrets.append(SecureBytes(copying: [UInt8](repeating: UInt8(i % 251), count: n)))
        }
        let ranges = secrets.map { s -> (UInt, UInt) in
            let a = UInt(bitPattern: s.unsafePointer)
            return (a, a + UInt(s.count))
        }.sorted { $0.0 < $1.0 }
        for (a, b) in zip(ranges, ranges.dropFirst()) { XCTAssertLessThanOrEqual(a.1, b.0) }
        for (i, s) in secrets.enumerated() {
            XCTAssertEqual(bytesOf(s), [UInt8](repeating: UInt8(i % 251), count: s.count))
            XCTAssertEqual(UInt(bitPattern: s.unsafePointer) % 16, 0, "slots are 16-byte aligned")
        }
        secrets.forEach { $0.wipe() }
    }

    func testSlotsAreLockedInMemory() throws {
        let s = SecureBytes(randomCount: 32)
        defer { s.wipe() }
        let addr = UInt(bitPattern: s.unsafePointer)
        // /proc/self/smaps: the mapping that holds the slot reports it Locked.
        // (Read as a stream: /proc files report size 0.)
        let h = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/smaps"))
        let smaps = String(decoding: try h.readToEnd() ?? Data(), as: UTF8.self)
        try h.close()
        var inMapping = false, locked: Int? = nil
        for line in smaps.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            if let range = f.first, range.contains("-"), f.count >= 5 {
                let b = range.split(separator: "-")
                if b.count == 2, let lo = UInt(b[0], radix: 16), let hi = UInt(b[1], radix: 16) {
                    inMapping = lo <= addr && addr < hi
                    continue
                }
            }
            if inMapping, f.first == "Locked:", f.count >= 2 { locked = Int(f[1]) }
        }
        XCTAssertNotNil(locked)
        XCTAssertGreaterThan(locked ?? 0, 0, "the slab holding a secret must be mlock'ed")
    }

    func testLargeSecretsStillGetTheirOwnAllocation() {
        let before = SecureSlots.slabCount
        let big = SecureBytes(randomCount: 8192)
        XCTAssertEqual(SecureSlots.slabCount, before)
        XCTAssertEqual(big.count, 8192)
        big.wipe()
        XCTAssertTrue(big.isWiped)
    }
}
