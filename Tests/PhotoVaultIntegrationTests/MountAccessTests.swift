import Foundation
import XCTest

/// Who sees what: two vault users on one store, and other OS users at the mountpoint.
final class MountAccessTests: XCTestCase {
    func testTwoUsersMountedAtOnceSeeOnlyTheirOwnFiles() {
        let sb = Sandbox("pv-users")
        sb.initStore(users: ["alice", "bob"])
        let a = sb.mount("alice"), b = sb.mount("bob")
        let qa = Sandbox.quote(a), qb = Sandbox.quote(b)
        sb.ok("""
        set -e
        mkdir \(qa)/Alice-Album \(qb)/Bob-Album
        printf 'ALICE-PRIVATE-PHOTO\\n' > \(qa)/Alice-Album/alice-photo.jpg
        printf 'BOB-PRIVATE-PHOTO\\n' > \(qb)/Bob-Album/bob-photo.jpg
        # The same name in both: independent files.
        printf 'ALICE-SAME-NAME\\n' > \(qa)/same.txt
        printf 'BOB-SAME-NAME\\n' > \(qb)/same.txt
        """)
        XCTAssertEqual(sb.ok("cd \(qa) && find . | LC_ALL=C sort"), ".\n./Alice-Album\n./Alice-Album/alice-photo.jpg\n./same.txt\n")
        XCTAssertEqual(sb.ok("cd \(qb) && find . | LC_ALL=C sort"), ".\n./Bob-Album\n./Bob-Album/bob-photo.jpg\n./same.txt\n")

        // Concurrent writers, one per vault: neither disturbs the other. The blob's expected
        // digest is taken from the bytes written (tee), not read back through the mount, which
        // would agree with whatever the mount stored. Each writer's status is checked.
        sb.ok("""
        set -e -o pipefail
        w() { for i in $(seq 1 300); do printf '%s-%04d\\n' $2 $i >> $1/stream.txt; done; head -c 2000000 /dev/urandom | tee $1/blob | sha256sum | cut -d' ' -f1 > $1.sum.out; }
        w \(qa) ALICE-STREAM & pa=$!
        w \(qb) BOB-STREAM & pb=$!
        wait $pa; wait $pb
        """)
        for (mp, who) in [(a, "ALICE"), (b, "BOB")] {
            let q = Sandbox.quote(mp)
            XCTAssertEqual(sb.ok("cat \(q)/same.txt"), "\(who)-SAME-NAME\n")
            let stream = sb.ok("cat \(q)/stream.txt")
            XCTAssertEqual(stream, (1...300).map { String(format: "\(who)-STREAM-%04d\n", $0) }.joined())
            XCTAssertEqual(sb.ok("sha256sum \(q)/blob | cut -d' ' -f1"), sb.ok("cat \(Sandbox.quote(mp + ".sum.out"))"))
        }
        // Remove in one vault: the other is untouched.
        sb.ok("rm \(qa)/same.txt")
        XCTAssertEqual(sb.ok("cat \(qb)/same.txt"), "BOB-SAME-NAME\n")
        sb.unmount(a)
        sb.unmount(b)
        // Needles of 5+ bytes only: a 3-byte one ("bob") turns up in megabytes of ciphertext by chance.
        sb.assertNoPlaintext(["ALICE-", "BOB-PRIVATE", "BOB-SAME", "BOB-STREAM", "Alice-Album", "Bob-Album", "alice",
                              "same.txt", "stream.txt"])
    }

    func testReadOnlyMountRefusesEveryChange() {
        let sb = Sandbox("pv-ro")
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/Dir && printf 'RO-CONTENT\\n' > \(q)/Dir/f.jpg && setfattr -n user.k -v RO-XATTR \(q)/Dir/f.jpg")
        mp = sb.remount(mp, extra: ["--read-only"])
        XCTAssertTrue(sb.ok("grep ' \(mp) ' /proc/self/mounts").contains(" ro,"))
        XCTAssertEqual(sb.ok("cat \(q)/Dir/f.jpg"), "RO-CONTENT\n")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.k \(q)/Dir/f.jpg"), "RO-XATTR")
        for cmd in ["echo x >> \(q)/Dir/f.jpg", "touch \(q)/new.jpg", "mkdir \(q)/New", "rm \(q)/Dir/f.jpg",
                    "mv \(q)/Dir/f.jpg \(q)/g.jpg", "truncate -s 0 \(q)/Dir/f.jpg", "chmod 600 \(q)/Dir/f.jpg",
                    "setfattr -n user.k -v other \(q)/Dir/f.jpg", "ln -s x \(q)/link"] {
            let r = sb.run(cmd)
            XCTAssertNotEqual(r.status, 0, "\(cmd) succeeded on a read-only mount")
            XCTAssertTrue(r.stderr.contains("Read-only file system"), "\(cmd): \(r.stderr)")
        }
        XCTAssertEqual(sb.ok("cat \(q)/Dir/f.jpg && stat -c %a \(q)/Dir/f.jpg && ls -A \(q)"), "RO-CONTENT\n644\nDir\n")
        sb.unmount(mp)
    }

