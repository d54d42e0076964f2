// A store kept in step on two devices by real sync engines (issue 33, docs/SYNC.md):
// Syncthing (two instances on 127.0.0.1) and rclone bisync, each scenario with device A's
// vault mounted while the engine writes underneath it and device B working offline. After
// every sync both devices' photos, and both versions of every conflicting photo, are in A's
// live view within seconds, readable; fsck on B finds no damage; nothing lands in lost+found.
import Foundation
import Glibc
import XCTest

final class SyncEngineTests: XCTestCase {
    /// Device A: a store with alice's vault, mounted. Device B: an empty folder that Syncthing
    /// fills with A's store before anything else happens.
    struct Devices {
        let sb: Sandbox
        let storeB: String
        let mountA: String
        let pair: SyncthingPair?

        /// An offline command on device B's store.
        @discardableResult
        func onB(_ args: [String]) -> Harness.Result {
            sb.pv(args + ["--store", storeB, "--user", "alice", "--passfile", sb.passfile])
        }

        func sync(file: StaticString = #filePath, line: UInt = #line) {
            guard let pair else { return }
            XCTAssertTrue(pair.waitInSync(60), "Syncthing did not settle:\n\(pair.log)", file: file, line: line)
        }
    }

    func syncthingDevices() throws -> Devices {
        // Fails, not skips: scripts/deps.sh test installs it, and a missing engine must show.
        struct NoSyncthing: Error, CustomStringConvertible {
            var description: String { "syncthing is not installed (scripts/deps.sh test installs it)" }
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/syncthing") else { throw NoSyncthing() }
        let sb = Sandbox("pv-sync")
        sb.initStore()
        let storeB = sb.root + "/storeB"
        try FileManager.default.createDirectory(atPath: storeB, withIntermediateDirectories: true)
        let pair = try SyncthingPair(root: sb.root, folders: [sb.store, storeB])
        addTeardownBlock { pair.stop() }
        try pair.start()
        XCTAssertTrue(pair.waitInSync(60), "first sync: \(pair.log)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: storeB + "/photovault.conf"))
        let mp = sb.mount()
        return Devices(sb: sb, storeB: storeB, mountA: mp, pair: pair)
    }

    func write(_ path: String, _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNoThrow(try text.write(toFile: path, atomically: false, encoding: .utf8), path, file: file, line: line)
    }

    func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    func list(_ dir: String) -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).sorted() }

    /// A local file to import on device B.
    func local(_ d: Devices, _ name: String, _ text: String) -> String {
        let dir = d.sb.root + "/on-B"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let p = dir + "/" + name
        write(p, text)
        return p
    }

    /// Polls A's live view until `check` holds (a few seconds at most): how long a change
    /// synced underneath takes to show. Returns the seconds it took.
    @discardableResult
    func eventually(_ what: String, within seconds: Double = 5, file: StaticString = #filePath, line: UInt = #line,
                    _ check: () -> Bool) -> Double {
        let start = Date()
        let ok = Harness.waitUntil(seconds, check)
        XCTAssertTrue(ok, "not seen within \(seconds) s: \(what)", file: file, line: line)
        return Date().timeIntervalSince(start)
    }

    func assertCleanFsckOnB(_ d: Devices, file: StaticString = #filePath, line: UInt = #line) {
        let r = d.onB(["fsck"])
        XCTAssertEqual(r.status, 0, "fsck on B: \(r.stdout)\(r.stderr)", file: file, line: line)
        XCTAssertFalse(r.stdout.contains("nameUndecryptable") || r.stdout.contains("foreignEntry"), r.stdout, file: file, line: line)
        let repair = d.onB(["fsck", "--repair"])
        XCTAssertEqual(repair.status, 0, "fsck --repair on B: \(repair.stdout)\(repair.stderr)", file: file, line: line)
        XCTAssertFalse(repair.stdout.contains("repair: "), "repair changed something: \(repair.stdout)", file: file, line: line)
    }

