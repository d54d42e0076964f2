import Foundation
import XCTest

/// `lock` and `unlock` repeated, as a user or a script does (issue 38, item 12): a lock of a
/// vault already locked or not mounted has reached what was asked (exit 0, a note); `unlock`
/// of an unmounted vault says to mount it. After `lock` (which unmounts), `unlock` said only
/// "no vault is mounted" (exit 18) and a second `lock` failed the same way.
final class EverydayLockTests: XCTestCase {
    func testLockTwiceSucceedsAndUnlockOfAnUnmountedVaultSaysToMountIt() {
        let sb = Sandbox("pv-every-lock")
        sb.initStore()
        let mp = sb.mount()
        let first = sb.pv(["lock", mp])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(first.stdout, "locked\n")
        XCTAssertTrue(Harness.waitUntil(30) { !Harness.isMounted(mp) }, "the lock did not unmount")

        let second = sb.pv(["lock", mp])
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(second.stdout, "no vault is mounted at \(mp): nothing to lock\n")
        XCTAssertEqual(second.stderr, "")

        let unlock = sb.pv(["unlock", mp, "--user", "alice", "--passfile", sb.passfile])
        XCTAssertEqual(unlock.status, 18, unlock.stderr)
        XCTAssertEqual(unlock.stderr, "photovault: no vault is mounted at \(mp) (a lock unmounts it): "
                       + "mount it with 'photovault mount \(mp)'\n")
    }

    func testWithOnLockStayASecondLockSaysAlreadyLockedAndUnlockOfAnUnlockedVaultAsksNothing() {
        let sb = Sandbox("pv-every-stay")
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        // No password source and no terminal: it used to fail for want of a password (27),
        // and with one, after deriving the key, with "the mount is not locked" (1).
        let notLocked = sb.pv(["unlock", mp, "--user", "alice"])
        XCTAssertEqual(notLocked.status, 0, notLocked.stderr)
        XCTAssertEqual(notLocked.stdout, "the vault at \(mp) is not locked\n")

        XCTAssertEqual(sb.pv(["lock", mp]).stdout, "locked\n")
        let again = sb.pv(["lock", mp])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(again.stdout, "already locked\n")
        XCTAssertEqual(MountProbe.state(sb, mp), "locked")

        let unlock = sb.pv(["unlock", mp, "--user", "alice", "--passfile", sb.passfile])
        XCTAssertEqual(unlock.status, 0, unlock.stderr)
        XCTAssertEqual(unlock.stdout, "unlocked\n")
        sb.unmount(mp)
    }
}