    static func ensureTestUser() -> Bool {
        if Harness.run(["id", "pvtestuser"]).status == 0 { return true }
        return Harness.run(["useradd", "-M", "-s", "/bin/bash", "pvtestuser"]).status == 0
    }

    /// Another OS user's `unmount`, `lock` and `unlock` of this mount say whose it is and
    /// change nothing. `unmount` used to pass on fusermount3's "entry for ... not found in
    /// /etc/mtab", `lock` and `unlock` said "no vault is mounted" (18) about a live mount.
    func testAnotherOSUsersUnmountLockAndUnlockSayWhoseMountItIs() {
        XCTAssertTrue(Self.ensureTestUser(), "useradd pvtestuser failed")
        let sb = Sandbox("pv-otheruid")
        chmod(sb.root, 0o755)
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        chmod(sb.passfile, 0o644)
        let pv = Sandbox.quote(Harness.binary)
        for args in ["unmount \(Sandbox.quote(mp))", "lock \(Sandbox.quote(mp))",
                     "unlock \(Sandbox.quote(mp)) --user alice --passfile \(Sandbox.quote(sb.passfile))"] {
            let r = sb.run("runuser -u pvtestuser -- env -u XDG_RUNTIME_DIR \(pv) \(args)")
            assertFailure(r, 1, "the vault at \(mp) is mounted by another user (uid 0): only they can unmount, lock or unlock it", args)
        }
        XCTAssertTrue(Harness.isMounted(mp))
        XCTAssertEqual(MountProbe.state(sb, mp), "unlocked")
        sb.unmount(mp)
    }