    /// The conflict copies of `name` (`base (conflict ...).ext`) in a listing.
    func copies(_ entries: [String], of base: String, ext: String) -> [String] {
        entries.filter { $0.hasPrefix(base + " (conflict ") && $0.hasSuffix(")" + ext) }
    }

    // MARK: Syncthing

    func testSyncthingSameFolderCreatedOnBothDevicesKeepsEveryPhoto() throws {
        let d = try syncthingDevices()
        // The same new folder on both devices, each with its own photo.
        XCTAssertEqual(mkdir(d.mountA + "/trip", 0o755), 0)
        write(d.mountA + "/trip/from-A.jpg", "photo taken on A")
        XCTAssertEqual(d.onB(["import", local(d, "from-B.jpg", "photo taken on B"), "/trip"]).status, 0)
        d.sync()
        let took = eventually("B's photo in A's view") { list(d.mountA + "/trip") == ["from-A.jpg", "from-B.jpg"] }
        print("sync: B's photo in A's live view \(String(format: "%.2f", took)) s after Syncthing settled")
        XCTAssertEqual(read(d.mountA + "/trip/from-B.jpg"), "photo taken on B")
        XCTAssertEqual(read(d.mountA + "/trip/from-A.jpg"), "photo taken on A")
        XCTAssertEqual(d.onB(["export", "/trip", d.sb.root + "/outB"]).status, 0)
        XCTAssertEqual(list(d.sb.root + "/outB/trip"), ["from-A.jpg", "from-B.jpg"])
        assertCleanFsckOnB(d)
        XCTAssertFalse(list(d.mountA).contains("lost+found"))
    }

    func testSyncthingSamePhotoEditedOnBothDevicesShowsBothVersions() throws {
        let d = try syncthingDevices()
        write(d.mountA + "/IMG_0001.jpg", "original")
        d.sync()
        XCTAssertEqual(d.onB(["export", "/IMG_0001.jpg", d.sb.root + "/check.jpg"]).status, 0)
        // Edited on both before the next sync: B's edit is the newer one.
        write(d.mountA + "/IMG_0001.jpg", "edited on A")
        sleep(1)
        XCTAssertEqual(d.onB(["import", "--force", local(d, "IMG_0001.jpg", "edited on B, later"), "/"]).status, 0)
        d.sync()
        var entries: [String] = []
        eventually("both versions in A's view") {
            entries = list(d.mountA)
            return entries.contains("IMG_0001.jpg") && copies(entries, of: "IMG_0001", ext: ".jpg").count == 1
        }
        let copy = copies(entries, of: "IMG_0001", ext: ".jpg").first ?? "?"
        XCTAssertEqual(Set([read(d.mountA + "/IMG_0001.jpg"), read(d.mountA + "/" + copy)]), ["edited on A", "edited on B, later"],
                       "\(entries)")
        // fsck on B says it is a conflict, not damage, with both versions' sizes.
        let f = d.onB(["fsck"])
        XCTAssertEqual(f.status, 0, f.stdout + f.stderr)
        XCTAssertTrue(f.stdout.contains("/" + copy + ": syncConflict: a Syncthing conflict copy of /IMG_0001.jpg"), f.stdout)
        // Settled on A: the copy renamed, then the other deleted; both devices agree.
        XCTAssertEqual(rename(d.mountA + "/" + copy, d.mountA + "/IMG_0001-other.jpg"), 0)
        d.sync()
        XCTAssertEqual(d.onB(["export", "/", d.sb.root + "/outB"]).status, 0)
        XCTAssertEqual(list(d.sb.root + "/outB").filter { $0.hasPrefix("IMG") }, ["IMG_0001-other.jpg", "IMG_0001.jpg"])
        assertCleanFsckOnB(d)
    }

