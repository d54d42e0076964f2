import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore
@testable import PhotoVaultFS

/// What a sync engine does underneath a live mount (docs/SYNC.md): a second version of a
/// folder's `.pvdir` arriving after the folder was first read, and a conflict copy of a
/// file, which the view shows under a marked name and lets the user read, rename, delete.
final class SyncUnderneathMountTests: XCTestCase {
    var h: MountHarness!
    let master: [UInt8] = SecureRandom.bytes(32)

    override func setUpWithError() throws {
        h = try EncryptedMountTests.startEncrypted(master: master)
    }

    override func tearDown() {
        h?.cleanUp()
        h = nil
    }

    func tree() throws -> UserTree {
        UserTree(root: h.backing, keyring: try UserKeyring(masterKey: SecureBytes(copying: master)), layout: EncryptedMountTests.layout)
    }

    func list(_ dir: String) -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).sorted() }

    /// A file written underneath, named under `info` (another device's writer).
    func writeUnderneath(_ t: UserTree, in dirfd: Int32, _ info: DirectoryInfo, _ name: String, _ text: String) throws {
        let entry = t.names.encode(Array(name.utf8), in: info).entry
        let fd = openat(dirfd, entry, O_RDWR | O_CREAT | O_EXCL, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let f = try ContentFile.create(fd: fd, layout: t.layout, keyring: t.keyring, protectionClass: .default)
        let b = Array(text.utf8)
        _ = try b.withUnsafeBytes { try f.write(from: $0.baseAddress!, count: b.count, offset: 0) }
        f.close()
    }

    func testAFoldersSecondDirectoryInfoArrivingUnderALiveMountShowsItsNames() throws {
        let t = try tree()
        // A folder an older photovault made (random ID), already listed through the mount.
        let r = try VaultResolver(tree: t)
        let entry = t.names.encode(Array("trip".utf8), in: r.root.info).entry
        XCTAssertEqual(mkdirat(r.root.fd, entry, 0o700), 0)
        let dfd = openat(r.root.fd, entry, O_RDONLY | O_DIRECTORY)
        defer { close(dfd) }
        try DirectoryInfo().write(dirfd: dfd, keyring: t.keyring)
        try "from this device".write(toFile: h.mountpoint + "/trip/a.jpg", atomically: false, encoding: .utf8)
        XCTAssertEqual(list(h.mountpoint + "/trip"), ["a.jpg"])
        // The engine brings the other device's .pvdir as a conflict copy, and its photo.
        let other = DirectoryInfo()
        try AtomicFile.write(other.encode(keyring: t.keyring), in: dfd, name: ".sync-conflict-20261207-030224-7RXRS6P.pvdir")
        try writeUnderneath(t, in: dfd, other, "b.jpg", "from the other device")
        XCTAssertTrue(MountHarnessWait.until(5) { self.list(self.h.mountpoint + "/trip") == ["a.jpg", "b.jpg"] },
                      "\(list(h.mountpoint + "/trip"))")
        XCTAssertEqual(try String(contentsOfFile: h.mountpoint + "/trip/b.jpg", encoding: .utf8), "from the other device")
        // New names go under the folder's own .pvdir.
        try "new".write(toFile: h.mountpoint + "/trip/c.jpg", atomically: false, encoding: .utf8)
        XCTAssertTrue(NameCodec.exists(t.names.encode(Array("c.jpg".utf8), in: try DirectoryInfo.readFile(dirfd: dfd, keyring: t.keyring)).entry, in: dfd))
    }

    func testAConflictCopyIsReadRenamedAndDeletedThroughTheMount() throws {
        let t = try tree()
        try "winner".write(toFile: h.mountpoint + "/IMG_0001.jpg", atomically: false, encoding: .utf8)
        try "loser".write(toFile: h.mountpoint + "/other.jpg", atomically: false, encoding: .utf8)
        let r = try VaultResolver(tree: t)
        let original = t.names.encode(Array("IMG_0001.jpg".utf8), in: r.root.info).entry
        let loser = t.names.encode(Array("other.jpg".utf8), in: r.root.info).entry
        let copy = original + ".sync-conflict-20261207-030224-7RXRS6P"
        XCTAssertEqual(renameat(r.root.fd, loser, r.root.fd, copy), 0)   // what the engine leaves
        OfflineFixtureForFS.touch(h.backing + "/.stfolder")
        let shown = "IMG_0001 (conflict 2026-12-07 030224).jpg"
        XCTAssertTrue(MountHarnessWait.until(5) { self.list(self.h.mountpoint) == [shown, "IMG_0001.jpg"] }, "\(list(h.mountpoint))")
        XCTAssertEqual(try String(contentsOfFile: h.mountpoint + "/" + shown, encoding: .utf8), "loser")
        // Renamed: an ordinary entry from then on.
        XCTAssertEqual(rename(h.mountpoint + "/" + shown, h.mountpoint + "/kept.jpg"), 0)
        XCTAssertFalse(NameCodec.exists(copy, in: r.root.fd))
        XCTAssertEqual(list(h.mountpoint), ["IMG_0001.jpg", "kept.jpg"])
        XCTAssertEqual(try String(contentsOfFile: h.mountpoint + "/kept.jpg", encoding: .utf8), "loser")
        // Another copy, deleted through the mount.
        XCTAssertEqual(linkat(r.root.fd, original, r.root.fd, original + "..path2", 0), 0)
        XCTAssertTrue(MountHarnessWait.until(5) { self.list(self.h.mountpoint).contains("IMG_0001 (conflict path2).jpg") })
        XCTAssertEqual(unlink(h.mountpoint + "/IMG_0001 (conflict path2).jpg"), 0)
        XCTAssertFalse(NameCodec.exists(original + "..path2", in: r.root.fd))
        XCTAssertEqual(list(h.mountpoint), ["IMG_0001.jpg", "kept.jpg"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: h.backing + "/.stfolder"), "sync debris is left alone")
    }

    /// Engines replace a file by renaming a complete new one over it. A handle opened before
    /// goes on reading the version it opened, to the end, never chunks of the new one; a
    /// later open reads the new one whole once the kernel's 1 s cache of the name is past.
    func testAFileReplacedUnderneathWhileOpenIsNeverReadAsAMix() throws {
        let t = try tree()
        let size = 256 * 1024   // 64 chunks of 4 KiB
        let old = [UInt8](repeating: 0x41, count: size), new = [UInt8](repeating: 0x42, count: size)
        try Data(old).write(to: URL(fileURLWithPath: h.mountpoint + "/photo.jpg"))
        try Data(new).write(to: URL(fileURLWithPath: h.mountpoint + "/incoming.jpg"))
        let r = try VaultResolver(tree: t)
        let photo = t.names.encode(Array("photo.jpg".utf8), in: r.root.info).entry
        let incoming = t.names.encode(Array("incoming.jpg".utf8), in: r.root.info).entry
        // What the engine downloaded, under a name the view hides (as .syncthing.NAME.tmp).
        XCTAssertEqual(renameat(r.root.fd, incoming, r.root.fd, ".syncthing.\(photo).tmp"), 0)
        let fd = open(h.mountpoint + "/photo.jpg", O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        var got = [UInt8](repeating: 0, count: size)
        XCTAssertEqual(pread(fd, &got, 64 * 1024, 0), 64 * 1024)
        XCTAssertEqual(renameat(r.root.fd, ".syncthing.\(photo).tmp", r.root.fd, photo), 0)   // the engine's rename
        var n = 64 * 1024
        while n < size {
            let k = got.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + n, size - n, off_t(n)) }
            XCTAssertGreaterThan(k, 0)
            if k <= 0 { break }
            n += k
        }
        XCTAssertEqual(n, size)
        XCTAssertTrue(got == old, "the open handle read \(got.filter { $0 == 0x42 }.count) bytes of the new version")
        XCTAssertTrue(MountHarnessWait.until(5) {
            (try? Data(contentsOf: URL(fileURLWithPath: self.h.mountpoint + "/photo.jpg"))).map { [UInt8]($0) == new } ?? false
        }, "a new open reads the new version")
        XCTAssertEqual(list(h.mountpoint), ["photo.jpg"])
    }
}

enum MountHarnessWait {
    static func until(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(100_000)
        }
        return condition()
    }
}

enum OfflineFixtureForFS {
    static func touch(_ path: String) { close(open(path, O_WRONLY | O_CREAT, 0o644)) }
}