    /// Without --allow-other another OS user cannot even enter the mountpoint; with it, the
    /// kernel enforces the file modes (default_permissions).
    func testOtherOSUserRefusedUnlessAllowOtherThenModesEnforced() throws {
        XCTAssertEqual(getuid(), 0, "this test needs root to create and become another OS user")
        XCTAssertTrue(Self.ensureTestUser(), "useradd pvtestuser failed")
        let sb = Sandbox("pv-other")
        chmod(sb.root, 0o755)   // the other user must reach the mountpoint's parent
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("""
        set -e
        chmod 0755 \(q)
        printf 'OTHER-PUBLIC\\n' > \(q)/public.jpg && chmod 0644 \(q)/public.jpg
        printf 'OTHER-PRIVATE\\n' > \(q)/private.jpg && chmod 0600 \(q)/private.jpg
        """)
        // The owner (root here) is fine; the other user is refused at the door.
        XCTAssertEqual(sb.ok("cat \(q)/public.jpg"), "OTHER-PUBLIC\n")
        for cmd in ["ls \(q)", "cat \(q)/public.jpg", "stat \(q)/public.jpg"] {
            let r = sb.run("runuser -u pvtestuser -- \(cmd)")
            XCTAssertNotEqual(r.status, 0, "\(cmd) succeeded for another user")
            XCTAssertTrue(r.stderr.contains("Permission denied"), "\(cmd): \(r.stderr)")
        }

        mp = sb.remount(mp, extra: ["--allow-other"])
        XCTAssertTrue(sb.ok("grep ' \(mp) ' /proc/self/mounts").contains("allow_other"))
        XCTAssertEqual(sb.ok("runuser -u pvtestuser -- cat \(q)/public.jpg"), "OTHER-PUBLIC\n")
        XCTAssertEqual(sb.ok("runuser -u pvtestuser -- ls \(q) | LC_ALL=C sort"), "private.jpg\npublic.jpg\n")
        let denied = sb.run("runuser -u pvtestuser -- cat \(q)/private.jpg")
        XCTAssertNotEqual(denied.status, 0)
        XCTAssertTrue(denied.stderr.contains("Permission denied"), denied.stderr)
        // Writes are refused too: the root directory is 0755 root-owned, the file 0644.
        let write = sb.run("runuser -u pvtestuser -- bash -c 'echo x >> \(q)/public.jpg'")
        XCTAssertNotEqual(write.status, 0)
        XCTAssertTrue(write.stderr.contains("Permission denied"), write.stderr)
        let create = sb.run("runuser -u pvtestuser -- touch \(q)/intruder.jpg")
        XCTAssertNotEqual(create.status, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/intruder.jpg"))
        // Once the owner opens the mode, the other user can read it.
        sb.ok("chmod 0644 \(q)/private.jpg")
        XCTAssertEqual(sb.ok("runuser -u pvtestuser -- cat \(q)/private.jpg"), "OTHER-PRIVATE\n")
        // In a directory open to all, what the other user makes is theirs (the daemon runs as
        // root), so they can go on working in it; a setgid directory passes its group on.
        sb.ok("mkdir -m 1777 \(q)/pub && mkdir -m 2777 \(q)/grp && chgrp 0 \(q)/grp")
        sb.ok("runuser -u pvtestuser -- bash -c 'set -e; cd \(q)/pub; mkdir d; echo made > d/f.jpg; ln -s f.jpg d/l; "
              + "mkfifo d/p; mkdir d/sub; touch d/sub/deeper; cd ../grp; mkdir g; touch g.jpg'")
        let owners = sb.ok("cd \(q) && stat -c '%n %U %G' pub/d pub/d/f.jpg pub/d/l pub/d/p pub/d/sub/deeper grp/g grp/g.jpg")
        let group = sb.ok("id -gn pvtestuser").trimmingCharacters(in: .whitespacesAndNewlines)
        let root = sb.ok("id -gn root").trimmingCharacters(in: .whitespacesAndNewlines)
        let mine = ["pub/d", "pub/d/f.jpg", "pub/d/l", "pub/d/p", "pub/d/sub/deeper"].map { "\($0) pvtestuser \(group)\n" }
        XCTAssertEqual(owners, (mine + ["grp/g pvtestuser \(root)\n", "grp/g.jpg pvtestuser \(root)\n"]).joined())
        XCTAssertEqual(sb.ok("runuser -u pvtestuser -- cat \(q)/pub/d/l"), "made\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["OTHER-PUBLIC", "OTHER-PRIVATE", "public.jpg", "private.jpg"])
    }

    /// Without permission override (any non-root user's daemon; here root without
    /// CAP_DAC_OVERRIDE), every open is checked as opening the file would be, although opens
    /// of one file share a descriptor: a write-open of a file made read-only while a reader
    /// holds it is refused, and one of a file made writable after a reader opened it works.
    func testWriteOpensAreCheckedEachTimeWithoutPermissionOverride() throws {
        let sb = Sandbox("pv-perm-shared")
        sb.initStore()
        let noDAC = "setpriv --bounding-set -dac_override,-dac_read_search"
        let mp = sb.mountWrapped(noDAC, at: "mnt-nodac")
        let plain = sb.plainDir("plain")
        let script = """
            printf 'x\\n' > f; exec 3<f; chmod 444 f; if (echo y >> f) 2>/dev/null; then echo f-written; else echo f-refused; fi; exec 3<&-
            printf 'x\\n' > g; chmod 444 g; exec 4<g; chmod 644 g; if (echo y >> g) 2>/dev/null; then echo g-written; else echo g-refused; fi
            cat f g <&4; exec 4<&-
            """
        let scriptPath = sb.root + "/shared-perm.sh"
        try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        let expected = "f-refused\ng-written\nx\nx\ny\n"
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(plain)) && \(noDAC) bash \(Sandbox.quote(scriptPath))"), expected, "ext4 itself")
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp)) && \(noDAC) bash \(Sandbox.quote(scriptPath))"), expected)
        sb.unmount(mp)
    }

    /// `chmod 000` on the mount's root is stored on the tree's root directory (the mount's
    /// root is that directory). An owner whom modes hold back (here root without
    /// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, as any ordinary user) could never mount
    /// again ("open …/.pvmount: Permission denied"), and the directory's name in the store is
    /// a hash. Now such a mount gives the owner read and search back (u+rx, nothing more) and
    /// says so; a mount the mode does not hold back (root's) leaves it alone.
    func testAMountRootChmoddedTo000DoesNotShutItsOwnerOut() {
        let sb = Sandbox("pv-root-mode")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("echo kept > \(q)/a.txt && chmod 000 \(q)")
        sb.unmount(mp)
        let args = ["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"]
        var r = sb.pv(args)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr, "", "root, which modes do not hold back")
        XCTAssertEqual(sb.ok("stat -c %a \(q)"), "0\n")
        sb.unmount(mp)
        let noDAC = "setpriv --bounding-set -dac_override,-dac_read_search --inh-caps -dac_override,-dac_read_search --"
        let mountWithoutDAC = { sb.run("\(noDAC) " + ([Harness.binary] + args).map(Sandbox.quote).joined(separator: " ")) }
        r = mountWithoutDAC()
        sb.mounts.append(mp)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr, "photovault: warning: the vault's top folder had mode 000 (a chmod through an earlier mount), "
                       + "which shut you out of it; it now has 500\n")
        XCTAssertEqual(sb.ok("stat -c %a \(q) && \(noDAC) cat \(q)/a.txt"), "500\nkept\n")
        sb.ok("chmod 750 \(q)")
        sb.unmount(mp)
        r = mountWithoutDAC()
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr, "", "a mode that lets the owner in is left alone")
        XCTAssertEqual(sb.ok("stat -c %a \(q)"), "750\n")
        sb.unmount(mp)
    }
}