    func testSyncthingDeleteAgainstEditAndRenameAgainstEditLoseNothing() throws {
        let d = try syncthingDevices()
        write(d.mountA + "/x.jpg", "x before")
        write(d.mountA + "/y.jpg", "y before")
        d.sync()
        // A deletes x and renames y; B edits both meanwhile.
        XCTAssertEqual(unlink(d.mountA + "/x.jpg"), 0)
        XCTAssertEqual(rename(d.mountA + "/y.jpg", d.mountA + "/z.jpg"), 0)
        XCTAssertEqual(d.onB(["import", "--force", local(d, "x.jpg", "x edited on B"), "/"]).status, 0)
        XCTAssertEqual(d.onB(["import", "--force", local(d, "y.jpg", "y edited on B"), "/"]).status, 0)
        d.sync()
        eventually("B's edits back in A's view") { list(d.mountA).filter { $0.hasSuffix(".jpg") } == ["x.jpg", "y.jpg", "z.jpg"] }
        XCTAssertEqual(read(d.mountA + "/x.jpg"), "x edited on B")
        XCTAssertEqual(read(d.mountA + "/y.jpg"), "y edited on B")
        XCTAssertEqual(read(d.mountA + "/z.jpg"), "y before")
        assertCleanFsckOnB(d)
    }

    func testSyncthingDefaultClassChangedOnBothDevicesHidesNothing() throws {
        let d = try syncthingDevices()
        XCTAssertEqual(mkdir(d.mountA + "/album", 0o755), 0)
        write(d.mountA + "/album/one.jpg", "one")
        d.sync()
        // Each device gives the folder another default class and adds a photo.
        XCTAssertEqual(Harness.run(["setfattr", "-n", "user.photovault.class", "-v", "none", d.mountA + "/album"]).status, 0)
        write(d.mountA + "/album/two.jpg", "two")
        XCTAssertEqual(d.onB(["class", "set", "/album", "until-first-auth"]).status, 0)
        XCTAssertEqual(d.onB(["import", local(d, "three.jpg", "three"), "/album"]).status, 0)
        d.sync()
        eventually("every photo of the album in A's view") { list(d.mountA + "/album") == ["one.jpg", "three.jpg", "two.jpg"] }
        XCTAssertEqual(read(d.mountA + "/album/three.jpg"), "three")
        XCTAssertEqual(d.onB(["export", "/album", d.sb.root + "/outB"]).status, 0)
        XCTAssertEqual(list(d.sb.root + "/outB/album"), ["one.jpg", "three.jpg", "two.jpg"])
        assertCleanFsckOnB(d)
    }

    // MARK: account records

    /// A password file of its own.
    func passfile(_ d: Devices, _ name: String, _ password: String) -> String {
        let p = d.sb.root + "/" + name
        write(p, password)
        chmod(p, 0o600)
        return p
    }

    /// `pv` with the account's password from `pass` on `store`.
    func withPassword(_ d: Devices, _ store: String, _ pass: String, _ args: [String]) -> Harness.Result {
        d.sb.pv(args + ["--store", store, "--user", "alice", "--passfile", pass])
    }

    /// A password changed on both devices: both versions of the record are kept, each
    /// password opens the vault on each device, `user list` and `fsck` say so, and a
    /// `passwd` with either settles it everywhere. `stores`: A's and B's.
    func assertPasswordConflictHandled(_ d: Devices, passA: String, passB: String, settle: () -> Void,
                                       file: StaticString = #filePath, line: UInt = #line) {
        for store in [d.sb.store, d.storeB] {
            let list = d.sb.pv(["user", "list", "--store", store])
            XCTAssertEqual(list.status, 0, list.stderr, file: file, line: line)
            XCTAssertTrue(list.stdout.contains("1 account (") && list.stdout.contains("1 account's record is in conflict"),
                          "user list: \(list.stdout)", file: file, line: line)
            for pass in [passA, passB] {
                let f = withPassword(d, store, pass, ["fsck"])
                XCTAssertEqual(f.status, 0, "fsck: \(f.stdout)\(f.stderr)", file: file, line: line)
                XCTAssertTrue(f.stdout.contains("account record: syncConflict"), f.stdout, file: file, line: line)
                let out = d.sb.root + "/out-\(UUID().uuidString.prefix(6))"
                XCTAssertEqual(withPassword(d, store, pass, ["export", "/", out]).status, 0, file: file, line: line)
                XCTAssertEqual(read(out + "/keep.jpg"), "kept through it all", file: file, line: line)
            }
            XCTAssertEqual(withPassword(d, store, d.sb.passfile, ["fsck"]).status, 5, "the old password opens nothing", file: file, line: line)
        }
        settle()
        let passC = passfile(d, "passC", "settled password three")
        for store in [d.sb.store, d.storeB] {
            XCTAssertFalse(d.sb.pv(["user", "list", "--store", store]).stdout.contains("conflict"), file: file, line: line)
            XCTAssertEqual(withPassword(d, store, passC, ["fsck"]).status, 0, file: file, line: line)
            XCTAssertEqual(withPassword(d, store, passA, ["fsck"]).status, 5, file: file, line: line)
        }
    }

