import Foundation
import XCTest

/// One account's vault is mounted at most once at a time (docs/OFFLINE.md): two daemons
/// writing one tree would corrupt it. The registry catches a second mount from the same
/// session; the daemons' exclusive mount lock catches one from another session, which the
/// registry cannot see.
final class MountExclusivityTests: XCTestCase {
    typealias T = OfflineCommandTests

    /// `mount` of alice at `name`, with another runtime directory when `runtime` is given.
    func mount(_ sb: Sandbox, _ user: String = "alice", at name: String, runtime: String? = nil) -> (Harness.Result, String) {
        let mp = sb.plainDir(name)
        var env = sb.env
        if let r = runtime { env["XDG_RUNTIME_DIR"] = r }
        let r = Harness.pv(["mount", mp, "--store", sb.store, "--user", user, "--passfile", sb.passfile, "--no-dbus"], env: env)
        if r.status == 0 { sb.mounts.append(mp) }
        return (r, mp)
    }

    func testASecondMountOfTheSameVaultFailsAndAnotherUsersMountDoesNot() {
        let sb = Sandbox("pv-onemount")
        sb.initStore(users: ["alice", "bob"])
        let first = sb.mount()
        sb.ok("echo kept > \(Sandbox.quote(first))/a.txt")
        let already = "photovault: this vault is already mounted at \(first): unmount it there first\n"

        // Another session (its own runtime directory, so no registry entry to see).
        let other = sb.plainDir("other-runtime")
        let (elsewhere, mp2) = mount(sb, at: "mnt-second", runtime: other)
        XCTAssertEqual(elsewhere.status, 16, elsewhere.stderr)
        XCTAssertEqual(elsewhere.stderr, already)
        XCTAssertFalse(Harness.isMounted(mp2))
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp2))"), "", "the refused mount left something behind")
        // The same session at a second mountpoint.
        let (again, _) = mount(sb, at: "mnt-third")
        XCTAssertEqual(again.status, 16, again.stderr)
        XCTAssertEqual(again.stderr, already)
        // The first mount is untouched and still writable.
        sb.ok("echo more >> \(Sandbox.quote(first))/a.txt")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(first))/a.txt"), "kept\nmore\n")
        // Another account of the same store has its own tree and lock.
        let bob = sb.mount("bob")
        sb.ok("echo bob > \(Sandbox.quote(bob))/b.txt")
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(bob))"), "b.txt\n")

        // Once unmounted, the other session mounts it, and the lock file is nowhere to see.
        sb.unmount(first)
        let (later, _) = mount(sb, at: "mnt-second", runtime: other)
        XCTAssertEqual(later.status, 0, later.stderr)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(mp2))/a.txt"), "kept\nmore\n")
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp2))"), "a.txt\n")
        var otherEnv = sb.env
        otherEnv["XDG_RUNTIME_DIR"] = other
        XCTAssertEqual(Harness.pv(["unmount", mp2], env: otherEnv).status, 0)
        sb.unmount(bob)
        let fsck = T.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
    }

    /// `mount` of a vault whose daemon is still going away after `lock` (`--on-lock
    /// unmount`): during the lock grace a file open for writing may finish; after it the mount
    /// is detached and the daemon ends, the file cut off (it used to wait for that file to be
    /// closed; issue 35). `mount` used to say "a vault is already mounted" (then "this vault is
    /// already mounted at ..."), which `unmount` contradicted. It waits (up to 5 s) for the
    /// daemon to end and mounts; if the daemon is still there then (a long grace), it says that
    /// the vault is closing and what it waits for.
    func testAMountWhileTheLastDaemonIsClosingWaitsForItOrSaysSo() throws {
        let sb = Sandbox("pv-closing")
        sb.initStore()
        for (grace, waits) in [("1", true), ("120", false)] {
            let mp = sb.mount(at: "mnt", extra: ["--lock-grace", grace])
            try? FileManager.default.createDirectory(atPath: mp + "/open", withIntermediateDirectories: false)
            XCTAssertEqual(ClassAttributeTests.setClass(mp + "/open", "complete-unless-open").status, 0)
            let pid = try XCTUnwrap(MountProbe.daemonPID(sb, mp))
            // A writer that keeps its file open for 120 s: past the short grace, within the long one.
            let writer = try BackgroundProcess(["/bin/bash", "-c", "exec 5>\(Sandbox.quote(mp + "/open/f\(grace).jpg")); echo open; exec sleep 120"],
                                               output: sb.root + "/writer\(grace).log")
            defer { writer.stop() }
            XCTAssertTrue(Harness.waitUntil(10) { writer.output.contains("open") }, writer.output)
            let lock = sb.pv(["lock", mp])
            XCTAssertEqual(lock.status, 0, lock.stderr)
            let (again, _) = mount(sb, at: "mnt")
            if waits {
                XCTAssertEqual(again.status, 0, again.stderr)
                XCTAssertEqual(again.stderr, "")
                XCTAssertTrue(MountProbe.hasEnded(pid), "the old daemon must be gone")
                XCTAssertNotEqual(MountProbe.daemonPID(sb, mp), pid)
                XCTAssertTrue(writer.isRunning, "the daemon must not wait for the file to be closed")
            } else {
                XCTAssertEqual(again.status, 16, again.stderr)
                XCTAssertEqual(again.stderr, "photovault: the vault at \(mp) is still closing after a lock (photovault process \(pid) "
                               + "waits for the files open there to be closed): try again once 'photovault status' no longer lists it\n")
                XCTAssertFalse(MountProbe.hasEnded(pid))
                writer.stop()
                XCTAssertTrue(Harness.waitUntil(10) { MountProbe.hasEnded(pid) }, "the daemon must end once the file is closed")
                _ = sb.mount(at: "mnt")
            }
            sb.unmount(mp)
            sb.mounts.removeAll { $0 == mp }
        }
    }

    /// Two `mount` commands at one mountpoint at once (here alice's and bob's): alice's daemon
    /// is held 3 s inside mount(2) by strace's fault injection, after it found the mountpoint
    /// free; bob's mount comes meanwhile. Both used to mount, bob's first and alice's on top of
    /// it, and `status` and `lock` then reached bob's hidden mount, not the visible one. Now
    /// bob's daemon waits for alice's mount, finds it and refuses (exit 16); one mount stays.
    func testTwoMountsAtOneMountpointAtOnceDoNotStack() throws {
        let sb = Sandbox("pv-stack")
        sb.initStore(users: ["alice", "bob"])
        let mp = sb.plainDir("mnt")
        sb.mounts += [mp, mp]
        let first = try BackgroundProcess(["/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=mount",
                                           "-e", "inject=mount:delay_enter=3000000", Harness.binary, "mount", mp,
                                           "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"],
                                          env: sb.env, output: sb.root + "/first.log")
        // Alice's daemon is inside mount(2) (165 on x86_64) once /proc shows it there.
        let inMount = Harness.waitUntil(30) {
            let d = Harness.run(["pgrep", "-f", "[_]_mount-daemon store=.* mountpoint=\(mp) "], timeout: 10).stdout
            guard let pid = d.split(separator: "\n").first,
                  let sc = try? String(contentsOfFile: "/proc/\(pid)/syscall", encoding: .utf8) else { return false }
            return sc.hasPrefix("165 ")
        }
        XCTAssertTrue(inMount, first.output)
        XCTAssertFalse(Harness.isMounted(mp))
        let (second, _) = mount(sb, "bob", at: "mnt")
        XCTAssertEqual(second.status, 16, second.stderr)
        XCTAssertEqual(second.stderr, "photovault: a vault is already mounted at \(mp)\n")
        // (strace itself runs until the daemon it still traces ends, at the unmount.)
        XCTAssertTrue(Harness.waitUntil(30) { first.output.contains("\n") }, first.output)
        XCTAssertEqual(first.output, "Mounted the vault of alice at \(mp)\n")
        let mounts = (try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)).split(separator: "\n")
            .filter { $0.split(separator: " ")[4] == mp }
        XCTAssertEqual(mounts.count, 1, mounts.joined(separator: "\n"))
        sb.ok("echo alice > \(Sandbox.quote(mp))/a.txt")
        sb.unmount(mp)
        XCTAssertEqual(first.wait(30), 0, first.output)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mp), [])
    }
}
