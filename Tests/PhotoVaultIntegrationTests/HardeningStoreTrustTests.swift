import Foundation
import XCTest

/// Issue 35, item 2: a store, or a directory above it, that another user owns or others can
/// write is refused with one line saying what to fix (exit 33), as ssh's StrictModes refuses
/// such a ~/.ssh. `init`, `user add` and `mount` used to take a store path another user had
/// made first (mode 0777, theirs) as it was.
final class HardeningStoreTrustTests: XCTestCase {
    static let nobody: uid_t = 65534

    private func assertRefused(_ r: Harness.Result, _ tail: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(r.status, 33, r.stderr, file: file, line: line)
        XCTAssertTrue(r.stderr.hasPrefix("photovault: refusing the store: ") && r.stderr.hasSuffix(tail + "\n"),
                      r.stderr, file: file, line: line)
        XCTAssertEqual(r.stderr.filter { $0 == "\n" }.count, 1, r.stderr, file: file, line: line)
    }

    func testAStorePathAnotherUserMadeIsRefused() {
        XCTAssertEqual(getuid(), 0, "this test needs root to give a directory to another user")
        let sb = Sandbox("pv-hard-trust-init")
        XCTAssertEqual(mkdir(sb.store, 0o777), 0)
        XCTAssertEqual(chmod(sb.store, 0o777), 0)
        XCTAssertEqual(chown(sb.store, Self.nobody, Self.nobody), 0)
        let r = sb.pv(["init", "--store", sb.store])
        assertRefused(r, "the store directory \(sb.store) belongs to uid 65534, not to you (uid 0): another user could change "
                      + "the store; use a store path whose directories are yours (or, as root, 'chown 0 \(sb.store)')")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: sb.store), [], "init made something there")
        // Given back to its user but still writable by everyone: the mode is what is wrong now.
        XCTAssertEqual(chown(sb.store, 0, 0), 0)
        assertRefused(sb.pv(["init", "--store", sb.store]),
                      "the store directory \(sb.store) can be written by every user (mode 777): another user could change "
                      + "the store; run 'chmod go-w \(sb.store)'")
        XCTAssertEqual(chmod(sb.store, 0o700), 0)
        XCTAssertEqual(sb.pv(["init", "--store", sb.store]).status, 0)
    }

    func testAnExistingStoreLoosenedLaterIsRefusedByEveryCommand() {
        let sb = Sandbox("pv-hard-trust-use")
        sb.initStore()
        let common = ["--store", sb.store]
        let cases: [(String, mode_t, String)] = [
            (sb.store, 0o777, "every user (mode 777)"),
            (sb.store + "/accounts", 0o770, "its group (mode 770)"),
            (sb.store + "/users", 0o702, "every user (mode 702)"),
        ]
        for (dir, mode, who) in cases {
            XCTAssertEqual(chmod(dir, mode), 0)
            let tail = "the store directory \(dir) can be written by \(who): another user could change the store; "
                + "run 'chmod go-w \(dir)'"
            assertRefused(sb.pv(["user", "list"] + common), tail)
            assertRefused(sb.pv(["user", "add", "bob", "--passfile", sb.passfile] + common), tail)
            let mp = sb.plainDir("mnt")
            sb.mounts.append(mp)   // unmounted at the end should it mount after all
            assertRefused(sb.pv(["mount", mp, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"] + common), tail)
            XCTAssertFalse(Harness.isMounted(mp))
            XCTAssertEqual(chmod(dir, 0o700), 0)
        }
        XCTAssertEqual(sb.pv(["user", "list"] + common).status, 0)
    }

    func testADirectoryAboveTheStoreMustBeYoursOrRootsAndNotWritableByOthersUnlessSticky() {
        XCTAssertEqual(getuid(), 0, "this test needs root to give a directory to another user")
        let sb = Sandbox("pv-hard-trust-above")
        let above = sb.root + "/shared"
        XCTAssertEqual(mkdir(above, 0o755), 0)
        let store = above + "/store"
        XCTAssertEqual(sb.pv(["init", "--store", store]).status, 0)
        // Writable by everyone: another user could rename the store away and put their own there.
        XCTAssertEqual(chmod(above, 0o777), 0)
        assertRefused(sb.pv(["user", "list", "--store", store]),
                      "\(above), a directory above the store, can be written by every user (mode 777): another user could "
                      + "change the store; run 'chmod go-w \(above)'")
        // Sticky, as /tmp: others can add entries there but not move the store.
        XCTAssertEqual(chmod(above, 0o1777), 0)
        XCTAssertEqual(sb.pv(["user", "list", "--store", store]).status, 0)
        // Another user's, even sticky and not writable by others.
        XCTAssertEqual(chmod(above, 0o755), 0)
        XCTAssertEqual(chown(above, Self.nobody, Self.nobody), 0)
        assertRefused(sb.pv(["user", "list", "--store", store]),
                      "\(above), a directory above the store, belongs to uid 65534, not to you (uid 0): another user could "
                      + "change the store; use a store path whose directories are yours or root's (or, as root, 'chown 0 \(above)')")
        // Reached through a symlink, the store is judged where it is.
        XCTAssertEqual(chown(above, 0, 0), 0)
        XCTAssertEqual(symlink(store, sb.root + "/link"), 0)
        XCTAssertEqual(chmod(above, 0o777), 0)
        XCTAssertEqual(sb.pv(["user", "list", "--store", sb.root + "/link"]).status, 33)
        XCTAssertEqual(chmod(above, 0o755), 0)
        XCTAssertEqual(sb.pv(["user", "list", "--store", sb.root + "/link"]).status, 0)
    }

    /// On an exFAT drive through exfat-fuse (as issue 39 uses them) every mode is the
    /// drive's, set by its mount options, and enforced (exfat-fuse mounts with allow_other
    /// and default_permissions): 777 with umask=0 is refused with the mount option to use;
    /// with umask=077 the store works.
    func testAStoreOnAnExfatDriveIsJudgedByTheModesItWasMountedWith() throws {
        XCTAssertEqual(getuid(), 0, "mounting a drive image needs root")
        let sb = Sandbox("pv-hard-trust-exfat")
        let img = sb.root + "/exfat.img", drive = sb.root + "/drive"
        XCTAssertEqual(mkdir(drive, 0o700), 0)
        let q = Sandbox.quote
        sb.ok("truncate -s 16M \(q(img)) && mkfs.exfat \(q(img)) >/dev/null")
        let loop = sb.ok("losetup -f --show \(q(img))").trimmingCharacters(in: .whitespacesAndNewlines)
        defer { _ = Harness.run(["umount", "-l", drive]); _ = Harness.run(["losetup", "-d", loop]) }
        // A store made elsewhere and copied onto the drive (init itself needs hard links, which
        // exFAT lacks: issue 39).
        sb.initStore()
        let store = drive + "/store"
        sb.ok("mount.exfat-fuse -o umask=0 \(q(loop)) \(q(drive)) >/dev/null && cp -r \(q(sb.store)) \(q(store))")
        assertRefused(sb.pv(["user", "list", "--store", store]),
                      "the store directory \(store) can be written by every user (mode 777): another user could change the "
                      + "store; mount that drive with umask=077 (its modes are set for the whole drive when it is mounted), "
                      + "or run 'chmod go-w \(store)' where the drive keeps modes")
        sb.ok("umount \(q(drive)) && mount.exfat-fuse -o umask=077 \(q(loop)) \(q(drive)) >/dev/null")
        let list = sb.pv(["user", "list", "--store", store])
        XCTAssertEqual(list.status, 0, list.stderr)
    }
}