    func testSyncthingPasswordChangedOnBothDevicesLocksNobodyOut() throws {
        let d = try syncthingDevices()
        write(d.mountA + "/keep.jpg", "kept through it all")
        d.sync()
        let passA = passfile(d, "passA", "new password of device A")
        let passB = passfile(d, "passB", "new password of device B")
        XCTAssertEqual(d.sb.pv(["user", "passwd", "alice", "--store", d.sb.store, "--passfile", d.sb.passfile, "--new-passfile", passA]).status, 0)
        sleep(1)
        XCTAssertEqual(d.sb.pv(["user", "passwd", "alice", "--store", d.storeB, "--passfile", d.sb.passfile, "--new-passfile", passB]).status, 0)
        d.sync()
        assertPasswordConflictHandled(d, passA: passA, passB: passB) {
            let passC = passfile(d, "passC", "settled password three")
            XCTAssertEqual(d.sb.pv(["user", "passwd", "alice", "--store", d.storeB, "--passfile", passA, "--new-passfile", passC]).status, 0)
            d.sync()
        }
        // A's mount lived through all of it.
        XCTAssertEqual(read(d.mountA + "/keep.jpg"), "kept through it all")
    }

    // MARK: rclone bisync

    func testRcloneBisyncConflictsShowBothVersionsAndTheSameFolderKeepsEveryPhoto() throws {
        let sb = Sandbox("pv-rclone")
        sb.initStore()
        let storeB = sb.root + "/storeB"
        try FileManager.default.createDirectory(atPath: storeB, withIntermediateDirectories: true)
        let rc = RcloneBisync(root: sb.root, path1: sb.store, path2: storeB)
        let first = rc.run(resync: true)
        XCTAssertEqual(first.status, 0, first.stderr)
        let d = Devices(sb: sb, storeB: storeB, mountA: sb.mount(), pair: nil)
        write(d.mountA + "/IMG_0002.jpg", "original")
        XCTAssertEqual(rc.run().status, 0)
        // Both edit the photo; both create `trip`, each with a photo.
        write(d.mountA + "/IMG_0002.jpg", "edited on A")
        XCTAssertEqual(d.onB(["import", "--force", local(d, "IMG_0002.jpg", "edited on B"), "/"]).status, 0)
        XCTAssertEqual(mkdir(d.mountA + "/trip", 0o755), 0)
        write(d.mountA + "/trip/from-A.jpg", "A")
        XCTAssertEqual(d.onB(["import", local(d, "from-B.jpg", "B"), "/trip"]).status, 0)
        let r = rc.run()
        XCTAssertEqual(r.status, 0, r.stderr)
        var entries: [String] = []
        eventually("both versions and both photos in A's view") {
            entries = list(d.mountA)
            return copies(entries, of: "IMG_0002", ext: ".jpg").count == 2 && list(d.mountA + "/trip") == ["from-A.jpg", "from-B.jpg"]
        }
        let both = copies(entries, of: "IMG_0002", ext: ".jpg")
        XCTAssertEqual(Set(both), ["IMG_0002 (conflict path1).jpg", "IMG_0002 (conflict path2).jpg"], "\(entries)")
        XCTAssertEqual(Set(both.map { read(d.mountA + "/" + $0) }), ["edited on A", "edited on B"])
        XCTAssertEqual(read(d.mountA + "/trip/from-B.jpg"), "B")
        XCTAssertEqual(rc.run().status, 0)
        assertCleanFsckOnB(d)
    }

