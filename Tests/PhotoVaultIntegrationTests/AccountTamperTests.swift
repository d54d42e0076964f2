import Foundation
import XCTest

/// Records that were damaged, edited, copied or moved to another device: each is refused
/// with its own exit code and one error line, and nothing is mounted.
final class AccountTamperTests: XCTestCase {
    private func mountAlice(_ s: Sandbox, env extra: [String: String] = [:]) -> (Harness.Result, String) {
        let mp = s.root + "/mnt-\(UUID().uuidString.prefix(4))"
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        var env = s.env
        for (k, v) in extra { env[k] = v }
        let r = Harness.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus"],
                           env: env)
        if r.status == 0 {
            s.mounts.append(mp)
            _ = Harness.waitUntil(5) { Harness.isMounted(mp) }
        }
        return (r, mp)
    }

    private func editRecord(_ s: Sandbox, _ change: (inout [String: Any]) -> Void) throws {
        let path = try XCTUnwrap(AccountFixtures.recordFiles(s).first)
        var json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        change(&json)
        try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]).write(to: URL(fileURLWithPath: path))
    }

    func testTruncatedRecordIsCorrupt() throws {
        let s = Sandbox("tamper-trunc")
        s.initStore()
        let path = try XCTUnwrap(AccountFixtures.recordFiles(s).first)
        XCTAssertEqual(truncate(path, 40), 0)
        let (r, mp) = mountAlice(s)
        assertFailure(r, 9, "corrupt")
        XCTAssertFalse(Harness.isMounted(mp))
        assertFailure(s.pv(["user", "passwd", "alice", "--store", s.store, "--passfile", s.passfile,
                            "--new-passfile", s.passfile]), 9, "corrupt")
    }

    /// The record opens but the account's encrypted tree is gone: exit 9 and a line that says
    /// so, for the mount and for every offline command, not a raw "No such file or directory".
    func testMissingTreeIsACorruptStore() throws {
        let s = Sandbox("tamper-tree")
        s.initStore()
        let trees = try FileManager.default.contentsOfDirectory(atPath: s.store + "/users")
        XCTAssertEqual(trees.count, 1)
        try FileManager.default.removeItem(atPath: s.store + "/users/" + trees[0])
        let (r, mp) = mountAlice(s)
        assertFailure(r, 9, "encrypted tree (users/\(trees[0])) is missing")
        XCTAssertFalse(Harness.isMounted(mp))
        for cmd in [["export", "/", s.root + "/out"], ["fsck"], ["import", s.passfile, "/"]] {
            assertFailure(s.pv(cmd + ["--store", s.store, "--user", "alice", "--passfile", s.passfile]), 9,
                          "encrypted tree (users/\(trees[0])) is missing", cmd.joined(separator: " "))
        }
        // Something else in its place is not missing (it said "is missing" for a file too).
        let tree = s.store + "/users/" + trees[0]
        for (what, make) in [("file", { FileManager.default.createFile(atPath: tree, contents: Data("x".utf8)) ? 0 : -1 }),
                             ("FIFO", { mkfifo(tree, 0o600) }), ("dangling symlink", { symlink(s.root + "/nowhere", tree) })] {
            XCTAssertEqual(make(), 0, what)
            for cmd in [["fsck"], ["export", "/", s.root + "/out"]] {
                assertFailure(s.pv(cmd + ["--store", s.store, "--user", "alice", "--passfile", s.passfile], timeout: 20), 9,
                              "encrypted tree (users/\(trees[0])) is not a directory", "\(what): " + cmd.joined(separator: " "))
            }
            XCTAssertEqual(unlink(tree), 0)
        }
    }

    /// A store whose shape is wrong (users/ or accounts/ gone, a directory where the config or
    /// a record should be) is corrupt: exit 9 with a line that says what, not a raw errno.
    func testMisshapenStoreIsCorrupt() throws {
        let s = Sandbox("tamper-shape")
        s.initStore()
        let record = try XCTUnwrap(AccountFixtures.recordFiles(s).first)
        try FileManager.default.removeItem(atPath: record)
        try FileManager.default.createDirectory(atPath: record, withIntermediateDirectories: false)
        let (r, mp) = mountAlice(s)
        assertFailure(r, 9, "the account record is corrupt: not a regular file")
        XCTAssertFalse(Harness.isMounted(mp))

        for dir in ["users", "accounts"] {
            let moved = s.store + "/" + dir + ".moved"
            try FileManager.default.moveItem(atPath: s.store + "/" + dir, toPath: moved)
            for cmd in [["user", "add", "bob", "--passfile", s.passfile], ["user", "list"]] {
                assertFailure(s.pv(cmd + ["--store", s.store]), 9, "the store has no \(dir)/ directory", cmd.joined(separator: " "))
            }
            try FileManager.default.moveItem(atPath: moved, toPath: s.store + "/" + dir)
        }
        let config = s.store + "/photovault.conf"
        try FileManager.default.moveItem(atPath: config, toPath: config + ".moved")
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: false)
        assertFailure(s.pv(["user", "list", "--store", s.store]), 9, "photovault.conf is not a regular file")
    }

    /// A FIFO in place of a record (an open for reading would wait for a writer for good) or
    /// a symlink to a record outside the store (it would be followed) is a corrupt record:
    /// exit 9 at once. A symlink in place of `accounts/.lock` is never created through.
    func testRecordOrLockThatIsNotARegularFileIsCorrupt() throws {
        let s = Sandbox("tamper-fifo")
        s.initStore()
        let record = try XCTUnwrap(AccountFixtures.recordFiles(s).first)
        let copy = s.root + "/record-copy"
        try FileManager.default.copyItem(atPath: record, toPath: copy)
        let args = ["--store", s.store, "--user", "alice", "--passfile", s.passfile]
        try FileManager.default.removeItem(atPath: record)
        XCTAssertEqual(mkfifo(record, 0o600), 0)
        assertFailure(s.pv(["fsck"] + args, timeout: 20), 9, "the account record is corrupt: not a regular file", "FIFO")
        try FileManager.default.removeItem(atPath: record)
        try FileManager.default.createSymbolicLink(atPath: record, withDestinationPath: copy)
        assertFailure(s.pv(["fsck"] + args, timeout: 20), 9, "the account record is corrupt: not a regular file", "symlink")
        try FileManager.default.removeItem(atPath: record)
        try FileManager.default.moveItem(atPath: copy, toPath: record)
        XCTAssertEqual(s.pv(["fsck"] + args, timeout: 20).status, 0)

        let lock = s.store + "/accounts/.lock", outside = s.root + "/outside-lock"
        try? FileManager.default.removeItem(atPath: lock)
        try FileManager.default.createSymbolicLink(atPath: lock, withDestinationPath: outside)
        assertFailure(s.pv(["user", "add", "bob", "--store", s.store, "--passfile", s.passfile], timeout: 20), 9,
                      ".lock is not a regular file")
        XCTAssertFalse(FileManager.default.fileExists(atPath: outside), "created through the symlink")
    }

    /// A device node in place of a store file PhotoVault reads or locks is refused as before
    /// (exit 9 or fsck's `directoryInfoDamaged`), and it is never opened: opening a device
    /// runs its driver's open (a tape rewinds, a modem hangs up), O_NONBLOCK or not. The node
    /// is a copy of /dev/null (c 1 3); strace shows every open the command (and a daemon it
    /// forks) makes, and none may open the node for reading or writing (an O_PATH open, which
    /// runs no driver's open, is how it is looked at). Each used to be opened, then refused.
    func testDeviceNodeInPlaceOfAStoreFileIsRefusedWithoutBeingOpened() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let s = Sandbox("tamper-device")
        s.initStore()
        let record = try XCTUnwrap(AccountFixtures.recordFiles(s).first)
        let trees = try FileManager.default.contentsOfDirectory(atPath: s.store + "/users")
        XCTAssertEqual(trees.count, 1)
        let tree = s.store + "/users/" + trees[0]
        let mp = s.root + "/mnt-device"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let user = ["--store", s.store, "--user", "alice", "--passfile", s.passfile]
        let cases: [(file: String, argv: [String], status: Int32, says: String)] = [
            (s.store + "/photovault.conf", ["user", "list", "--store", s.store], 9, "photovault.conf is not a regular file"),
            (record, ["fsck"] + user, 9, "the account record is corrupt: not a regular file"),
            (tree + "/.pvmount", ["mount", mp, "--no-dbus"] + user, 9, ".pvmount is not a regular file"),
            (tree + "/.pvdir", ["fsck"] + user, 21, "/: directoryInfoDamaged: directory ID file is not a regular file"),
        ]
        var null = stat()
        XCTAssertEqual(stat("/dev/null", &null), 0)
        for c in cases {
            let saved = c.file + ".saved"
            if FileManager.default.fileExists(atPath: c.file) { XCTAssertEqual(rename(c.file, saved), 0, c.file) }
            XCTAssertEqual(mknod(c.file, S_IFCHR | 0o600, null.st_rdev), 0, "mknod \(c.file): \(String(cString: strerror(errno)))")
            let log = s.root + "/strace.log"
            let r = Harness.run(["/usr/bin/strace", "-f", "-qq", "-o", log, "-e", "trace=open,openat,openat2",
                                 Harness.binary] + c.argv, env: s.env, timeout: 60)
            if r.status == 0 && c.argv[0] == "mount" { s.mounts.append(mp) }
            if c.status == 9 {
                assertFailure(r, 9, c.says, c.file)
            } else {
                XCTAssertEqual(r.status, c.status, r.stdout + r.stderr)
                XCTAssertTrue(r.stdout.hasPrefix(c.says + "\n"), r.stdout)
            }
            let name = "/" + (c.file as NSString).lastPathComponent
            let trace = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            XCTAssertTrue(trace.contains("openat("), "strace recorded nothing: \(trace.prefix(500))")
            let opened = trace.split(separator: "\n").filter {
                $0.contains("open") && !$0.contains("O_PATH")
                    && ($0.contains("\"" + c.file + "\"") || $0.contains("\"" + name.dropFirst() + "\""))
            }
            XCTAssertEqual(opened, [], "the device node \(c.file) was opened")
            XCTAssertEqual(unlink(c.file), 0)
            if FileManager.default.fileExists(atPath: saved) { XCTAssertEqual(rename(saved, c.file), 0) }
        }
        XCTAssertFalse(Harness.isMounted(mp))
        XCTAssertEqual(s.pv(["fsck"] + user, timeout: 20).status, 0, "the store is whole again")
    }

    func testUnknownRecordVersionIsExit10() throws {
        let s = Sandbox("tamper-version")
        s.initStore()
        try editRecord(s) { $0["version"] = 2 }
        let (r, mp) = mountAlice(s)
        assertFailure(r, 10, "unknown format version 2")
        XCTAssertFalse(Harness.isMounted(mp))
    }

    /// A lowered cost in the store config (not in an account record) is exit 12 too, and the
    /// message names the config and the field; it used to blame "the account record".
    func testLoweredStoreConfigCostNamesTheConfigNotARecord() throws {
        let s = Sandbox("tamper-config-cost")
        s.initStore()
        let path = s.store + "/photovault.conf"
        let saved = try Data(contentsOf: URL(fileURLWithPath: path))
        for (field, lower) in [("kdfFloor", ["opsLimit": 1, "memLimit": 64 << 20]), ("accountNameKDF", ["opsLimit": 2, "memLimit": 1 << 20])] {
            var json = try XCTUnwrap(JSONSerialization.jsonObject(with: saved) as? [String: Any])
            json[field] = lower
            try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]).write(to: URL(fileURLWithPath: path))
            let r = s.pv(["user", "check", "alice", "--store", s.store])
            assertFailure(r, 12, "the store config's \(field) Argon2id cost is below the allowed floor (tampered photovault.conf?)", field)
            XCTAssertFalse(r.stderr.contains("account record"), r.stderr)
        }
        try saved.write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(s.pv(["user", "check", "alice", "--store", s.store]).status, 0)
    }

    func testLoweredArgon2CostIsRefusedBeforeHashing() throws {
        let s = Sandbox("tamper-cost")
        s.initStore()
        for lower in [["opsLimit": 1, "memLimit": 64 << 20], ["opsLimit": 2, "memLimit": 8 << 20]] {
            let saved = try AccountFixtures.onlyRecordBytes(s)
            try editRecord(s) { $0["kdf"] = lower }
            let (r, mp) = mountAlice(s)
            assertFailure(r, 12, "below the allowed floor", "\(lower)")
            XCTAssertFalse(Harness.isMounted(mp))
            try saved.write(to: URL(fileURLWithPath: AccountFixtures.recordFiles(s)[0]))
        }
        // The untouched record still opens.
        let (ok, mp) = mountAlice(s)
        XCTAssertEqual(ok.status, 0, ok.stderr)
        s.unmount(mp)
    }

    /// The same user name and password in two stores: store B's record placed under store A's
    /// record name does not open (the store ID is in the associated data).
    func testRecordCopiedFromAnotherStoreIsRefused() throws {
        let a = Sandbox("tamper-copy-a")
        let b = Sandbox("tamper-copy-b")
        a.initStore()
        b.initStore()
        let recA = try XCTUnwrap(AccountFixtures.recordFiles(a).first)
        let recB = try XCTUnwrap(AccountFixtures.recordFiles(b).first)
        XCTAssertNotEqual((recA as NSString).lastPathComponent, (recB as NSString).lastPathComponent,
                          "record names must differ between stores (per-store salt)")
        // Give store A also B's tree, so only the record's binding can refuse it.
        let treesB = try FileManager.default.contentsOfDirectory(atPath: b.store + "/users")
        for t in treesB { try FileManager.default.copyItem(atPath: b.store + "/users/" + t, toPath: a.store + "/users/" + t) }
        try FileManager.default.removeItem(atPath: recA)
        try FileManager.default.copyItem(atPath: recB, toPath: recA)
        let (r, mp) = mountAlice(a)
        assertFailure(r, 5, "wrong password")
        XCTAssertFalse(Harness.isMounted(mp))
        // In its own store the very same record opens with the same password.
        let (ok, mpB) = mountAlice(b)
        XCTAssertEqual(ok.status, 0, ok.stderr)
        b.unmount(mpB)
    }

    func testDeviceBoundAccountFailsWithAnotherDeviceSecret() throws {
        let s = Sandbox("tamper-device")
        s.initStore(users: [])
        let add = s.pv(["user", "add", "alice", "--store", s.store, "--passfile", s.passfile, "--this-device-only"])
        XCTAssertEqual(add.status, 0, add.stderr)
        XCTAssertTrue(add.stdout.contains("bound to this device"), add.stdout)
        let secret = s.root + "/device-secret"
        var st = stat()
        XCTAssertEqual(stat(secret, &st), 0, "the device secret was not created at $PHOTOVAULT_DEVICE_SECRET")
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertEqual(st.st_size, 32)

        // On this device: works.
        let (ok, mp) = mountAlice(s)
        XCTAssertEqual(ok.status, 0, ok.stderr)
        try Data("bound".utf8).write(to: URL(fileURLWithPath: mp + "/f"))
        s.unmount(mp)

        // Another device: a different 32-byte secret, or none at all.
        let other = s.root + "/other-secret"
        try Data(AccountFixtures.randomBytes(32)).write(to: URL(fileURLWithPath: other))
        XCTAssertEqual(chmod(other, 0o600), 0)
        let (r, mp2) = mountAlice(s, env: ["PHOTOVAULT_DEVICE_SECRET": other])
        assertFailure(r, 13, "bound to another device")
        XCTAssertFalse(Harness.isMounted(mp2))
        let (r2, _) = mountAlice(s, env: ["PHOTOVAULT_DEVICE_SECRET": s.root + "/missing-secret"])
        assertFailure(r2, 13, "bound to another device")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.root + "/missing-secret"), "opening must never create a secret")
        // A wrong device does not count as a wrong password: no throttle file appeared.
        let throttles = try FileManager.default.contentsOfDirectory(atPath: s.store + "/accounts").filter { $0.hasSuffix(".throttle") }
        XCTAssertEqual(throttles, [])
        // A secret other users can read is refused with a line that says so, until fixed.
        XCTAssertEqual(chmod(secret, 0o644), 0)
        let (open, mp4) = mountAlice(s)
        assertFailure(open, 1, "is open to other users (mode 644); run 'chmod 600 \(secret)'")
        XCTAssertFalse(Harness.isMounted(mp4))
        XCTAssertEqual(chmod(secret, 0o600), 0)
        // Back on the right device it still works.
        let (again, mp3) = mountAlice(s)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(try String(contentsOfFile: mp3 + "/f", encoding: .utf8), "bound")
        s.unmount(mp3)
    }
}
