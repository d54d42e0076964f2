import XCTest
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class NameCodecTests: XCTestCase {
    let keyring = try! Fixture.randomKeyring()   // a test process never runs short of locked memory
    lazy var codec = NameCodec(keyring: keyring)
    let dirA = DirectoryInfo(id: [UInt8](repeating: 0xA, count: 16))
    let dirB = DirectoryInfo(id: [UInt8](repeating: 0xB, count: 16))

    /// A real directory to hold companions; closed at teardown.
    private func openDir() -> Int32 {
        let path = Fixture.tempDir(self)
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        precondition(fd >= 0)
        addTeardownBlock { close(fd) }
        return fd
    }

    private static func isBase64URL(_ s: String) -> Bool {
        s.utf8.allSatisfy { c in (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || c == 45 || c == 95 }
    }

    func testDeterministicWithinADirectoryAndDifferentAcrossDirectories() throws {
        let fd = openDir()
        for name in ["IMG_0001.JPG", "a", "holiday 2024", String(repeating: "x", count: 160)] {
            let a1 = codec.encode(Array(name.utf8), in: dirA), a2 = codec.encode(Array(name.utf8), in: dirA)
            let b = codec.encode(Array(name.utf8), in: dirB)
            XCTAssertEqual(a1, a2, name)
            XCTAssertNotEqual(a1.entry, b.entry, name)
            XCTAssertEqual(try codec.decode(entry: a1.entry, in: dirA, dirfd: fd), Array(name.utf8))
            // An entry moved into another directory does not decode there.
            XCTAssertIntegrityError(try codec.decode(entry: a1.entry, in: dirB, dirfd: fd), name)
        }
        // A different keyring (another account) gives other entries for the same directory ID.
        // (The codec shares the keyring's key objects: keep that keyring alive while using it.)
        let otherKeyring = try Fixture.randomKeyring()
        let other = NameCodec(keyring: otherKeyring)
        XCTAssertNotEqual(other.encode(Array("a".utf8), in: dirA), codec.encode(Array("a".utf8), in: dirA))
        withExtendedLifetime(otherKeyring) {}
    }

    func testEncodedNamesAreBase64URLOnly() {
        var rng = SeededGenerator(seed: 5)
        for n in [1, 2, 15, 16, 17, 100, 160, 161, 200, 255] {
            let name = (0..<n).map { _ in UInt8.random(in: 0x20...0x7e, using: &rng) }.map { $0 == 0x2f ? 0x5f : $0 }
            let enc = codec.encode(name, in: dirA)
            switch enc {
            case .short(let s):
                XCTAssertTrue(Self.isBase64URL(s), s)
                XCTAssertLessThanOrEqual(s.utf8.count, 255)
            case .long(let entry, let full):
                XCTAssertTrue(entry.hasPrefix("~"))
                XCTAssertTrue(Self.isBase64URL(String(entry.dropFirst())), entry)
                XCTAssertTrue(Self.isBase64URL(full))
                XCTAssertEqual(entry.utf8.count, 44)
            }
        }
    }

    func testShortLongBoundaryAt160Bytes() {
        if case .long = codec.encode([UInt8](repeating: 0x61, count: 160), in: dirA) { XCTFail("160 bytes should be a short name") }
        guard case .long = codec.encode([UInt8](repeating: 0x61, count: 161), in: dirA) else { return XCTFail("161 bytes should be long") }
    }

    func testMaximumLengthNamesRoundTripThroughTheCompanion() throws {
        let fd = openDir()
        for name in [[UInt8](repeating: 0x41, count: 255),
                     Array(String(repeating: "日", count: 85).utf8),   // 255 bytes of 3-byte characters
                     Array((String(repeating: "ü", count: 127) + "x").utf8)] {
            XCTAssertEqual(name.count, 255)
            let enc = codec.encode(name, in: dirA)
            guard case .long = enc else { return XCTFail("a 255-byte name must be long") }
            XCTAssertLessThanOrEqual(enc.entry.utf8.count, 255)
            XCTAssertLessThanOrEqual(enc.companion!.utf8.count, 255)
            try NameCodec.writeCompanion(enc, in: fd)
            XCTAssertTrue(NameCodec.isInternal(enc.companion!))
            XCTAssertFalse(NameCodec.isInternal(enc.entry))
            XCTAssertEqual(try codec.decode(entry: enc.entry, in: dirA, dirfd: fd), name)
            NameCodec.removeCompanion(enc, in: fd)
            XCTAssertIntegrityError(try codec.decode(entry: enc.entry, in: dirA, dirfd: fd), "missing companion")
        }
    }

    /// The mount holds its directories as O_PATH descriptors, which fsync refuses (EBADF):
    /// a companion written through one is still created and its directory synced.
    func testCompanionThroughAnOPathDirectoryDescriptor() throws {
        let opath = open(Fixture.tempDir(self), 0o10000000 | O_DIRECTORY | O_CLOEXEC)   // O_PATH
        XCTAssertGreaterThanOrEqual(opath, 0)
        defer { close(opath) }
        XCTAssertEqual(fsync(opath), -1)
        XCTAssertEqual(errno, EBADF)
        let enc = codec.encode([UInt8](repeating: 0x42, count: 200), in: dirA)
        try NameCodec.writeCompanion(enc, in: opath)
        XCTAssertEqual(try codec.decode(entry: enc.entry, in: dirA, dirfd: opath), [UInt8](repeating: 0x42, count: 200))
        XCTAssertNoThrow(try AtomicFile.syncDirectory(opath, "test"))
    }

    func testUnicodeNames() throws {
        let fd = openDir()
        for name in ["Ünïcödé.jpg", "фото.png", "写真 2024-05-01.heic", "🎉🎂.mov", "e\u{301}", "é", "a\u{200B}b", "\u{FEFF}bom"] {
            let enc = codec.encode(Array(name.utf8), in: dirA)
            try NameCodec.writeCompanion(enc, in: fd)
            XCTAssertEqual(try codec.decode(entry: enc.entry, in: dirA, dirfd: fd), Array(name.utf8), name)
        }
        // Bytes are preserved exactly: NFC and NFD spellings are different names.
        XCTAssertNotEqual(codec.encode(Array("e\u{301}".utf8), in: dirA), codec.encode(Array("é".utf8), in: dirA))
    }

    func testModifiedEntryIsRejected() {
        let fd = openDir()
        let entry = codec.encode(Array("vacation.jpg".utf8), in: dirA).entry
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var chars = Array(entry)
        for i in 0..<chars.count {
            let orig = chars[i]
            chars[i] = alphabet[(alphabet.firstIndex(of: orig)! + 1) % 64]
            XCTAssertIntegrityError(try codec.decode(entry: String(chars), in: dirA, dirfd: fd), "position \(i)")
            chars[i] = orig
        }
        XCTAssertIntegrityError(try codec.decode(entry: String(entry.dropLast()), in: dirA, dirfd: fd))
        XCTAssertIntegrityError(try codec.decode(entry: entry + "A", in: dirA, dirfd: fd))
    }

    func testCompanionThatDoesNotMatchIsRejected() throws {
        let fd = openDir()
        let one = codec.encode([UInt8](repeating: 0x31, count: 200), in: dirA)
        let two = codec.encode([UInt8](repeating: 0x32, count: 200), in: dirA)
        guard case .long(let entry1, _) = one, case .long(_, let full2) = two else { return XCTFail("expected long names") }
        // The companion of entry 1 holds name 2's full encoding (swapped companions).
        try AtomicFile.write(Array(full2.utf8), in: fd, name: entry1 + NameCodec.companionSuffix)
        XCTAssertIntegrityError(try codec.decode(entry: entry1, in: dirA, dirfd: fd))
        // A companion with one byte changed.
        guard case .long(_, let full1) = one else { return }
        var bytes = Array(full1.utf8)
        bytes[10] = bytes[10] == 0x41 ? 0x42 : 0x41
        try AtomicFile.write(bytes, in: fd, name: entry1 + NameCodec.companionSuffix)
        XCTAssertIntegrityError(try codec.decode(entry: entry1, in: dirA, dirfd: fd))
        // An empty companion.
        try AtomicFile.write([], in: fd, name: entry1 + NameCodec.companionSuffix)
        XCTAssertIntegrityError(try codec.decode(entry: entry1, in: dirA, dirfd: fd))
    }

    /// A `~` entry whose companion holds a name short enough to be an entry itself is never
    /// written by `encode`: it is forged, and would show a second file under the name of an
    /// existing one (the SIV still authenticates in this directory). Rejected.
    func testLongEntryWhoseCompanionHoldsAShortNameIsRejected() throws {
        let fd = openDir()
        guard case .short(let short) = codec.encode(Array("a.jpg".utf8), in: dirA) else { return XCTFail("expected a short name") }
        XCTAssertEqual(try codec.decode(entry: short, in: dirA, dirfd: fd), Array("a.jpg".utf8))
        let forged = NameCodec.longEntry(for: short)
        try AtomicFile.write(Array(short.utf8), in: fd, name: forged + NameCodec.companionSuffix)
        let file = openat(fd, forged, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        XCTAssertGreaterThanOrEqual(file, 0)
        close(file)
        XCTAssertIntegrityError(try codec.decode(entry: forged, in: dirA, dirfd: fd))
        // The longest short name (a 160-byte plaintext) is refused the same way.
        guard case .short(let longest) = codec.encode([UInt8](repeating: 0x61, count: 160), in: dirA) else {
            return XCTFail("a 160-byte name is short")
        }
        XCTAssertLessThanOrEqual(longest.utf8.count, NameCodec.maxEntryLength)
        let forged2 = NameCodec.longEntry(for: longest)
        try AtomicFile.write(Array(longest.utf8), in: fd, name: forged2 + NameCodec.companionSuffix)
        XCTAssertIntegrityError(try codec.decode(entry: forged2, in: dirA, dirfd: fd))
    }

    func testForeignAndConflictCopyNamesAreIntegrityErrors() throws {
        let fd = openDir()
        let good = codec.encode(Array("photo.jpg".utf8), in: dirA).entry
        let longGood = codec.encode([UInt8](repeating: 0x61, count: 220), in: dirA)
        try NameCodec.writeCompanion(longGood, in: fd)
        let foreign = ["abc (conflicted copy).x", "x.sync-conflict-2024", good + " (conflicted copy)",
                       good + ".sync-conflict-20240101-123456-ABCDEFG", longGood.entry + " (1)", "~", "~nothing",
                       "", "Zg", "Zh", "A", "AAAA", "README.md", "Thumbs.db", "é", String(repeating: "A", count: 255),
                       "\u{1}\u{2}", "..."]
        for name in foreign {
            XCTAssertIntegrityError(try codec.decode(entry: name, in: dirA, dirfd: fd), name)
        }
    }

    func testInternalEntries() {
        XCTAssertTrue(NameCodec.isInternal(".pvdir"))
        XCTAssertTrue(NameCodec.isInternal(".pvmount"))
        XCTAssertTrue(NameCodec.isInternal(".pvtmp-0123456789abcdef"))
        XCTAssertTrue(NameCodec.isInternal("~abc.name"))
        XCTAssertTrue(NameCodec.isInternal("."))
        XCTAssertTrue(NameCodec.isInternal(".."))
        XCTAssertFalse(NameCodec.isInternal("~abc"))
        XCTAssertFalse(NameCodec.isInternal("abc.name"))
    }
}