    func testRcloneBisyncDeleteAgainstEditAndRenameAgainstEditLoseNothing() throws {
        let sb = Sandbox("pv-rclone")
        sb.initStore()
        let storeB = sb.root + "/storeB"
        try FileManager.default.createDirectory(atPath: storeB, withIntermediateDirectories: true)
        let rc = RcloneBisync(root: sb.root, path1: sb.store, path2: storeB)
        XCTAssertEqual(rc.run(resync: true).status, 0)
        let d = Devices(sb: sb, storeB: storeB, mountA: sb.mount(), pair: nil)
        write(d.mountA + "/x.jpg", "x before")
        write(d.mountA + "/y.jpg", "y before")
        XCTAssertEqual(rc.run().status, 0)
        XCTAssertEqual(unlink(d.mountA + "/x.jpg"), 0)
        XCTAssertEqual(rename(d.mountA + "/y.jpg", d.mountA + "/z.jpg"), 0)
        XCTAssertEqual(d.onB(["import", "--force", local(d, "x.jpg", "x edited on B"), "/"]).status, 0)
        XCTAssertEqual(d.onB(["import", "--force", local(d, "y.jpg", "y edited on B"), "/"]).status, 0)
        let r = rc.run()
        XCTAssertEqual(r.status, 0, r.stderr)
        eventually("B's edits back in A's view") { list(d.mountA).filter { $0.hasSuffix(".jpg") } == ["x.jpg", "y.jpg", "z.jpg"] }
        XCTAssertEqual(read(d.mountA + "/x.jpg"), "x edited on B")
        XCTAssertEqual(read(d.mountA + "/y.jpg"), "y edited on B")
        XCTAssertEqual(read(d.mountA + "/z.jpg"), "y before")
        assertCleanFsckOnB(d)
    }

    func testRcloneBisyncPasswordChangedOnBothDevicesLocksNobodyOut() throws {
        let sb = Sandbox("pv-rclone")
        sb.initStore()
        let storeB = sb.root + "/storeB"
        try FileManager.default.createDirectory(atPath: storeB, withIntermediateDirectories: true)
        let rc = RcloneBisync(root: sb.root, path1: sb.store, path2: storeB)
        XCTAssertEqual(rc.run(resync: true).status, 0)
        let d = Devices(sb: sb, storeB: storeB, mountA: sb.mount(), pair: nil)
        write(d.mountA + "/keep.jpg", "kept through it all")
        XCTAssertEqual(rc.run().status, 0)
        let passA = passfile(d, "passA", "new password of device A")
        let passB = passfile(d, "passB", "new password of device B")
        XCTAssertEqual(sb.pv(["user", "passwd", "alice", "--store", sb.store, "--passfile", sb.passfile, "--new-passfile", passA]).status, 0)
        XCTAssertEqual(sb.pv(["user", "passwd", "alice", "--store", storeB, "--passfile", sb.passfile, "--new-passfile", passB]).status, 0)
        let r = rc.run()
        XCTAssertEqual(r.status, 0, r.stderr)
        // rclone keeps neither under the record's own name: both become copies.
        let records = list(sb.store + "/accounts").filter { $0.contains(".rec") }
        XCTAssertEqual(records.count, 2, "\(records)")
        XCTAssertTrue(records.allSatisfy { $0.hasSuffix("..path1") || $0.hasSuffix("..path2") }, "\(records)")
        assertPasswordConflictHandled(d, passA: passA, passB: passB) {
            let passC = passfile(d, "passC", "settled password three")
            XCTAssertEqual(sb.pv(["user", "passwd", "alice", "--store", storeB, "--passfile", passB, "--new-passfile", passC]).status, 0)
            XCTAssertEqual(rc.run().status, 0)
        }
        XCTAssertEqual(read(d.mountA + "/keep.jpg"), "kept through it all")
    }
}
