import XCTest
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Data-protection classes at the content layer: what a locked keyring can still open/create.
final class ContentProtectionClassTests: XCTestCase {
    private let layout = ChunkLayout(cipher: .xchacha20poly1305, chunkSize: 4096)
    private let data: [UInt8] = Array("content that must survive a lock".utf8)

    private func makeFiles(_ dir: String, _ keyring: UserKeyring) throws {
        for c in ProtectionClass.allCases {
            let f = try Fixture.createContent(at: "\(dir)/\(c.name)", layout: layout, keyring: keyring, protectionClass: c)
            try f.writeBytes(data, at: 0)
            XCTAssertEqual(f.protectionClass, c)
            f.close()
        }
    }

    func testOpeningAfterLock() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.keyring()
        try makeFiles(dir, keyring)
        keyring.lock()
        for c in [ProtectionClass.complete, .completeUnlessOpen] {
            XCTAssertThrowsError(try Fixture.openContent(at: "\(dir)/\(c.name)", layout: layout, keyring: keyring), c.name) {
                XCTAssertEqual($0 as? StoreError, .locked, c.name)
            }
        }
        for c in [ProtectionClass.untilFirstAuth, .none] {
            let f = try Fixture.openContent(at: "\(dir)/\(c.name)", layout: layout, keyring: keyring)
            XCTAssertEqual(try f.readAll(), data, c.name)
            f.close()
        }
        // Unlocking with the same master key brings the locked classes back.
        try keyring.unlock(masterKey: SecureBytes(copying: Fixture.knownMasterKey))
        for c in ProtectionClass.allCases {
            let f = try Fixture.openContent(at: "\(dir)/\(c.name)", layout: layout, keyring: keyring)
            XCTAssertEqual(try f.readAll(), data, c.name)
            f.close()
        }
    }

    func testCompleteUnlessOpenCanBeCreatedAndWrittenWhileLocked() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.keyring()
        keyring.lock()
        let path = dir + "/new"
        let f = try Fixture.createContent(at: path, layout: layout, keyring: keyring, protectionClass: .completeUnlessOpen)
        let big = (0..<10000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        try f.writeBytes(big, at: 0)
        try f.writeBytes([1, 2, 3], at: 4095)        // read-modify-write across a boundary
        var expected = big
        expected.replaceSubrange(4095..<4098, with: [1, 2, 3])
        XCTAssertEqual(try f.readAll(), expected, "the creating handle keeps working while locked")
        f.close()
        XCTAssertThrowsError(try Fixture.openContent(at: path, layout: layout, keyring: keyring)) {
            XCTAssertEqual($0 as? StoreError, .locked)
        }
        try keyring.unlock(masterKey: SecureBytes(copying: Fixture.knownMasterKey))
        let g = try Fixture.openContent(at: path, layout: layout, keyring: keyring)
        XCTAssertEqual(try g.readAll(), expected)
        XCTAssertEqual(g.protectionClass, .completeUnlessOpen)
        g.close()
    }

    func testCompleteCannotBeCreatedWhileLocked() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.keyring()
        keyring.lock()
        XCTAssertThrowsError(try Fixture.createContent(at: dir + "/c", layout: layout, keyring: keyring, protectionClass: .complete)) {
            XCTAssertEqual($0 as? StoreError, .locked)
        }
        // until-first-auth and none still can.
        for c in [ProtectionClass.untilFirstAuth, .none] {
            let f = try Fixture.createContent(at: "\(dir)/\(c.name)", layout: layout, keyring: keyring, protectionClass: c)
            try f.writeBytes(data, at: 0)
            f.close()
        }
    }

    func testForgetKeyFailsOpenHandles() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.keyring()
        let f = try Fixture.createContent(at: dir + "/f", layout: layout, keyring: keyring, protectionClass: .complete)
        try f.writeBytes(data, at: 0)
        f.forgetKey()
        XCTAssertTrue(f.keyForgotten)
        XCTAssertThrowsError(try f.readBytes(0, 4)) { XCTAssertEqual($0 as? StoreError, .locked) }
        XCTAssertThrowsError(try f.writeBytes([1], at: 0)) { XCTAssertEqual($0 as? StoreError, .locked) }
        XCTAssertThrowsError(try f.truncate(to: 1)) { XCTAssertEqual($0 as? StoreError, .locked) }
        f.close()
    }

    func testChangingTheClassRewrapsWithoutReencrypting() throws {
        let dir = Fixture.tempDir(self)
        let keyring = try Fixture.keyring()
        let f = try Fixture.createContent(at: dir + "/f", layout: layout, keyring: keyring, protectionClass: .complete)
        try f.writeBytes(data, at: 0)
        let before = Fixture.readFile(dir + "/f")
        try f.setProtectionClass(.none)
        f.close()
        let after = Fixture.readFile(dir + "/f")
        XCTAssertEqual(after[6], ProtectionClass.none.rawValue)
        XCTAssertEqual(Array(after[128...]), Array(before[128...]), "chunks untouched")
        XCTAssertEqual(Array(after[8..<24]), Array(before[8..<24]), "same file ID")
        keyring.lock()
        let g = try Fixture.openContent(at: dir + "/f", layout: layout, keyring: keyring)
        XCTAssertEqual(try g.readAll(), data, "class none opens while locked")
        g.close()
    }
}
