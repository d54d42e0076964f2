import Foundation
import XCTest

/// `mount --allow-other` by a user other than root where /etc/fuse.conf has no
/// `user_allow_other` line (issue 38, item 4): said first, before the password, naming the
/// real fix. It derived the key, started the daemon and then failed with libfuse's "is
/// fusermount3 installed and setuid?". Run as nobody, in a mount namespace of its own whose
/// /etc/fuse.conf is a file of the test's (bound over it there only), as is /dev/fuse.
final class EverydayAllowOtherTests: XCTestCase {
    func testAllowOtherWithoutUserAllowOtherIsRefusedBeforeThePassword() throws {
        let s = Sandbox("pv-every-allowother")
        s.initStore()
        let mp = s.plainDir("mnt")
        XCTAssertEqual(Harness.run(["chown", "-R", "nobody:", s.store, mp]).status, 0)
        let missing = s.root + "/no-such-passfile"
        func mountAsNobody(conf: String) throws -> Harness.Result {
            let file = s.root + "/fuse.conf"
            try conf.write(toFile: file, atomically: true, encoding: .utf8)
            chmod(file, 0o644)
            let command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", Harness.binary, "mount", mp,
                           "--store", s.store, "--user", "alice", "--passfile", missing, "--allow-other", "--no-dbus"]
            // This machine's /dev/fuse may be root's alone (0600): a node of the same device,
            // open to all as on a stock Debian, is bound over it in the namespace too.
            let node = s.root + "/fuse-node"
            let script = "rm -f \(Sandbox.quote(node)) && mknod -m 666 \(Sandbox.quote(node)) c 10 229 "
                + "&& mount --bind \(Sandbox.quote(node)) /dev/fuse && mount --bind \(Sandbox.quote(file)) /etc/fuse.conf && exec "
                + command.map(Sandbox.quote).joined(separator: " ")
            return Harness.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env: s.env, timeout: 60)
        }
        let refused = try mountAsNobody(conf: "# mount_max = 1000\n#user_allow_other\n")
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertEqual(refused.stderr, "photovault: --allow-other needs the line 'user_allow_other' in /etc/fuse.conf for users "
                       + "other than root (an administrator adds it); mount without --allow-other, or ask for that line\n")

        // With the line, the check passes: the mount goes on to read the password (which this
        // test withholds, so nothing is mounted).
        let allowed = try mountAsNobody(conf: "mount_max = 1000\n  user_allow_other  # for photovault\n")
        XCTAssertEqual(allowed.status, 27, allowed.stderr)
        XCTAssertTrue(allowed.stderr.contains("cannot read the password from \(missing)"), allowed.stderr)
        XCTAssertFalse(Harness.isMounted(mp))
    }
}
