import Foundation
import XCTest

/// `photovault unlock` of a mount (`--on-lock stay`) whose daemon has no locked memory left
/// for the keys: the unlock used to end the daemon from inside the key derivation (the
/// trap for keys that find no locked memory), leaving a dead mount ("Transport endpoint is
/// not connected") and printing only "cannot reach the daemon ... connection closed by peer".
final class UnlockLockedMemoryTests: XCTestCase {
    /// Holds open, from one shell, the files given until one fails to open; writes how many
    /// opened to CTL/opened (its errors to CTL/errors) and keeps them open until CTL/close.
    static let holder = """
        ctl=$1; shift; opened=0
        for f in "$@"; do
          if exec {fd}<"$f"; then opened=$((opened+1)); else break; fi
        done 2>"$ctl/errors"
        echo $opened > "$ctl/opened.tmp" && mv "$ctl/opened.tmp" "$ctl/opened"
        while [ ! -e "$ctl/close" ]; do sleep 0.05; done
        """

    /// VmLck of `pid`, in KiB.
    static func lockedKiB(_ pid: pid_t) throws -> Int {
        let status = try LockMemoryTests.readProcFile("/proc/\(pid)/status")
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmLck:") }
        return try XCTUnwrap(line.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") }, status)
    }

    /// The mount comes up (its keys fit), files open until the daemon's locked memory is used
    /// up (XChaCha20-Poly1305: each open file holds just its file key, in the slots the
    /// account's keys also take), the vault is locked, and unlocked: the keys of the unlock
    /// find no locked memory. The unlock fails with one line and exit code 30; the daemon
    /// lives on, locked (`complete` files refuse with EACCES, listing works), with no part of
    /// the key set restored (the `complete` key is nowhere in its memory); once the daemon's
    /// limit is raised the same unlock succeeds.
    func testAnUnlockWhoseKeysFindNoLockedMemoryLeavesTheMountLocked() throws {
        let s = Sandbox("unlock-memlimit")
        let initStore = s.pv(["init", "--store", s.store, "--cipher", "xchacha20poly1305"])
        XCTAssertEqual(initStore.status, 0, initStore.stderr)
        s.addUser("alice")
        let mp = s.mountWrapped("prlimit --memlock=8388608:8388608 setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock --",
                                at: "mnt", extra: ["--on-lock", "stay"])
        let q = Sandbox.quote(mp)
        try Data("complete secret".utf8).write(to: URL(fileURLWithPath: mp + "/c.jpg"))
        try FileManager.default.createDirectory(atPath: mp + "/d", withIntermediateDirectories: false)
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/d", "none").status, 0)   // held open across the lock
        s.ok("for i in $(seq 1 300); do echo \"file $i\" > \(q)/d/f$i; done")
        XCTAssertEqual(ClassAttributeTests.getClass(mp + "/d/f300"), "none")
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let key = try LockMemoryTests.completeClassKey(store: s.store, user: "alice", password: Sandbox.password)

        // No more locked memory than the daemon has now: its slabs' free slots are all there is.
        // (The soft limit only: raising it again, up to the hard one, needs no CAP_SYS_RESOURCE,
        // which the test machine's root lacks.)
        let kib = try Self.lockedKiB(pid)
        XCTAssertGreaterThan(kib, 0)
        s.ok("prlimit --pid \(pid) --memlock=\(kib * 1024):")
        let ctl = s.root + "/holder"
        try FileManager.default.createDirectory(atPath: ctl, withIntermediateDirectories: true)
        let holder = try BackgroundProcess(["/bin/bash", "-c", Self.holder, "holder", ctl] + (1...300).map { "\(mp)/d/f\($0)" },
                                           output: ctl + "/log")
        defer { holder.stop() }
        XCTAssertTrue(Harness.waitUntil(30) { FileManager.default.fileExists(atPath: ctl + "/opened") }, holder.output)
        let opened = Int(((try? String(contentsOfFile: ctl + "/opened", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        let errors = (try? String(contentsOfFile: ctl + "/errors", encoding: .utf8)) ?? ""
        XCTAssertGreaterThan(opened, 0, errors)
        XCTAssertLessThan(opened, 300, "every file opened: the locked memory was not used up, the unlock would prove nothing")
        XCTAssertTrue(errors.contains("Cannot allocate memory"), errors)

        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        let unlock = ["unlock", mp, "--user", "alice", "--passfile", s.passfile]
        let failed = s.pv(unlock)
        XCTAssertEqual(failed.status, 30, failed.stdout + failed.stderr)
        XCTAssertEqual(failed.stderr.split(separator: "\n").map(String.init),
                       ["photovault: the vault stays locked: the mount daemon (pid \(pid)) cannot keep its keys in locked memory "
                        + "(its locked-memory limit, ulimit -l, is \(kib) KiB, all in use): close files open in the vault or raise its limit "
                        + "(prlimit --pid \(pid) --memlock=BYTES; LimitMEMLOCK= in a systemd unit), then run 'photovault unlock' again"])
        XCTAssertEqual(failed.stdout, "")

        // The daemon is alive and the mount answers, locked.
        XCTAssertTrue(MountProbe.isAlive(pid))
        XCTAssertTrue(Harness.isMounted(mp))
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        let listing = s.run("ls \(q)")
        XCTAssertEqual(listing.status, 0, listing.stderr)
        XCTAssertEqual(listing.stdout.split(separator: "\n").map(String.init), ["c.jpg", "d"])
        let locked = s.run("cat \(q)/c.jpg")
        XCTAssertNotEqual(locked.status, 0)
        XCTAssertTrue(locked.stderr.contains("Permission denied"), locked.stderr)
        XCTAssertFalse(locked.stdout.contains("complete secret"))
        XCTAssertEqual(try LockMemoryTests.regionsContaining(pid: pid, key).hits, [],
                       "the failed unlock left the complete class key in the daemon's memory")

        // Raised, the daemon's limit holds the keys: the same unlock succeeds.
        s.ok("prlimit --pid \(pid) --memlock=8388608:")
        let unlocked = s.pv(unlock)
        XCTAssertEqual(unlocked.status, 0, unlocked.stderr)
        XCTAssertEqual(unlocked.stdout, "unlocked\n")
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        XCTAssertEqual(s.run("cat \(q)/c.jpg").stdout, "complete secret")
        XCTAssertFalse(try LockMemoryTests.regionsContaining(pid: pid, key).hits.isEmpty,
                       "the complete key is not in the daemon's memory once unlocked: the search above proves nothing")

        FileManager.default.createFile(atPath: ctl + "/close", contents: nil)
        XCTAssertEqual(holder.wait(10), 0, holder.output)
        s.unmount(mp)
    }
}
