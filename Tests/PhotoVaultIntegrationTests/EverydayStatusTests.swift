import Foundation
import XCTest

/// `status` from another session (issue 38, item 11): it lists every PhotoVault mount of the
/// caller, with the store each comes from, not only those in this session's runtime registry.
/// A vault mounted with another XDG_RUNTIME_DIR (cron, sudo, another login) was missed:
/// "no vault mounted".
final class EverydayStatusTests: XCTestCase {
    func testStatusFromAnotherSessionListsTheMountWithItsStore() throws {
        let sb = Sandbox("pv-every-status")
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        let otherSession = sb.root + "/other-runtime"
        try FileManager.default.createDirectory(atPath: otherSession, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        var env = sb.env
        env["XDG_RUNTIME_DIR"] = otherSession
        let pid = try XCTUnwrap(MountProbe.daemonPID(sb, mp))

        let here = sb.pv(["status"])
        XCTAssertTrue(here.stdout.contains("\(mp)\tpid=\(pid)\tstore=\(sb.store)\tstate=unlocked "), here.stdout)
        let there = Harness.pv(["status"], env: env)
        XCTAssertEqual(there.status, 0, there.stderr)
        let line = there.stdout.split(separator: "\n").first { $0.hasPrefix(mp + "\t") }.map(String.init)
        XCTAssertNotNil(line, there.stdout)
        XCTAssertTrue(line?.hasPrefix("\(mp)\tpid=\(pid)\tstore=\(sb.store)\tstate=unlocked ") == true, there.stdout)
        XCTAssertTrue(line?.hasSuffix(" (mounted from another session)") == true, there.stdout)

        // Its state as it changes: locked, seen from the other session too.
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        let locked = Harness.pv(["status"], env: env)
        XCTAssertTrue(locked.stdout.contains("\(mp)\tpid=\(pid)\tstore=\(sb.store)\tstate=locked "), locked.stdout)
        sb.unmount(mp)
        XCTAssertFalse(Harness.pv(["status"], env: env).stdout.contains(mp + "\t"))
    }

    /// With more mounts than fit in 4 KB of /proc/self/mountinfo (here 80 tmpfs mounts with
    /// long paths, in a mount namespace of the test's own), the newest vault is still seen:
    /// `String(contentsOfFile:)` read only the first 4 KB of it, so `unmount` said "no vault
    /// is mounted" (exit 18) and `status` showed nothing of a mount made from another session.
    func testAMountPastTheFirst4KBOfMountinfoIsSeen() throws {
        let sb = Sandbox("pv-every-manymounts")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let pad = sb.plainDir(String(repeating: "p", count: 120))
        let pv = { (args: [String]) in ([Harness.binary] + args).map(Sandbox.quote).joined(separator: " ") }
        let script = """
        set -e
        for i in $(seq 80); do mkdir -p \(Sandbox.quote(pad))/$i; mount -t tmpfs -o size=64k tmpfs \(Sandbox.quote(pad))/$i; done
        test "$(wc -c < /proc/self/mountinfo)" -gt 12000
        \(pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"]))
        XDG_RUNTIME_DIR=\(Sandbox.quote(sb.root))/elsewhere \(pv(["status"])) | grep -c "^\(mp)	pid=.*(mounted from another session)$"
        \(pv(["unmount", mp])) && echo unmounted
        """
        try FileManager.default.createDirectory(atPath: sb.root + "/elsewhere", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let r = Harness.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script], env: sb.env, timeout: 120)
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout, "Mounted the vault of alice at \(mp)\n1\nunmounted\n", r.stderr)
    }
}
