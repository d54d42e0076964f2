// Sync engines on a store (docs/SYNC.md): each engine's conflict-copy naming is recognised
// (and nothing else is), conflict copies are shown under the original's name with a mark and
// the extension last, names written under either of two versions of a folder's `.pvdir` are
// all read, two devices creating the same folder give it the same ID, and fsck reports
// conflicts and sync debris without calling them damage or moving them.
import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class SyncConflictTests: XCTestCase {
    // MARK: naming patterns

    func testEachEnginesConflictNameIsRecognised() {
        let e = "AbC-_09xyz"   // a ciphertext entry: base64url, no dot
        let cases: [(String, ConflictName.Engine, String, String)] = [
            (e + ".sync-conflict-20261207-030224-7RXRS6P", .syncthing, e, "conflict 2026-12-07 030224"),
            (".sync-conflict-20261207-030224-7RXRS6P.pvdir", .syncthing, ".pvdir", "conflict 2026-12-07 030224"),
            ("~hash.sync-conflict-20261207-030224-ABCDEF2.name", .syncthing, "~hash.name", "conflict 2026-12-07 030224"),
            ("IMG_0001.sync-conflict-20261207-030224-7RXRS6P.jpg", .syncthing, "IMG_0001.jpg", "conflict 2026-12-07 030224"),
            (e + " (conflicted copy 2026-12-07 030224)", .nextcloud, e, "conflict 2026-12-07 030224"),
            (e + " (conflicted copy alice 2026-12-07 030224)", .nextcloud, e, "conflict 2026-12-07 030224"),
            (".pvdir (conflicted copy 2026-12-07 030224)", .nextcloud, ".pvdir", "conflict 2026-12-07 030224"),
            ("a (conflicted copy 2026-12-07 030224).rec", .nextcloud, "a.rec", "conflict 2026-12-07 030224"),
            (e + "_conflict-20261207-030224", .owncloud, e, "conflict 2026-12-07 030224"),
            ("a_conflict-20261207-030224.rec", .owncloud, "a.rec", "conflict 2026-12-07 030224"),
            (e + " (laptop's conflicted copy 2026-12-07)", .dropbox, e, "conflict laptop 2026-12-07"),
            (e + " (my pc's conflicted copy 2026-12-07 (1))", .dropbox, e, "conflict my pc 2026-12-07 1"),
            (e + ".conflict1", .rclone, e, "conflict 1"),
            (e + ".conflict12", .rclone, e, "conflict 12"),
            (e + "..path1", .rclone, e, "conflict path1"),
            (e + "..path2", .rclone, e, "conflict path2"),
            (".pvdir..path2", .rclone, ".pvdir", "conflict path2"),
        ]
        for (entry, engine, original, mark) in cases {
            guard let c = ConflictName.parse(entry) else { XCTFail("not recognised: \(entry)"); continue }
            XCTAssertEqual(c.engine, engine, entry)
            XCTAssertEqual(c.original, original, entry)
            XCTAssertEqual(c.mark, mark, entry)
        }
        // A copy of a copy peels to the first name.
        let twice = e + ".sync-conflict-20261207-030224-7RXRS6P.sync-conflict-20261208-010203-ABCDEFG"
        XCTAssertEqual(ConflictName.root(twice)?.original, e)
        XCTAssertEqual(ConflictName.root(twice)?.marks.count, 2)
        XCTAssertTrue(ConflictName.isCopy(".sync-conflict-20261207-030224-7RXRS6P.pvdir", of: ".pvdir"))
    }

    func testNamesThatAreNoConflictCopiesAreNotTakenForOnes() {
        for name in ["abc (conflicted copy).x", "x.sync-conflict-2024", "x.sync-conflict-20240101-123456-abcdefg",
                     "x.sync-conflict-20240101-123456-ABCDEFG.tar.gz", ".sync-conflict-20240101-123456-ABCDEFG",
                     "a (conflicted copy 2026-12-07).x", "a_conflict-2026-12-07", "a.conflict", "a.conflictx", ".conflict1",
                     "..path1", "a..path3", "a (laptop's conflicted copy 12-07).x", "IMG_0001.jpg", "AbC-_09xyz", ".pvdir", "Thumbs.db"] {
            XCTAssertNil(ConflictName.parse(name), name)
        }
    }

    func testDisplayNameKeepsTheExtensionLast() {
        func shown(_ name: String, _ marks: [String] = ["conflict 2026-12-07 030224"]) -> String {
            String(decoding: ConflictName.displayName(Array(name.utf8), marks: marks), as: UTF8.self)
        }
        XCTAssertEqual(shown("IMG_0001.jpg"), "IMG_0001 (conflict 2026-12-07 030224).jpg")
        XCTAssertEqual(shown("notes"), "notes (conflict 2026-12-07 030224)")
        XCTAssertEqual(shown(".hidden"), ".hidden (conflict 2026-12-07 030224)")
        XCTAssertEqual(shown("a.tar.gz"), "a.tar (conflict 2026-12-07 030224).gz")
        XCTAssertEqual(shown("x.jpg", ["conflict 1", "conflict path2"]), "x (conflict 1; conflict path2).jpg")
        // Never over 255 bytes: the base name gives way, at a character boundary.
        let long = shown(String(repeating: "é", count: 120) + ".jpg")
        XCTAssertLessThanOrEqual(long.utf8.count, 255)
        XCTAssertTrue(long.hasSuffix(" (conflict 2026-12-07 030224).jpg"))
        XCTAssertTrue(long.hasPrefix("éé"))
        XCTAssertTrue(ConflictName.mayBeDisplayName(Array(shown("a.jpg").utf8)))
        XCTAssertFalse(ConflictName.mayBeDisplayName(Array("a.jpg".utf8)))
    }

    func testSyncDebrisIsRecognisedAndInternalCopiesAreInternal() {
        for d in [".syncthing.IMGX.tmp", ".stfolder", ".stignore", "~lock.tmp", ".~lock.a.odt#", "desktop.ini", ".DS_Store",
                  "Thumbs.db", ".sync_0123abcd.db", ".sync_0123abcd.db-wal", "x.partial"] {
            XCTAssertTrue(SyncDebris.matches(d), d)
        }
        for n in ["AbC-_09xyz", "~" + String(repeating: "A", count: 43), ".pvdir"] { XCTAssertFalse(SyncDebris.matches(n), n) }
        XCTAssertTrue(NameCodec.isInternal(".sync-conflict-20261207-030224-7RXRS6P.pvdir"))
        XCTAssertTrue(NameCodec.isInternal(".pvdir (conflicted copy 2026-12-07 030224)"))
        XCTAssertTrue(NameCodec.isInternal("~abc.sync-conflict-20261207-030224-7RXRS6P.name"))
        XCTAssertTrue(NameCodec.isInternal(".pvmount..path1"))
        XCTAssertFalse(NameCodec.isInternal("AbC.sync-conflict-20261207-030224-7RXRS6P"))
    }

    // MARK: directories

    /// What an older photovault did on each device: `trip` made with a random ID.
    func makeRandomIDDirectory(_ tree: UserTree, _ name: String) throws -> VaultDirectory {
        let r = try VaultResolver(tree: tree)
        let entry = r.entry(name: name)
        XCTAssertEqual(mkdirat(r.root.fd, entry, 0o700), 0)
        let fd = openat(r.root.fd, entry, O_RDONLY | O_DIRECTORY)
        try DirectoryInfo().write(dirfd: fd, keyring: tree.keyring)
        close(fd)
        return try r.directory(VaultPath("/" + name))
    }

    func writeFile(_ tree: UserTree, _ dir: VaultDirectory, _ info: DirectoryInfo, _ name: String, _ bytes: [UInt8]) throws {
        let entry = tree.names.encode(Array(name.utf8), in: info).entry
        let fd = openat(dir.fd, entry, O_RDWR | O_CREAT | O_EXCL, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let f = try ContentFile.create(fd: fd, layout: tree.layout, keyring: tree.keyring, protectionClass: .default)
        _ = try bytes.withUnsafeBytes { try f.write(from: $0.baseAddress!, count: bytes.count, offset: 0) }
        f.close()
    }

    func testNamesUnderEveryVersionOfAFoldersDirectoryInfoAreRead() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        // Device A's `trip` (its .pvdir), with a.jpg; device B's version of the .pvdir, another
        // ID, kept by Syncthing as a conflict copy, with b.jpg written under it.
        let trip = try makeRandomIDDirectory(tree, "trip")
        let a = Array("photo of device A".utf8), b = Array("photo of device B".utf8)
        try writeFile(tree, trip, trip.info, "a.jpg", a)
        let other = DirectoryInfo(defaultClass: .none)
        try AtomicFile.write(other.encode(keyring: tree.keyring), in: trip.fd, name: ".sync-conflict-20261207-030224-7RXRS6P.pvdir")
        try writeFile(tree, trip, other, "b.jpg", b)

        let reopened = try VaultResolver(tree: tree).directory(VaultPath("/trip"))
        XCTAssertEqual(reopened.info.id, trip.info.id, "names are written under .pvdir")
        XCTAssertEqual(reopened.info.alternateIDs, [other.id])
        XCTAssertEqual(reopened.info.defaultClass, trip.info.defaultClass)
        // Found by path, listed, exported.
        XCTAssertNotNil(try VaultResolver(tree: tree).entry(VaultPath("/trip/b.jpg")).stat())
        let listed = try ClassTool(tree: tree).list("/trip").map(\.path)
        XCTAssertEqual(listed, ["/trip/a.jpg", "/trip/b.jpg"])
        try Exporter(tree: tree).export(paths: ["/trip"], to: scratch + "/out")
        XCTAssertEqual(OfflineFixture.read(scratch + "/out/trip/a.jpg"), a)
        XCTAssertEqual(OfflineFixture.read(scratch + "/out/trip/b.jpg"), b)
        // fsck: a conflict, no damage; repair moves nothing.
        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertTrue(s.isClean, "\(s.problems)")
        XCTAssertEqual(s.problems.map(\.kind), [.syncConflict], "\(s.problems)")
        XCTAssertEqual(s.actions, [])
        XCTAssertTrue(s.problems[0].detail.contains("created the folder"), s.problems[0].detail)

        // rclone bisync keeps neither as `.pvdir`: both become copies, and the first stands in.
        let bytes = try FileIO.readFile(in: trip.fd, name: DirectoryInfo.fileName)
        XCTAssertEqual(renameat(trip.fd, DirectoryInfo.fileName, trip.fd, ".pvdir..path1"), 0)
        XCTAssertEqual(renameat(trip.fd, ".sync-conflict-20261207-030224-7RXRS6P.pvdir", trip.fd, ".pvdir..path2"), 0)
        let third = try VaultResolver(tree: tree).directory(VaultPath("/trip"))
        XCTAssertEqual(third.info.id, trip.info.id)
        XCTAssertEqual(try ClassTool(tree: tree).list("/trip").map(\.path), ["/trip/a.jpg", "/trip/b.jpg"])
        _ = bytes
    }

    func testTwoDevicesCreatingTheSameFolderGiveItTheSameDirectoryInfo() throws {
        let (tree, _) = try OfflineFixture.makeTree(self)
        let base = OfflineFixture.tempDir(self)
        var files: [[UInt8]] = []
        for device in ["A", "B"] {
            let parent = base + "/" + device
            mkdir(parent, 0o700)
            let fd = open(parent, O_RDONLY | O_DIRECTORY)
            let info = try DirectoryInfo.makeDirectory(in: fd, entry: "ENTRY", mode: 0o700, defaultClass: .default, keyring: tree.keyring)
            XCTAssertNotEqual(info.id, [UInt8](repeating: 0, count: 16))
            files.append(try FileIO.readFile(in: fd, name: "ENTRY/.pvdir"))
            close(fd)
        }
        XCTAssertEqual(files[0], files[1], "identical .pvdir files: a sync engine has nothing to put in conflict")
        XCTAssertEqual(DirectoryInfo.derivedID(entry: "ENTRY", keyring: tree.keyring), Array(files[0][4..<20]))
        XCTAssertNotEqual(DirectoryInfo.derivedID(entry: "OTHER", keyring: tree.keyring), Array(files[0][4..<20]))
    }

    // MARK: files

    func testAConflictCopyIsListedExportedAndReportedUnderItsMarkedName() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.write(scratch + "/IMG_0001.jpg", Array("first".utf8))
        try Importer(tree: tree).import(sources: [scratch + "/IMG_0001.jpg"], into: "/")
        let r = try VaultResolver(tree: tree)
        let orig = try r.entry(VaultPath("/IMG_0001.jpg"))
        let copy = orig.encoded.entry + ".sync-conflict-20261207-030224-7RXRS6P"
        OfflineFixture.write(scratch + "/v2.jpg", Array("the other version".utf8))
        // The other device's version, under the engine's name for it.
        try Importer(tree: tree).import(sources: [scratch + "/v2.jpg"], into: "/")
        let v2 = try r.entry(VaultPath("/v2.jpg"))
        XCTAssertEqual(renameat(r.root.fd, v2.encoded.entry, r.root.fd, copy), 0)
        // Sync debris beside it.
        OfflineFixture.write(tree.root + "/.stfolder", [])
        OfflineFixture.write(tree.root + "/.DS_Store", [1, 2, 3])

        let shown = "/IMG_0001 (conflict 2026-12-07 030224).jpg"
        XCTAssertEqual(try ClassTool(tree: tree).list("/").map(\.path), ["/IMG_0001 (conflict 2026-12-07 030224).jpg", "/IMG_0001.jpg"])
        XCTAssertNotNil(try VaultResolver(tree: tree).entry(VaultPath(shown)).stat(), "found by its shown name")
        try Exporter(tree: tree).export(paths: ["/"], to: scratch + "/out")
        XCTAssertEqual(OfflineFixture.read(scratch + "/out" + shown), Array("the other version".utf8))
        XCTAssertEqual(OfflineFixture.read(scratch + "/out/IMG_0001.jpg"), Array("first".utf8))

        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertTrue(s.isClean, "\(s.problems)")
        XCTAssertEqual(s.actions, [], "repair moves no conflict copy and no debris")
        let kinds = s.problems.map { "\($0.kind.rawValue) \($0.path)" }.sorted()
        XCTAssertEqual(kinds, ["syncConflict " + shown, "syncDebris /.DS_Store", "syncDebris /.stfolder"])
        let detail = s.problems.first { $0.kind == .syncConflict }!.detail
        XCTAssertTrue(detail.contains("Syncthing conflict copy of /IMG_0001.jpg: this copy 17 bytes"), detail)
        XCTAssertTrue(detail.contains("the original 5 bytes"), detail)
        XCTAssertTrue(FileManager.default.fileExists(atPath: tree.root + "/.DS_Store"))
    }

    func testALongNamesCompanionStaysWhileAConflictCopyNeedsIt() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let long = String(repeating: "n", count: 200) + ".jpg"
        OfflineFixture.write(scratch + "/" + long, Array("x".utf8))
        try Importer(tree: tree).import(sources: [scratch + "/" + long], into: "/")
        let r = try VaultResolver(tree: tree)
        let e = try r.entry(VaultPath("/" + long))
        guard case .long(let entry, _) = e.encoded else { return XCTFail("a long name") }
        let copy = entry + "..path2"
        XCTAssertEqual(linkat(r.root.fd, entry, r.root.fd, copy, 0), 0)
        XCTAssertTrue(try Fsck(tree: tree).run().isClean)
        // The original goes: its companion stays for the copy, which is still shown.
        XCTAssertEqual(unlinkat(r.root.fd, entry, 0), 0)
        NameCodec.removeCompanion(ofEntry: entry, in: r.root.fd)
        XCTAssertTrue(NameCodec.exists(entry + ".name", in: r.root.fd))
        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertTrue(s.isClean, "\(s.problems)")
        XCTAssertEqual(s.actions, [])
        XCTAssertEqual(try ClassTool(tree: tree).list("/").map(\.path),
                       ["/" + String(repeating: "n", count: 200) + " (conflict path2).jpg"])
        // The last copy goes: so does the companion.
        XCTAssertEqual(unlinkat(r.root.fd, copy, 0), 0)
        NameCodec.removeCompanion(ofEntry: copy, in: r.root.fd)
        XCTAssertFalse(NameCodec.exists(entry + ".name", in: r.root.fd))
    }
}

extension VaultResolver {
    /// The ciphertext entry of `name` in the root.
    func entry(name: String) -> String { tree.names.encode(Array(name.utf8), in: root.info).entry }
}
