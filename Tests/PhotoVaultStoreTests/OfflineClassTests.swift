// class get/set/list offline: a file's class is its header byte, set by rewrapping the key
// only (every chunk byte stays, inode and times too); a directory's default class lives in
// .pvdir and is what new files and new subdirectories get.
import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class OfflineClassTests: XCTestCase {
    func ciphertext(_ tree: UserTree, _ path: String) throws -> (bytes: [UInt8], st: stat) {
        let e = try VaultResolver(tree: tree).entry(VaultPath(path))
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDONLY)
        defer { close(fd) }
        return (try FileIO.readAll(fd, limit: 1 << 24), try OfflineSys.fstat(fd))
    }

    func testGetSetListRoundTripRewrapsOnlyTheKey() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.mkdirs(scratch + "/album")
        let content = SecureRandom.bytes(500_000)
        OfflineFixture.write(scratch + "/album/a.jpg", content)
        OfflineFixture.write(scratch + "/album/b.jpg", [1, 2, 3])
        OfflineFixture.setTimes(scratch + "/album/a.jpg", atime: (1_600_000_000, 1), mtime: (1_500_000_000, 2))
        try Importer(tree: tree).import(sources: [scratch + "/album"], into: "/")
        let tool = ClassTool(tree: tree)
        XCTAssertEqual(try tool.get("/album/a.jpg").protectionClass, .complete)
        XCTAssertEqual(try tool.get("/album/a.jpg").kind, .file)

        let before = try ciphertext(tree, "/album/a.jpg")
        for cls in [ProtectionClass.none, .completeUnlessOpen, .untilFirstAuth, .complete] {
            try tool.set("/album/a.jpg", to: cls)
            XCTAssertEqual(try tool.get("/album/a.jpg").protectionClass, cls)
            let after = try ciphertext(tree, "/album/a.jpg")
            XCTAssertEqual(after.bytes.count, before.bytes.count)
            // Every chunk byte after the header is the same: nothing was re-encrypted.
            XCTAssertEqual(Array(after.bytes[FileHeader.size...]), Array(before.bytes[FileHeader.size...]), cls.name)
            XCTAssertEqual(after.bytes[6], cls.rawValue)
            XCTAssertEqual(Array(after.bytes[8..<24]), Array(before.bytes[8..<24]))   // same file ID
            XCTAssertEqual(after.st.st_ino, before.st.st_ino)
            XCTAssertEqual(after.st.st_mtim.tv_sec, 1_500_000_000)
            XCTAssertEqual(after.st.st_mtim.tv_nsec, 2)
            // And it still decrypts to the same photo under the new class.
            let out = scratch + "/out-" + cls.name
            try Exporter(tree: tree).export(paths: ["/album/a.jpg"], to: out)
            XCTAssertEqual(OfflineFixture.read(out + "/a.jpg"), content)
        }
        XCTAssertNotEqual(Array(try ciphertext(tree, "/album/a.jpg").bytes[24..<128]), Array(before.bytes[24..<128]),
                          "the key slot is rewrapped with a fresh nonce")
        XCTAssertTrue(try Fsck(tree: tree).run().isClean)

        try tool.set("/album/b.jpg", to: .untilFirstAuth)
        XCTAssertEqual(try tool.list("/album").map { "\($0.path) \($0.kind) \($0.protectionClass!.name)" },
                       ["/album/a.jpg file complete", "/album/b.jpg file until-first-auth"])
        XCTAssertEqual(try tool.list("/").map { "\($0.path) \($0.kind) \($0.protectionClass!.name)" },
                       ["/album directory complete"])
    }

    /// Byte 6 of a header is in the clear, but it is the file's class only if the header
    /// authenticates: `get` and `list` used to print a class an attacker wrote there (a
    /// `complete` file shown as `none`, exit 0) for a file no command can open.
    func testAClassByteChangedOnDiskIsAnIntegrityErrorNotAClass() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.mkdirs(scratch + "/album")
        OfflineFixture.write(scratch + "/album/a.jpg", SecureRandom.bytes(10_000))
        OfflineFixture.write(scratch + "/album/b.jpg", SecureRandom.bytes(10))
        try Importer(tree: tree).import(sources: [scratch + "/album"], into: "/")
        let tool = ClassTool(tree: tree)
        try tool.set("/album/b.jpg", to: .none)
        let e = try VaultResolver(tree: tree).entry(VaultPath("/album/a.jpg"))
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        for forged in [ProtectionClass.none, .untilFirstAuth, .completeUnlessOpen] {
            var b = forged.rawValue
            XCTAssertEqual(pwrite(fd, &b, 1, 6), 1)
            XCTAssertIntegrityError(try tool.get("/album/a.jpg"), forged.name)
            XCTAssertIntegrityError(try tool.list("/album"), forged.name)
        }
        var b = ProtectionClass.complete.rawValue
        XCTAssertEqual(pwrite(fd, &b, 1, 6), 1)
        XCTAssertEqual(try tool.get("/album/a.jpg").protectionClass, .complete)
        // The other file's real class is untouched by the check.
        XCTAssertEqual(try tool.list("/album").map { $0.protectionClass?.name }, ["complete", "none"])
        // A changed key slot byte with the class byte intact is caught too.
        var slot: UInt8 = 0
        XCTAssertEqual(pread(fd, &slot, 1, 60), 1)
        slot ^= 1
        XCTAssertEqual(pwrite(fd, &slot, 1, 60), 1)
        XCTAssertIntegrityError(try tool.get("/album/a.jpg"))
    }

    func testDirectoryDefaultClassAppliesToNewFilesAndDirectoriesOnly() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.mkdirs(scratch + "/in/sub")
        OfflineFixture.write(scratch + "/in/old.jpg", [9])
        try Importer(tree: tree).import(sources: [scratch + "/in/old.jpg"], into: "/album")
        let tool = ClassTool(tree: tree)
        XCTAssertEqual(try tool.get("/album").protectionClass, .complete)
        XCTAssertEqual(try tool.get("/album").kind, .directory)

        try tool.set("/album", to: .untilFirstAuth)
        XCTAssertEqual(try tool.get("/album").protectionClass, .untilFirstAuth)
        XCTAssertEqual(try tool.get("/album/old.jpg").protectionClass, .complete, "existing files keep their class")

        OfflineFixture.write(scratch + "/in/sub/new.jpg", [1, 2])
        OfflineFixture.write(scratch + "/in/empty.jpg", [])
        try Importer(tree: tree).import(sources: [scratch + "/in/sub", scratch + "/in/empty.jpg"], into: "/album")
        XCTAssertEqual(try tool.get("/album/sub").protectionClass, .untilFirstAuth, "a new directory inherits the default")
        XCTAssertEqual(try tool.get("/album/sub/new.jpg").protectionClass, .untilFirstAuth)
        // Intermediate directories created by the import inherit it too.
        try Importer(tree: tree).import(sources: [scratch + "/in/old.jpg"], into: "/album/x/y")
        XCTAssertEqual(try tool.get("/album/x/y").protectionClass, .untilFirstAuth)
        XCTAssertEqual(try tool.get("/album/x/y/old.jpg").protectionClass, .untilFirstAuth)
        // An explicit class overrides the directory default.
        try Importer(tree: tree).import(sources: [scratch + "/in/sub/new.jpg"], into: "/album/x", class: ProtectionClass.none)
        XCTAssertEqual(try tool.get("/album/x/new.jpg").protectionClass, ProtectionClass.none)

        // The root's default and the .pvdir MAC survive a change.
        try tool.set("/", to: .completeUnlessOpen)
        XCTAssertEqual(try tool.get("/").protectionClass, .completeUnlessOpen)
        XCTAssertTrue(try Fsck(tree: tree).run().isClean)

        XCTAssertThrowsError(try tool.get("/album/missing.jpg")) { XCTAssertEqual($0 as? StoreError, .notFound("/album/missing.jpg")) }
    }

    func testClassOfAnEmptyFileIsItsDirectoryDefaultUntilSet() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        try ClassTool(tree: tree).set("/", to: .none)
        // A 0-byte ciphertext file (as the mount leaves after `touch`): no header yet.
        let root = try VaultResolver(tree: tree).root
        let name = tree.names.encode(Array("touched".utf8), in: root.info).entry
        close(openat(root.fd, name, O_WRONLY | O_CREAT, 0o644))
        let tool = ClassTool(tree: tree)
        let info = try tool.get("/touched")
        XCTAssertEqual(info.protectionClass, ProtectionClass.none)
        XCTAssertTrue(info.pending)
        try tool.set("/touched", to: .untilFirstAuth)
        let set = try tool.get("/touched")
        XCTAssertEqual(set.protectionClass, .untilFirstAuth)
        XCTAssertFalse(set.pending)
        XCTAssertEqual(try ciphertext(tree, "/touched").bytes.count, FileHeader.size)
        try Exporter(tree: tree).export(paths: ["/touched"], to: scratch + "/o")
        XCTAssertEqual(OfflineFixture.read(scratch + "/o/touched"), [])
    }
}
