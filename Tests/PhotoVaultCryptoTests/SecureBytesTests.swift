import XCTest
@testable import PhotoVaultCrypto

final class SecureBytesTests: XCTestCase {
    func testNewSecretIsZeroFilledAndSized() {
        let s = SecureBytes(count: 48)
        XCTAssertEqual(s.count, 48)
        XCTAssertFalse(s.isWiped)
        XCTAssertEqual(bytesOf(s), [UInt8](repeating: 0, count: 48))
    }

    func testRandomSecretsDiffer() {
        let a = SecureBytes(randomCount: 32), b = SecureBytes(randomCount: 32)
        XCTAssertNotEqual(bytesOf(a), bytesOf(b))
        XCTAssertNotEqual(bytesOf(a), [UInt8](repeating: 0, count: 32))
    }

    func testWipeIsIdempotentAndKeepsCount() {
        let s = SecureBytes(copying: [1, 2, 3, 4])
        XCTAssertEqual(bytesOf(s), [1, 2, 3, 4])
        s.wipe()
        XCTAssertTrue(s.isWiped)
        XCTAssertEqual(s.count, 4)
        s.wipe()   // second wipe: no double free, still wiped
        XCTAssertTrue(s.isWiped)
    }

    func testConsumingZeroesTheSourceArray() {
        var source: [UInt8] = [9, 8, 7, 6, 5]
        let s = SecureBytes(consuming: &source)
        XCTAssertEqual(source, [0, 0, 0, 0, 0])
        XCTAssertEqual(source.count, 5)
        XCTAssertEqual(bytesOf(s), [9, 8, 7, 6, 5])
    }

    func testCopyIsIndependentOfTheOriginal() {
        let a = SecureBytes(copying: [1, 2, 3])
        let b = a.copy()
        XCTAssertEqual(bytesOf(b), [1, 2, 3])
        b.withUnsafeMutableBytes { $0[0] = 42 }
        XCTAssertEqual(bytesOf(a), [1, 2, 3])
        a.wipe()
        XCTAssertFalse(b.isWiped)
        XCTAssertEqual(bytesOf(b), [42, 2, 3])
    }

    func testCopyingFromRawBuffer() {
        let src: [UInt8] = Array(0..<100).map { UInt8($0) }
        let s = src.withUnsafeBytes { SecureBytes(copying: $0) }
        XCTAssertEqual(bytesOf(s), src)
        XCTAssertEqual(Array(UnsafeBufferPointer(start: s.unsafePointer, count: 100)), src)
    }

    func testSecureZeroAndConstantTimeEqual() {
        var a: [UInt8] = [1, 2, 3]
        secureZero(&a)
        XCTAssertEqual(a, [0, 0, 0])
        XCTAssertTrue(constantTimeEqual([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(constantTimeEqual([1, 2, 3], [1, 2, 4]))
        XCTAssertFalse(constantTimeEqual([1, 2, 3], [1, 2]))
        XCTAssertTrue(constantTimeEqual([], []))
    }
}
