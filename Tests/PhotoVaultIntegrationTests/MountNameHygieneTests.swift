import Foundation
import XCTest

/// What a failed or interrupted name operation leaves in the store: removing a directory
/// never strands it without its `.pvdir`, and a refused create leaves no long-name companion
/// behind (both would make `fsck` report damage the user never caused). A listing that
/// cannot be completed fails instead of dropping names.
final class MountNameHygieneTests: XCTestCase {
    /// The one ciphertext directory of the user's tree below its root (the test makes one).
    private func onlySubdirectory(_ sb: Sandbox) -> String {
        sb.ok("find \(Sandbox.quote(sb.store))/users -mindepth 3 -name .pvdir -printf '%h\\n'")
            .trimmingCharacters(in: .newlines)
    }

    func testRmdirClearsCrashLeftoversAndAFailedRmdirKeepsTheDirectoryReadable() {
        let sb = Sandbox("pv-rmdir")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/Album && printf 'HYGIENE-kept\\n' > \(q)/Album/kept.jpg && rm \(q)/Album/kept.jpg")
        let backing = onlySubdirectory(sb)
        XCTAssertFalse(backing.isEmpty)
        let qb = Sandbox.quote(backing)
        addTeardownBlock { _ = Harness.sh("umount \(qb)/.pvtmp-8899aabbccddeeff 2>/dev/null") }
        // What a crash leaves: a temp file, and a temp directory (an interrupted mkdir) that
        // holds a file of its own. A bind mount over the temp directory makes it unremovable.
        sb.ok("""
        set -e
        touch \(qb)/.pvtmp-0011223344556677
        mkdir \(qb)/.pvtmp-8899aabbccddeeff
        printf x > \(qb)/.pvtmp-8899aabbccddeeff/.pvdir
        mkdir \(Sandbox.quote(sb.root))/pin
        mount --bind \(Sandbox.quote(sb.root))/pin \(qb)/.pvtmp-8899aabbccddeeff
        """)
        let refused = sb.run("rmdir \(q)/Album")
        XCTAssertNotEqual(refused.status, 0, "rmdir succeeded over a mount point")
        XCTAssertTrue(FileManager.default.fileExists(atPath: backing + "/.pvdir"), "the failed rmdir removed .pvdir")
        // The directory still works: new names can be made and read in it.
        sb.ok("printf 'HYGIENE-after\\n' > \(q)/Album/after.jpg")
        XCTAssertEqual(sb.ok("ls \(q)/Album && cat \(q)/Album/after.jpg"), "after.jpg\nHYGIENE-after\n")
        sb.ok("rm \(q)/Album/after.jpg && umount \(qb)/.pvtmp-8899aabbccddeeff")
        // Now the leftovers go with the directory.
        sb.ok("rmdir \(q)/Album")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing))
        XCTAssertEqual(sb.ok("ls -A \(q)"), "")
        sb.unmount(mp)
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
        sb.assertNoPlaintext(["HYGIENE-", "Album", "kept.jpg", "after.jpg"])
    }

    func testRefusedCreatesLeaveNoLongNameCompanion() {
        let sb = Sandbox("pv-companion")
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        let q = Sandbox.quote(mp)
        let long = String(repeating: "L", count: 200) + ".jpg"
        sb.ok("mkdir \(q)/Taken && printf 'x' > \(q)/Taken/file.jpg")
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        // While locked, a new file (class complete) cannot be created, through create(2)
        // or mknod(2); both reach the daemon after the long name's companion is written.
        let ql = Sandbox.quote(mp + "/" + long)
        for cmd in ["touch \(ql)",
                    "python3 -c 'import os, stat, sys; os.mknod(sys.argv[1], 0o600 | stat.S_IFREG)' \(ql)-mknod"] {
            let r = sb.run(cmd)
            XCTAssertNotEqual(r.status, 0, "\(cmd.prefix(30)) succeeded while locked")
            XCTAssertTrue(r.stderr.contains("Permission denied"), r.stderr)
        }
        let companions = "find \(Sandbox.quote(sb.store))/users -name '*.name' | wc -l"
        XCTAssertEqual(sb.ok(companions), "0\n", "a refused create left a long-name companion")
        // A directory may be made while locked: its companion stays.
        sb.ok("mkdir \(ql)-dir")
        XCTAssertEqual(sb.ok(companions), "1\n")
        XCTAssertEqual(sb.ok("LC_ALL=C ls \(q)"), "\(long)-dir\nTaken\n")
        sb.unmount(mp)
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
        XCTAssertTrue(fsck.stdout.hasSuffix(": 0 problems\n"), fsck.stdout)
    }

    /// The nodes the kernel remembers share a bounded set of descriptors. Started without
    /// CAP_SYS_RESOURCE and with a hard limit of 300 descriptors, the daemon lists all 400
    /// files of a folder (it used to hold one per file and fail with EMFILE), and raises
    /// its soft limit to the hard one.
    func testListingPastTheDescriptorLimitListsEveryName() throws {
        let sb = Sandbox("pv-emfile")
        sb.initStore()
        let src = sb.plainDir("many")
        sb.ok("cd \(Sandbox.quote(src)) && for i in $(seq 1 400); do printf 'EMFILE-%s' $i > p$i.jpg; done")
        let imp = OfflineCommandTests.pv(sb, ["import", src, "/many"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        let mp = sb.mountWrapped("setpriv --bounding-set -sys_resource --inh-caps -sys_resource -- prlimit --nofile=300:300", at: "mnt-limited")
        let q = Sandbox.quote(mp)
        let pid = MountProbe.daemonPID(sb, mp).map { "\($0)" } ?? "none"
        XCTAssertEqual(sb.ok("grep 'Max open files' /proc/\(pid)/limits | awk '{print $4, $5}'"), "300 300\n")
        let listing = sb.run("ls -l \(q)/many/many")
        let names = listing.stdout.split(separator: "\n").filter { $0.hasSuffix(".jpg") }.count
        XCTAssertEqual(listing.status, 0, listing.stderr)
        XCTAssertEqual(names, 400)
        sb.unmount(mp)
        // With CAP_SYS_RESOURCE the daemon raises its limit to the system's nr_open; without
        // it (this machine's containers drop it even for root), to its hard limit.
        let full = sb.mount()
        let fullPID = MountProbe.daemonPID(sb, full).map { "\($0)" } ?? "none"
        let capEff = sb.ok("awk '/^CapEff/ {print $2}' /proc/self/status").trimmingCharacters(in: .whitespacesAndNewlines)
        let hasSysResource = (UInt64(capEff, radix: 16) ?? 0) & (1 << 24) != 0
        let expected = hasSysResource ? sb.ok("cat /proc/sys/fs/nr_open") : sb.ok("ulimit -Hn")
        let limit = expected.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(sb.ok("grep 'Max open files' /proc/\(fullPID)/limits | awk '{print $4, $5}'"), "\(limit) \(limit)\n")
        XCTAssertEqual(sb.ok("ls -l \(Sandbox.quote(full))/many/many | grep -c 'p[0-9]*\\.jpg$'"), "400\n")
        sb.unmount(full)
        sb.assertNoPlaintext(["EMFILE-"])
    }

    /// rewinddir on an open directory shows it as it is now (POSIX), not the snapshot taken
    /// at opendir: Python's os.listdir(fd) rewinds the same open directory each call.
    func testRewinddirSeesNamesMadeAndRemovedSinceOpendir() {
        let sb = Sandbox("pv-rewind")
        sb.initStore()
        let mp = sb.mount()
        sb.ok("mkdir \(Sandbox.quote(mp))/d && touch \(Sandbox.quote(mp))/d/old.jpg")
        let out = sb.ok("""
            python3 - \(Sandbox.quote(mp + "/d")) <<'PY'
            import os, sys
            d = sys.argv[1]
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            print(sorted(os.listdir(fd)))
            open(d + "/new.jpg", "w").close()
            os.unlink(d + "/old.jpg")
            print(sorted(os.listdir(fd)))
            PY
            """)
        XCTAssertEqual(out, "['old.jpg']\n['new.jpg']\n")
        sb.unmount(mp)
    }

    /// rmdir of an empty read-only (0555) directory succeeds, as on ext4, for a daemon that
    /// cannot override permissions (any non-root user's; here root without CAP_DAC_OVERRIDE):
    /// its internal .pvdir is in the way until the directory is made writable.
    func testRmdirOfAReadOnlyDirectoryWithoutPermissionOverride() throws {
        let sb = Sandbox("pv-rmdir-ro")
        sb.initStore()
        let mp = sb.mountWrapped("setpriv --bounding-set -dac_override,-dac_read_search", at: "mnt-nodac")
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/empty \(q)/full && touch \(q)/full/kept.jpg && chmod 555 \(q)/empty \(q)/full")
        sb.ok("rmdir \(q)/empty")
        let full = sb.run("rmdir \(q)/full")
        XCTAssertNotEqual(full.status, 0)
        XCTAssertTrue(full.stderr.contains("Directory not empty"), full.stderr)
        XCTAssertEqual(sb.ok("stat -c %a \(q)/full && ls \(q)/full && ls \(q)"), "555\nkept.jpg\nfull\n")
        sb.unmount(mp)
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
    }

    /// A listing that races an unlink or rename of long names (their companion files go with
    /// them) logs nothing: the entries are gone, not damaged.
    func testListingWhileLongNamesComeAndGoLogsNoDamage() throws {
        let sb = Sandbox("pv-long-race")
        sb.initStore()
        let fg = try ForegroundMount(sandbox: sb, at: "mnt")
        XCTAssertTrue(fg.waitMounted(), fg.log)
        let script = sb.root + "/churn.py"
        try """
            import os, sys, threading, time
            d = sys.argv[1]
            stop = time.time() + 4
            def churn(k):
                i = 0
                while time.time() < stop:
                    a = os.path.join(d, ("%d-%06d-" % (k, i)) + "n" * 190)
                    open(a, "w").close()
                    if i % 2: os.rename(a, a + "-moved"); os.unlink(a + "-moved")
                    else: os.unlink(a)
                    i += 1
            def lister():
                n = 0
                while time.time() < stop:
                    os.listdir(d); n += 1
                print("listings", n > 100)
            for i in range(40):
                open(os.path.join(d, "%03d-" % i + "k" * 200), "w").close()
            ts = [threading.Thread(target=churn, args=(k,)) for k in range(2)] + [threading.Thread(target=lister)]
            for t in ts: t.start()
            for t in ts: t.join()
            """.write(toFile: script, atomically: true, encoding: .utf8)
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(fg.mountpoint))"), "listings True\n")
        XCTAssertEqual(sb.ok("ls \(Sandbox.quote(fg.mountpoint)) | wc -l"), "40\n")
        fg.stop(sb)
        XCTAssertFalse(fg.log.contains("fails authentication"), fg.log)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0)
    }
}
