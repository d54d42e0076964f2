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
}
