import Foundation
import XCTest

/// The warning of a mount that cannot watch D-Bus (issue 38, item 3): one short line, said
/// once per session, and only where a screen lock could exist (a graphical session or a
/// logind seat); never to a mount with --idle or --no-dbus. Every mount without D-Bus (a
/// script, an ssh login) printed it.
final class EverydayDBusWarningTests: XCTestCase {
    func testTheNoDBusWarningIsSaidOnceAndOnlyWhereAScreenCouldLock() throws {
        let s = Sandbox("pv-every-nobus")
        s.initStore()
        let missing = "unix:path=" + s.root + "/no-bus-here"
        let noBus = ["DBUS_SYSTEM_BUS_ADDRESS": missing, "DBUS_SESSION_BUS_ADDRESS": missing]
        func mount(_ name: String, _ env: [String: String], _ extra: [String] = []) -> Harness.Result {
            let mp = s.root + "/" + name
            try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
            let r = Harness.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile] + extra,
                               env: s.env.merging(noBus.merging(env) { _, b in b }) { _, b in b })
            XCTAssertEqual(r.status, 0, r.stderr)
            s.mounts.append(mp)
            s.unmount(mp)
            return r
        }
        // No screen that could lock (no DISPLAY, WAYLAND_DISPLAY or XDG_SEAT): nothing said.
        XCTAssertFalse(mount("m1", [:]).stderr.contains("warning"))
        // --idle locks it anyway: nothing said, in a graphical session too.
        XCTAssertFalse(mount("m2", ["DISPLAY": ":99"], ["--idle", "10m"]).stderr.contains("warning"))
        // A session on a logind seat: said, in one line.
        let seat = mount("m3", ["XDG_SEAT": "seat0"])
        XCTAssertEqual(seat.stderr, "photovault: warning: no D-Bus: the vault will not lock with the screen or on suspend; "
                       + "use --idle or 'photovault lock'\n")
        // Once: the next mount of the session says nothing.
        XCTAssertEqual(mount("m4", ["WAYLAND_DISPLAY": "wayland-0"]).stderr, "")
    }
}
