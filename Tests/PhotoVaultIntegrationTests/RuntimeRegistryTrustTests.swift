import Foundation
import XCTest

/// `lock`, `unlock` and `status` find live mounts in the runtime directory
/// (`$XDG_RUNTIME_DIR/photovault`, else `/tmp/photovault-<uid>`). One that another user owns
/// or may enter is refused with one clear line, never trusted for a "locked" answer.
final class RuntimeRegistryTrustTests: XCTestCase {
    func testARegistryDirectoryOfAnotherUserOrOpenToOthersIsRefused() {
        let sb = Sandbox("pv-registry")
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        let registry = sb.root + "/photovault"
        XCTAssertTrue(sb.pv(["status"]).stdout.contains("\(mp)\t"))

        for (change, undo) in [("chown 65534 \(Sandbox.quote(registry))", "chown 0 \(Sandbox.quote(registry))"),
                               ("chmod 0755 \(Sandbox.quote(registry))", "chmod 0700 \(Sandbox.quote(registry))")] {
            sb.ok(change)
            for args in [["status"], ["lock", mp]] {
                let r = sb.pv(args)
                XCTAssertEqual(r.status, 1, "\(change): \(args[0]): \(r.stdout) \(r.stderr)")
                XCTAssertEqual(r.stdout, "", "\(change): \(args[0])")
                XCTAssertTrue(r.stderr.hasPrefix("photovault: \(registry) is not a private directory of this user"), r.stderr)
                XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
            }
            sb.ok(undo)
        }
        // Trusted again: the mount was never locked by the refused commands.
        XCTAssertTrue(sb.pv(["status"]).stdout.contains("\(mp)\t"))
        XCTAssertEqual(MountProbe.state(sb, mp), "unlocked")
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(sb, mp), "locked")
        sb.unmount(mp)
    }
}
