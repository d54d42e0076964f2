// fsck: a clean tree is clean; each kind of damage a test can make is found, named by kind
// and path; without --repair the store is byte-for-byte untouched; --repair moves exactly
// the damaged entries to /lost+found, removes temp files, and a second fsck is clean.
import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class OfflineFsckTests: XCTestCase {
    static let longName = String(repeating: "long-", count: 36) + ".txt"   // 184 bytes: a long name

    /// A small tree through the importer; returns the plaintext contents by vault path.
    func buildTree() throws -> (UserTree, String, [String: [UInt8]]) {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src"
        var contents: [String: [UInt8]] = [:]
        func add(_ rel: String, _ size: Int) {
            let bytes = SecureRandom.bytes(size)
            OfflineFixture.mkdirs(StorePath.dirname(src + "/" + rel))
            OfflineFixture.write(src + "/" + rel, bytes)
            contents["/" + rel] = bytes
        }
        add("photos/a.jpg", 200_000)   // 4 chunks of 64 KiB
        add("photos/b.jpg", 150_000)
        add("photos/c.jpg", 70_000)
        add("photos/ok.jpg", 100_000)
        add("photos/deep/d.jpg", 80_000)
        add("photos/deep/e.jpg", 0)
        add("docs/" + OfflineFsckTests.longName, 5_000)
        add("docs/short.txt", 10)
        XCTAssertEqual(symlink("photos/a.jpg", src + "/link"), 0)
        XCTAssertEqual(symlink("../photos", src + "/docs/photos-link"), 0)
        try OfflineFixture.setXattr(src + "/docs/short.txt", "user.note", Array("hello".utf8))
        for top in ["photos", "docs", "link"] {
            try Importer(tree: tree).import(sources: [src + "/" + top], into: "/")
        }
        return (tree, scratch, contents)
    }

    func entry(_ tree: UserTree, _ path: String) throws -> VaultEntry {
        try VaultResolver(tree: tree).entry(VaultPath(path))
    }

    func flip(_ tree: UserTree, _ path: String, at offset: Int64) throws {
        let e = try entry(tree, path)
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var b: UInt8 = 0
        XCTAssertEqual(pread(fd, &b, 1, Int(offset)), 1)
        b ^= 0x80
        XCTAssertEqual(pwrite(fd, &b, 1, Int(offset)), 1)
        close(fd)
    }

    func truncate(_ tree: UserTree, _ path: String, to size: Int) throws {
        let e = try entry(tree, path)
        XCTAssertEqual(ftruncateAt(e.parent.fd, e.encoded.entry, size), 0)
    }

    func ftruncateAt(_ dirfd: Int32, _ name: String, _ size: Int) -> Int32 {
        let fd = openat(dirfd, name, O_RDWR)
        defer { close(fd) }
        return ftruncate(fd, size)
    }

    /// Renames a ciphertext entry to another valid-looking base64url name; returns it.
    func renameCiphertext(_ tree: UserTree, _ path: String) throws -> String {
        let e = try entry(tree, path)
        var chars = Array(e.encoded.entry)
        chars[3] = chars[3] == "A" ? "B" : "A"
        let newName = String(chars)
        XCTAssertNotNil(Base64URL.decode(newName))
        XCTAssertEqual(renameat(e.parent.fd, e.encoded.entry, e.parent.fd, newName), 0)
        return newName
    }

    /// Places a copy of a ciphertext file under a sync tool's conflict name; returns it.
    func conflictCopy(_ tree: UserTree, _ path: String, suffix: String) throws -> String {
        let e = try entry(tree, path)
        let bytes = try FileIO.readFile(in: e.parent.fd, name: e.encoded.entry, limit: 1 << 24)
        let name = e.encoded.entry + suffix
        let fd = openat(e.parent.fd, name, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        try FileIO.writeAll(fd, bytes, offset: 0)
        close(fd)
        return name
    }

    func kinds(_ s: FsckSummary) -> [String] {
        s.problems.map { "\($0.kind.rawValue) \($0.path)" }.sorted()
    }

    // MARK: tests

    func testCleanTreeHasNoProblemsAndEveryChunkIsCounted() throws {
        let (tree, _, contents) = try buildTree()
        let s = try Fsck(tree: tree).run()
        XCTAssertEqual(s.problems, [])
        XCTAssertTrue(s.isClean)
        XCTAssertEqual(s.files, contents.count)
        XCTAssertEqual(s.symlinks, 2)
        XCTAssertEqual(s.directories, 4)   // root, photos, photos/deep, docs
        XCTAssertEqual(s.bytesChecked, UInt64(contents.values.map(\.count).reduce(0, +)))
        let cs = tree.layout.chunkSize
        XCTAssertEqual(s.chunksChecked, UInt64(contents.values.map { ($0.count + cs - 1) / cs }.reduce(0, +)))
        XCTAssertEqual(s.actions, [])
    }

    func testEachKindOfDamageIsFoundAtItsPath() throws {
        let cs = 65536
        typealias Damage = (UserTree) throws -> [String]   // returns the expected "kind path" lines
        let cases: [(String, Damage)] = [
            ("flipped chunk byte", { t in
                try self.flip(t, "/photos/a.jpg", at: Int64(t.layout.sealedOffset(ofChunk: 1)) + 100)
                return ["chunkDamaged /photos/a.jpg"]
            }),
            ("truncated header", { t in
                try self.truncate(t, "/photos/b.jpg", to: 100)
                return ["headerTruncated /photos/b.jpg"]
            }),
            ("modified header", { t in
                try self.flip(t, "/photos/b.jpg", at: 40)
                return ["headerDamaged /photos/b.jpg"]
            }),
            ("chunk cut inside", { t in
                try self.truncate(t, "/photos/c.jpg", to: Int(t.layout.ciphertextSize(plaintextSize: UInt64(cs))) + 5)
                return ["contentTruncated /photos/c.jpg"]
            }),
            ("renamed ciphertext file", { t in
                let n = try self.renameCiphertext(t, "/photos/c.jpg")
                return ["nameUndecryptable /photos/" + n]
            }),
            ("deleted .pvdir", { t in
                let d = try VaultResolver(tree: t).directory(VaultPath("/photos/deep"))
                XCTAssertEqual(unlinkat(d.fd, DirectoryInfo.fileName, 0), 0)
                return ["directoryInfoMissing /photos/deep"]
            }),
            ("modified .pvdir", { t in
                let d = try VaultResolver(tree: t).directory(VaultPath("/docs"))
                var b = try FileIO.readFile(in: d.fd, name: DirectoryInfo.fileName)
                b[20] = ProtectionClass.none.rawValue   // weaken the default class
                try AtomicFile.write(b, in: d.fd, name: DirectoryInfo.fileName)
                return ["directoryInfoDamaged /docs"]
            }),
            ("directory in place of .pvdir", { t in
                // Misshapen, not unreadable: reading it fails with EISDIR, yet it is damage.
                let d = try VaultResolver(tree: t).directory(VaultPath("/photos/deep"))
                XCTAssertEqual(unlinkat(d.fd, DirectoryInfo.fileName, 0), 0)
                XCTAssertEqual(mkdirat(d.fd, DirectoryInfo.fileName, 0o700), 0)
                return ["directoryInfoDamaged /photos/deep"]
            }),
            ("conflict copies", { t in
                let a = try self.conflictCopy(t, "/photos/ok.jpg", suffix: " (conflicted copy).jpg")
                // A Syncthing copy is a conflict, shown under ok.jpg's name (SyncConflictTests);
                // one without the engine's date is foreign.
                _ = try self.conflictCopy(t, "/photos/ok.jpg", suffix: ".sync-conflict-20240101-120000-ABCDEFG")
                return ["foreignEntry /photos/" + a, "syncConflict /photos/ok (conflict 2024-01-01 120000).jpg"]
            }),
            ("orphan long-name companion", { t in
                let e = try self.entry(t, "/docs/" + OfflineFsckTests.longName)
                XCTAssertEqual(unlinkat(e.parent.fd, e.encoded.entry, 0), 0)
                return ["orphanCompanion /docs/" + e.encoded.companion!]
            }),
            ("missing long-name companion", { t in
                let e = try self.entry(t, "/docs/" + OfflineFsckTests.longName)
                XCTAssertEqual(unlinkat(e.parent.fd, e.encoded.companion!, 0), 0)
                return ["longNameCompanionMissing /docs/" + e.encoded.entry]
            }),
            ("modified long-name companion", { t in
                let e = try self.entry(t, "/docs/" + OfflineFsckTests.longName)
                XCTAssertEqual(unlinkat(e.parent.fd, e.encoded.companion!, 0), 0)
                try AtomicFile.write(Array("AAAA".utf8), in: e.parent.fd, name: e.encoded.companion!)
                return ["longNameCompanionMismatch /docs/" + e.encoded.entry]
            }),
            ("long entry forged for a short name", { t in
                // A copy of b.jpg's ciphertext under a `~` entry whose companion names
                // ok.jpg: the name authenticates, but encode never stores a short name so.
                let e = try self.entry(t, "/photos/ok.jpg")
                let other = try self.entry(t, "/photos/b.jpg")
                let forged = NameCodec.longEntry(for: e.encoded.entry)
                try AtomicFile.write(Array(e.encoded.entry.utf8), in: e.parent.fd, name: forged + NameCodec.companionSuffix)
                XCTAssertEqual(linkat(other.parent.fd, other.encoded.entry, e.parent.fd, forged, 0), 0)
                return ["longNameCompanionMismatch /photos/" + forged]
            }),
            ("leftover temp file", { t in
                let d = try VaultResolver(tree: t).directory(VaultPath("/photos"))
                let fd = openat(d.fd, ".pvtmp-0011223344556677", O_WRONLY | O_CREAT, 0o600)
                close(fd)
                return ["leftoverTemp /photos/.pvtmp-0011223344556677"]
            }),
            ("damaged symlink target", { t in
                let e = try self.entry(t, "/link")
                XCTAssertEqual(unlinkat(e.parent.fd, e.encoded.entry, 0), 0)
                XCTAssertEqual(symlinkat("bm90LWEtcGhvdG92YXVsdC10YXJnZXQ", e.parent.fd, e.encoded.entry), 0)
                return ["symlinkDamaged /link"]
            }),
            ("damaged xattr value", { t in
                let e = try self.entry(t, "/docs/short.txt")
                let fd = openat(e.parent.fd, e.encoded.entry, O_RDONLY)
                defer { close(fd) }
                let stored = try XCTUnwrap(try OfflineXattr.storedNames(fd).first { $0.hasPrefix(XattrCodec.storedPrefix) })
                var v = try OfflineXattr.get(fd, stored)
                v[v.count - 1] ^= 1
                try OfflineXattr.set(fd, stored, v)
                return ["xattrDamaged /docs/short.txt"]
            }),
        ]
        for (label, damage) in cases {
            let (tree, _, _) = try buildTree()
            let expected = try damage(tree).sorted()
            let s = try Fsck(tree: tree).run()
            XCTAssertEqual(kinds(s), expected, label)
            XCTAssertEqual(s.actions, [], label)
            if label == "flipped chunk byte" {
                XCTAssertTrue(s.problems[0].detail.contains("1 of 4 chunks failed authentication (chunk 1)"), s.problems[0].detail)
                XCTAssertNotEqual(s.problems[0].storePath, s.problems[0].path)   // ciphertext location on disk
            }
        }
    }

    /// FIFOs, sockets and device nodes made through the mount (mknod) are stored as
    /// themselves under sealed names: fsck counts them and `--repair` leaves them in place
    /// (it used to report them `unsupportedType` and move them to /lost+found). /dev/null is
    /// char device 1:3 (glibc encodes small numbers as major << 8 | minor).
    func testSpecialFilesAreNotDamage() throws {
        let (tree, _, _) = try buildTree()
        let d = try VaultResolver(tree: tree).directory(VaultPath("/docs"))
        let pipe = tree.names.encode(Array("pipe".utf8), in: d.info).entry
        let null = tree.names.encode(Array("null".utf8), in: d.info).entry
        XCTAssertEqual(mkfifoat(d.fd, pipe, 0o600), 0)
        XCTAssertEqual(mknodat(d.fd, null, S_IFCHR | 0o600, dev_t((1 << 8) | 3)), 0)
        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(s), [])
        XCTAssertEqual(s.actions, [])
        XCTAssertEqual(s.specialFiles, 2)
        var st = stat()
        XCTAssertEqual(fstatat(d.fd, pipe, &st, AT_SYMLINK_NOFOLLOW), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFIFO)
        XCTAssertEqual(fstatat(d.fd, null, &st, AT_SYMLINK_NOFOLLOW), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFCHR)
    }

    /// The tree's mount lock `.pvmount` as anything but a regular file makes every mount fail
    /// (exit 9): fsck reports it `mountLockDamaged` (it used to skip `.pvmount` unexamined and
    /// call the tree clean), without --repair nothing changes, and --repair moves it whole to
    /// /lost+found, after which fsck is clean and the mount lock can be taken again.
    func testMountLockThatIsNotARegularFileIsDamage() throws {
        var null = stat()
        XCTAssertEqual(stat("/dev/null", &null), 0)
        let makers: [(String, String, (String) -> Int32)] = [
            ("FIFO", "a FIFO", { mkfifo($0, 0o600) }),
            ("device", "a character device", { mknod($0, S_IFCHR | 0o600, null.st_rdev) }),
            ("directory", "a directory", { mkdir($0, 0o700) }),
            ("symlink", "a symlink", { symlink("/dev/null", $0) }),
        ]
        for (what, typeName, make) in makers {
            let (tree, _, _) = try buildTree()
            let lock = StorePath.join(tree.root, TreeLock.mountLockName)
            // A regular .pvmount (left by an earlier mount) is no problem.
            let held = try XCTUnwrap(try TreeLock.mount(root: tree.root))
            held.release()
            XCTAssertEqual(try Fsck(tree: tree).run().problems, [], what)
            XCTAssertEqual(unlink(lock), 0)
            XCTAssertEqual(make(lock), 0, what)

            let s = try Fsck(tree: tree).run()
            XCTAssertEqual(kinds(s), ["mountLockDamaged /.pvmount"], what)
            XCTAssertEqual(s.problems.first?.storePath, ".pvmount", what)
            XCTAssertEqual(s.problems.first?.detail, "the mount lock is \(typeName), not a regular file: the tree cannot be mounted")
            var st = stat()
            XCTAssertEqual(lstat(lock, &st), 0, "\(what): fsck without --repair changed it")
            XCTAssertThrowsError(try TreeLock.mount(root: tree.root), what)

            let r = try Fsck(tree: tree).run(repair: true)
            XCTAssertEqual(kinds(r), ["mountLockDamaged /.pvmount"], what)
            XCTAssertEqual(r.actions, [.movedToLostAndFound(storePath: ".pvmount", name: "mount-lock .pvmount")], what)
            XCTAssertNotEqual(lstat(lock, &st), 0, "\(what): still in place")
            let again = try Fsck(tree: tree).run()
            XCTAssertEqual(again.problems, [], what)
            XCTAssertEqual(again.lostAndFoundEntries, 1, what)
            XCTAssertNotNil(try TreeLock.mount(root: tree.root), what)
        }
    }

    func testFsckWithoutRepairChangesNothingAndRepairQuarantines() throws {
        let (tree, scratch, contents) = try buildTree()
        // Several kinds of damage at once.
        try flip(tree, "/photos/a.jpg", at: Int64(tree.layout.sealedOffset(ofChunk: 2)) + 7)
        try truncate(tree, "/photos/b.jpg", to: 64)
        let conflict = try conflictCopy(tree, "/photos/c.jpg", suffix: " (conflicted copy).jpg")
        let renamed = try renameCiphertext(tree, "/photos/c.jpg")
        let deep = try VaultResolver(tree: tree).directory(VaultPath("/photos/deep"))
        XCTAssertEqual(unlinkat(deep.fd, DirectoryInfo.fileName, 0), 0)
        let long = try entry(tree, "/docs/" + OfflineFsckTests.longName)
        XCTAssertEqual(unlinkat(long.parent.fd, long.encoded.entry, 0), 0)
        let photos = try VaultResolver(tree: tree).directory(VaultPath("/photos"))
        close(openat(photos.fd, ".pvtmp-00aa11bb22cc33dd", O_WRONLY | O_CREAT, 0o600))
        // A directory a crashed mkdir left behind (temp name, only a .pvdir inside).
        let docs = try VaultResolver(tree: tree).directory(VaultPath("/docs"))
        XCTAssertEqual(mkdirat(docs.fd, ".pvtmp-99aa11bb22cc33dd", 0o700), 0)
        let tmpDir = openat(docs.fd, ".pvtmp-99aa11bb22cc33dd", O_RDONLY | O_DIRECTORY)
        try DirectoryInfo().write(dirfd: tmpDir, keyring: tree.keyring)
        close(tmpDir)

        let before = OfflineFixture.snapshot(StorePath.dirname(tree.root))
        let found = try Fsck(tree: tree).run()
        XCTAssertEqual(OfflineFixture.snapshot(StorePath.dirname(tree.root)), before, "fsck without --repair modified the store")
        XCTAssertEqual(kinds(found), [
            "chunkDamaged /photos/a.jpg",
            "directoryInfoMissing /photos/deep",
            "foreignEntry /photos/" + conflict,
            "headerTruncated /photos/b.jpg",
            "leftoverTemp /docs/.pvtmp-99aa11bb22cc33dd",
            "leftoverTemp /photos/.pvtmp-00aa11bb22cc33dd",
            "nameUndecryptable /photos/" + renamed,
            "orphanCompanion /docs/" + long.encoded.companion!,
        ])
        XCTAssertEqual(found.actions, [])

        let docsEntry = try entry(tree, "/docs").encoded.entry
        let repaired = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(repaired), kinds(found))
        let moved = repaired.actions.compactMap { a -> String? in
            if case .movedToLostAndFound(_, let name) = a { return name }
            return nil
        }.sorted()
        // A copy under a name no sync engine makes (a dated Nextcloud copy is shown instead,
        // SyncConflictTests) is an undecryptable name; the orphan companion, only a name, is
        // set aside out of view (EverydayFsckTests).
        XCTAssertEqual(moved, [
            "bad-name photos%2F" + conflict,
            "bad-name photos%2F" + renamed,
            "photos%2Fa.jpg",
            "photos%2Fb.jpg",
            "photos%2Fdeep",
        ].sorted())
        XCTAssertEqual(repaired.actions.filter { if case .removedTemp = $0 { return true }; return false }.count, 2)
        XCTAssertEqual(repaired.actions.filter { if case .setAside = $0 { return true }; return false },
                       [.setAside(storePath: docsEntry + "/" + long.encoded.companion!, name: docsEntry + "%2F" + long.encoded.companion!)])

        let again = try Fsck(tree: tree).run()
        XCTAssertEqual(again.problems, [])
        XCTAssertEqual(again.lostAndFoundEntries, 5)
        XCTAssertEqual(again.actions, [])

        // What was healthy is untouched; quarantined entries with intact content can be recovered.
        let out = scratch + "/out"
        try Exporter(tree: tree).export(paths: ["/photos", "/docs", "/lost+found/bad-name photos%2F" + renamed,
                                                "/lost+found/bad-name photos%2F" + conflict], to: out)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out + "/photos").sorted(), ["ok.jpg"])
        XCTAssertEqual(OfflineFixture.read(out + "/photos/ok.jpg"), contents["/photos/ok.jpg"])
        XCTAssertEqual(OfflineFixture.read(out + "/docs/short.txt"), contents["/docs/short.txt"])
        XCTAssertEqual(OfflineFixture.read(out + "/bad-name photos%2F" + renamed), contents["/photos/c.jpg"])
        XCTAssertEqual(OfflineFixture.read(out + "/bad-name photos%2F" + conflict), contents["/photos/c.jpg"])
        // The damaged file is still refused after the move: quarantine does not make bytes valid.
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/lost+found/photos%2Fa.jpg"], to: out + "/x")) {
            guard case StoreError.integrity(let p, _)? = $0 as? StoreError else { return XCTFail("\($0)") }
            XCTAssertEqual(p, "/lost+found/photos%2Fa.jpg")
        }
        // A second repair has nothing to do.
        XCTAssertEqual(try Fsck(tree: tree).run(repair: true).actions, [])
    }

    /// What repair changes is made durable and checked: creating /lost+found syncs the root,
    /// each move syncs both directories, and a failed fsync stops the repair with its error.
    func testRepairSyncsWhatItChangesAndStopsOnAFailedSync() throws {
        let (tree, _, _) = try buildTree()
        try flip(tree, "/photos/a.jpg", at: Int64(tree.layout.sealedOffset(ofChunk: 1)) + 100)
        var synced: Set<[UInt64]> = []
        OfflineFixture.hookFsync(self) { synced.insert(OfflineFixture.identity($0)); return true }
        let actions = try Fsck(tree: tree).run(repair: true).actions
        guard actions.count == 1, case .movedToLostAndFound(_, let name) = actions[0] else { return XCTFail("\(actions)") }
        XCTAssertEqual(name, "photos%2Fa.jpg")
        for dir in ["/", "/lost+found", "/photos"] {
            XCTAssertTrue(synced.contains(try OfflineFixture.identity(tree, dir)), dir)
        }

        let (other, _, _) = try buildTree()
        try flip(other, "/photos/b.jpg", at: Int64(other.layout.sealedOffset(ofChunk: 1)) + 100)
        let photos = try OfflineFixture.identity(other, "/photos")
        OfflineFixture.hookFsync(self) { OfflineFixture.identity($0) != photos }
        XCTAssertThrowsError(try Fsck(tree: other).run(repair: true)) {
            guard case StoreError.io(let e, _)? = $0 as? StoreError else { return XCTFail("\($0)") }
            XCTAssertEqual(e, EIO)
        }
    }

    /// `chattr +i` or `-i` on `path`: an immutable directory refuses entries to be made in it,
    /// renamed into or out of it, even to root.
    /// Entries renamed (with this account's keys) to names that authenticate but are no file
    /// name — "..", ".", "x/../../escaped" and a long name full of "/" — are damaged names:
    /// repair moves them whole into /lost+found under a name made of the ciphertext (never the
    /// decrypted path), nothing is created outside the tree, the long name's companion goes
    /// with it, the content is recoverable from there, and a second fsck is clean.
    func testRepairQuarantinesNamesThatAuthenticateButAreNoFileName() throws {
        let (tree, scratch, contents) = try buildTree()
        let resolver = try VaultResolver(tree: tree)
        let photos = try resolver.directory(VaultPath("/photos"))
        let root = try resolver.directory(VaultPath("/"))
        var renamed: [String: String] = [:]   // vault path -> ciphertext entry now
        func rename(_ path: String, in dir: VaultDirectory, to plain: String) throws {
            let e = try entry(tree, path)
            let enc = tree.names.encode(Array(plain.utf8), in: dir.info)
            if case .long = enc { try NameCodec.writeCompanion(enc, in: dir.fd) }
            XCTAssertEqual(renameat(dir.fd, e.encoded.entry, dir.fd, enc.entry), 0, path)
            if let c = e.encoded.companion { unlinkat(dir.fd, c, 0) }
            renamed[path] = enc.entry
        }
        try rename("/photos/a.jpg", in: photos, to: "..")
        try rename("/photos/deep", in: photos, to: ".")
        try rename("/photos/b.jpg", in: photos, to: "x/../../escaped.jpg")
        try rename("/photos/c.jpg", in: photos, to: String(repeating: "../", count: 60) + "c.jpg")
        try rename("/docs", in: root, to: "..")
        XCTAssertTrue(renamed["/photos/c.jpg"]!.hasPrefix(NameCodec.longPrefix), "a long name is exercised")
        let outside = StorePath.dirname(tree.root)
        let before = Set(try FileManager.default.subpathsOfDirectory(atPath: outside).filter { !$0.hasPrefix(StorePath.basename(tree.root)) })

        let found = try Fsck(tree: tree).run()
        XCTAssertEqual(found.problems.count, 5, "\(kinds(found))")
        for (path, enc) in renamed {
            let dir = path == "/docs" ? "" : "/photos"
            XCTAssertTrue(found.problems.contains { $0.path == dir + "/" + enc && $0.kind == .nameUndecryptable }, "\(path): \(kinds(found))")
        }
        let repaired = try Fsck(tree: tree).run(repair: true)
        let moved = repaired.actions.compactMap { a -> String? in
            if case .movedToLostAndFound(_, let name) = a { return name }
            return nil
        }.sorted()
        XCTAssertEqual(moved, renamed.map { $0.key == "/docs" ? "bad-name %2F" + $0.value : "bad-name photos%2F" + $0.value }.sorted())
        for name in moved { XCTAssertFalse(name.contains("/") || name == "." || name == "..", name) }
        // Nothing appeared beside the tree (no path was followed), and no companion is left behind.
        let after = Set(try FileManager.default.subpathsOfDirectory(atPath: outside).filter { !$0.hasPrefix(StorePath.basename(tree.root)) })
        XCTAssertEqual(after, before)
        XCTAssertEqual(try OfflineSys.list(photos.fd).map(\.name).filter { $0.hasSuffix(NameCodec.companionSuffix) }, [])

        let again = try Fsck(tree: tree).run()
        XCTAssertEqual(again.problems, [])
        XCTAssertEqual(again.lostAndFoundEntries, 5)
        XCTAssertEqual(try Fsck(tree: tree).run(repair: true).actions, [])

        // The content is recoverable under the new names.
        let out = scratch + "/out"
        let a = "bad-name photos%2F" + renamed["/photos/a.jpg"]!, c = "bad-name photos%2F" + renamed["/photos/c.jpg"]!
        let docs = "bad-name %2F" + renamed["/docs"]!, deep = "bad-name photos%2F" + renamed["/photos/deep"]!
        try Exporter(tree: tree).export(paths: ["/lost+found/" + a, "/lost+found/" + c, "/lost+found/" + docs, "/lost+found/" + deep], to: out)
        XCTAssertEqual(OfflineFixture.read(out + "/" + a), contents["/photos/a.jpg"])
        XCTAssertEqual(OfflineFixture.read(out + "/" + c), contents["/photos/c.jpg"])
        XCTAssertEqual(OfflineFixture.read(out + "/" + docs + "/short.txt"), contents["/docs/short.txt"])
        XCTAssertEqual(OfflineFixture.read(out + "/" + deep + "/d.jpg"), contents["/photos/deep/d.jpg"])
    }

    func chattr(_ flag: String, _ path: String) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        p.arguments = [flag, path]
        try? p.run()
        p.waitUntilExit()
        return p.terminationStatus
    }

    /// Two damaged files and a leftover temp file, with a temp file in /photos to show that the
    /// repair went on. Returns the temp file's store path.
    func damageTwoFilesAndLeaveATemp(_ tree: UserTree) throws -> String {
        try flip(tree, "/photos/a.jpg", at: Int64(tree.layout.sealedOffset(ofChunk: 1)) + 100)
        try flip(tree, "/photos/deep/d.jpg", at: Int64(tree.layout.sealedOffset(ofChunk: 0)) + 100)
        let photos = try VaultResolver(tree: tree).directory(VaultPath("/photos"))
        let temp = AtomicFile.tempPrefix + "left"
        close(openat(photos.fd, temp, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))
        return try entry(tree, "/photos").encoded.entry + "/" + temp
    }

    /// A /lost+found that cannot be created (the tree root is immutable) stops no repair:
    /// each damaged entry gets one `repairFailed` line with the error and stays in place,
    /// the repair goes on (the temp file is removed) and `leftInPlace` says it is incomplete.
    /// The whole repair used to stop with the first entry's error.
    func testRepairGoesOnWhenLostAndFoundCannotBeCreated() throws {
        let (tree, _, _) = try buildTree()
        let temp = try damageTwoFilesAndLeaveATemp(tree)
        XCTAssertEqual(chattr("+i", tree.root), 0, "chattr +i needs root on ext4/xfs/btrfs")
        defer { _ = chattr("-i", tree.root) }

        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(s), ["chunkDamaged /photos/a.jpg", "chunkDamaged /photos/deep/d.jpg", "leftoverTemp /photos/" + StorePath.basename(temp),
                                  "repairFailed /photos/a.jpg", "repairFailed /photos/deep/d.jpg"])
        for p in s.problems where p.kind == .repairFailed {
            XCTAssertEqual(p.detail, "not moved into /lost+found, left in place: cannot create or open /lost+found: mkdir: Operation not permitted")
            XCTAssertFalse(p.description.contains("\n"))
        }
        XCTAssertEqual(s.actions, [.removedTemp(storePath: temp)])
        XCTAssertEqual(s.leftInPlace, 2)
        XCTAssertNotNil(try entry(tree, "/photos/a.jpg").stat(), "a.jpg was moved")

        XCTAssertEqual(chattr("-i", tree.root), 0)
        let again = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(again.actions.count, 2, "\(again.actions)")
        XCTAssertEqual(again.leftInPlace, 0)
        XCTAssertEqual(try Fsck(tree: tree).run().problems, [])
    }

    /// A move into /lost+found that fails (here /lost+found is immutable: rename gives EPERM)
    /// is reported for that entry, which stays in place, and the repair goes on.
    func testRepairGoesOnWhenAMoveIntoLostAndFoundFails() throws {
        let (tree, _, _) = try buildTree()
        _ = try VaultResolver(tree: tree).directory(VaultPath("/lost+found"), create: true)
        let temp = try damageTwoFilesAndLeaveATemp(tree)
        let lf = tree.root + "/" + (try entry(tree, "/lost+found").encoded.entry)
        XCTAssertEqual(chattr("+i", lf), 0, "chattr +i needs root on ext4/xfs/btrfs")
        defer { _ = chattr("-i", lf) }

        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(s.problems.filter { $0.kind == .repairFailed }.map(\.description).sorted(), [
            "/photos/a.jpg: repairFailed: not moved into /lost+found, left in place: rename photos%2Fa.jpg: Operation not permitted",
            "/photos/deep/d.jpg: repairFailed: not moved into /lost+found, left in place: rename photos%2Fdeep%2Fd.jpg: Operation not permitted",
        ])
        XCTAssertEqual(s.actions, [.removedTemp(storePath: temp)])
        XCTAssertEqual(s.leftInPlace, 2)
        XCTAssertNotNil(try entry(tree, "/photos/deep/d.jpg").stat())

        XCTAssertEqual(chattr("-i", lf), 0)
        XCTAssertEqual(try Fsck(tree: tree).run(repair: true).actions.count, 2)
        XCTAssertEqual(try Fsck(tree: tree).run().problems, [])
    }

    func testDamagedXattrIsReportedButNotRepaired() throws {
        let (tree, _, _) = try buildTree()
        let e = try entry(tree, "/docs/short.txt")
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDONLY)
        let stored = try XCTUnwrap(try OfflineXattr.storedNames(fd).first { $0.hasPrefix(XattrCodec.storedPrefix) })
        var v = try OfflineXattr.get(fd, stored)
        v[0] ^= 1
        try OfflineXattr.set(fd, stored, v)
        close(fd)
        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(s), ["xattrDamaged /docs/short.txt"])
        XCTAssertEqual(s.actions, [])
        XCTAssertEqual(kinds(try Fsck(tree: tree).run()), ["xattrDamaged /docs/short.txt"])
    }

    /// A header copied onto a file with no chunks yet is not caught by any chunk: what is
    /// written into that file later is sealed under the other file's key and ID, and a chunk
    /// moved between the two then authenticates. fsck used to call such a tree clean; it now
    /// names the second file of an ID (not repaired: which one is the copy cannot be told).
    /// Hard links (one inode) share an ID legitimately and are not reported.
    func testAHeaderCopiedOntoAnEmptyFileIsFoundByItsSharedFileID() throws {
        let (tree, _, contents) = try buildTree()
        let a = try entry(tree, "/photos/ok.jpg")
        let e = try entry(tree, "/photos/deep/e.jpg")   // 0 bytes: no header, no chunk
        // A hard link of ok.jpg elsewhere has its ID too, legitimately: still clean.
        let docs = try VaultResolver(tree: tree).directory(VaultPath("/docs"))
        XCTAssertEqual(linkat(a.parent.fd, a.encoded.entry, docs.fd, tree.names.encode(Array("hard.jpg".utf8), in: docs.info).entry, 0), 0)
        XCTAssertEqual(kinds(try Fsck(tree: tree).run()), [])
        let header = Array(try FileIO.readFile(in: a.parent.fd, name: a.encoded.entry, limit: 1 << 24)[0..<FileHeader.size])
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        try FileIO.writeAll(fd, header, offset: 0)
        // The owner later writes into the file, as through the mount.
        let later = SecureRandom.bytes(3 * tree.layout.chunkSize)
        let f = try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring)
        XCTAssertEqual(try later.withUnsafeBytes { try f.write(from: $0.baseAddress!, count: later.count, offset: 0) }, later.count)
        f.close()
        // Chunk 1 of e.jpg moved into ok.jpg authenticates: no chunk check can see it.
        let sealed = try FileIO.readFile(in: e.parent.fd, name: e.encoded.entry, limit: 1 << 24)
        let at = Int(tree.layout.sealedOffset(ofChunk: 1))
        let chunk = Array(sealed[at..<(at + tree.layout.sealedChunkSize)])
        let afd = openat(a.parent.fd, a.encoded.entry, O_RDWR)
        try FileIO.writeAll(afd, chunk, offset: Int64(at))
        close(afd)
        let cs = tree.layout.chunkSize
        let rfd = openat(a.parent.fd, a.encoded.entry, O_RDONLY)
        let reader = try ContentFile(fd: rfd, layout: tree.layout, keyring: tree.keyring)
        var got = [UInt8](repeating: 0, count: cs)
        XCTAssertEqual(try got.withUnsafeMutableBytes { try reader.read(into: $0.baseAddress!, count: cs, offset: UInt64(cs)) }, cs)
        reader.close()
        XCTAssertEqual(got, Array(later[cs..<(2 * cs)]), "the moved chunk is read as ok.jpg's")
        XCTAssertNotEqual(Array(contents["/photos/ok.jpg"]![cs...]), Array(later[cs..<(2 * cs)]))
        let s = try Fsck(tree: tree).run(repair: true)
        let found = kinds(s)
        // The file met second in directory order: e.jpg, or both names of ok.jpg's inode.
        XCTAssertTrue(found == ["fileIDShared /photos/deep/e.jpg"]
                      || found == ["fileIDShared /docs/hard.jpg", "fileIDShared /photos/ok.jpg"], "\(found)")
        // It names the other file: either name of ok.jpg's inode (whichever the walk met first), or e.jpg.
        let others = found == ["fileIDShared /photos/deep/e.jpg"] ? ["/photos/ok.jpg", "/docs/hard.jpg"] : ["/photos/deep/e.jpg"]
        let detail = s.problems.first?.detail ?? ""
        XCTAssertTrue(others.contains { detail.contains("has the file ID of \($0),") }, "\(s.problems)")
        XCTAssertEqual(s.actions, [])
        XCTAssertEqual(kinds(try Fsck(tree: tree).run()), found)
    }

    /// A `/lost+found` that is not a directory (a file of the user's by that name) is checked
    /// like any other file, and repair moves damage into `/lost+found.1` instead of stopping.
    func testRepairUsesAnotherNameWhenLostAndFoundIsNotADirectory() throws {
        let (tree, scratch, _) = try buildTree()
        let mine = Array("my own file called lost+found\n".utf8)
        OfflineFixture.write(scratch + "/lost+found", mine)
        try Importer(tree: tree).import(sources: [scratch + "/lost+found"], into: "/")
        try flip(tree, "/photos/a.jpg", at: Int64(tree.layout.sealedOffset(ofChunk: 1)) + 100)

        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(s), ["chunkDamaged /photos/a.jpg"])
        XCTAssertEqual(s.actions.count, 1, "\(s.actions)")
        let again = try Fsck(tree: tree).run()
        XCTAssertEqual(again.problems, [])
        XCTAssertEqual(again.lostAndFoundEntries, 1)
        let out = scratch + "/out"
        try Exporter(tree: tree).export(paths: ["/lost+found"], to: out)
        XCTAssertEqual(OfflineFixture.read(out + "/lost+found"), mine)
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/lost+found.1/photos%2Fa.jpg"], to: out + "/x")) {
            guard case StoreError.integrity(let p, _)? = $0 as? StoreError else { return XCTFail("\($0)") }
            XCTAssertEqual(p, "/lost+found.1/photos%2Fa.jpg")
        }
    }

    /// A /lost+found directory whose own .pvdir fails authentication cannot take entries:
    /// repair uses /lost+found.1 and treats the damaged one as any damaged directory: reported
    /// and moved there too (it used to abort the repair).
    func testRepairPassesOverALostAndFoundWhoseDirectoryInfoIsDamaged() throws {
        let (tree, _, _) = try buildTree()
        let lf = try VaultResolver(tree: tree).directory(VaultPath("/lost+found"), create: true)
        let fd = openat(lf.fd, DirectoryInfo.fileName, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, 20), 1)
        byte ^= 1
        XCTAssertEqual(pwrite(fd, &byte, 1, 20), 1)
        close(fd)
        try flip(tree, "/photos/a.jpg", at: Int64(tree.layout.sealedOffset(ofChunk: 1)) + 100)

        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(s), ["chunkDamaged /photos/a.jpg", "directoryInfoDamaged /lost+found"])
        XCTAssertEqual(s.lostAndFound, "lost+found.1")
        XCTAssertEqual(s.actions.count, 2, "\(s.actions)")
        let entries = try VaultResolver(tree: tree).directory(VaultPath("/lost+found.1"))
        XCTAssertEqual(try OfflineSys.list(entries.fd).filter { !NameCodec.isInternal($0.name) }.count, 2)
    }

    func testDamagedRootDirectoryInfoIsReportedNotFatal() throws {
        let (tree, _, _) = try buildTree()
        XCTAssertEqual(unlink(tree.root + "/" + DirectoryInfo.fileName), 0)
        let s = try Fsck(tree: tree).run(repair: true)
        XCTAssertEqual(kinds(s), ["directoryInfoMissing /"])
        XCTAssertEqual(s.actions, [])
    }

    /// A root `.pvdir` of a version this photovault does not read (a newer one's, or tampered)
    /// is a problem fsck reports, with and without repair (nothing below can be named, so
    /// repair changes nothing); fsck used to stop with `unknownVersion` (exit 10).
    func testRootDirectoryInfoOfAnUnknownVersionIsReportedNotFatal() throws {
        let (tree, _, _) = try buildTree()
        let fd = open(tree.root + "/" + DirectoryInfo.fileName, O_RDWR | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(pwrite(fd, [0x02], 1, 3), 1)   // the version byte after "PVD"
        close(fd)
        for repair in [false, true] {
            let s = try Fsck(tree: tree).run(repair: repair)
            XCTAssertEqual(s.problems.map(\.description),
                           ["/: directoryInfoDamaged: unknown format version 2 (this photovault reads version 1)"], "repair \(repair)")
            XCTAssertEqual(s.actions, [])
        }
    }

    /// A file dropped into the store under a name holding a newline and a terminal escape is
    /// reported on one line, with the name escaped: it used to split the report into a line
    /// that looks like another problem, and to send the escape to the terminal.
    func testAProblemIsOneLineWhateverTheNameHolds() throws {
        let (tree, _, _) = try buildTree()
        let docs = try VaultResolver(tree: tree).directory(VaultPath("/docs"))
        let name = "evil\nx.jpg: chunkDamaged: \u{1b}[2Jfake\\\u{7f}\u{85}\u{2028}\t\rü"   // no '/': one name
        let fd = openat(docs.fd, name, O_WRONLY | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        let s = try Fsck(tree: tree).run()
        XCTAssertEqual(s.problems.map(\.description),
                       ["/docs/evil\\nx.jpg: chunkDamaged: \\x1b[2Jfake\\\\\\x7f\\u{85}\\u{2028}\\t\\rü: foreignEntry: "
                        + "not a PhotoVault name (a sync tool's conflict copy or a foreign file?)"])
        XCTAssertEqual(s.problems.first?.path, "/docs/" + name, "the path itself stays exact")
    }

    /// A tree nested 4,000 directories deep (a mount makes one as easily as a shallow one) is
    /// walked to the bottom: fsck recursed once per level and crashed (SIGSEGV, stack
    /// overflow) at some 1,500 levels.
    func testADeeplyNestedTreeIsWalkedWithoutACrash() throws {
        let (tree, _) = try OfflineFixture.makeTree(self)
        let depth = 4000
        var fd = open(tree.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var info = try DirectoryInfo.read(dirfd: fd, keyring: tree.keyring)
        for _ in 0..<depth {
            let name = tree.names.encode(Array("d".utf8), in: info).entry
            info = try DirectoryInfo.makeDirectory(in: fd, entry: name, mode: 0o700, defaultClass: .complete, keyring: tree.keyring)
            let sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(fd)
            XCTAssertGreaterThanOrEqual(sub, 0)
            fd = sub
        }
        let bottom = tree.names.encode(Array("bottom.txt".utf8), in: info).entry
        close(openat(fd, bottom, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))   // 0 bytes: an empty file
        close(fd)
        let s = try Fsck(tree: tree).run()
        XCTAssertEqual(s.problems, [])
        XCTAssertEqual(s.directories, depth + 1)
        XCTAssertEqual(s.files, 1)
    }

    /// A dangling symlink in place of the root's `.pvdir` is there, and misshapen: damaged,
    /// not missing (fsck asked `access`, which follows the link, and printed
    /// "directoryInfoMissing: directory ID file is not a regular file").
    func testDanglingSymlinkInPlaceOfTheRootDirectoryInfoIsDamagedNotMissing() throws {
        let (tree, _, _) = try buildTree()
        let pvdir = tree.root + "/" + DirectoryInfo.fileName
        XCTAssertEqual(unlink(pvdir), 0)
        XCTAssertEqual(symlink(tree.root + "/nowhere", pvdir), 0)
        let s = try Fsck(tree: tree).run()
        XCTAssertEqual(s.problems.map(\.description), ["/: directoryInfoDamaged: directory ID file is not a regular file"])
    }
}
