import Foundation
import XCTest

/// `--user` naming no account of the store (issue 38, item 10): the message names the account
/// and the store. It said only "no such account in this store", so a typo in the name and a
/// wrong --store read alike.
final class EverydayAccountMessageTests: XCTestCase {
    func testNoSuchAccountNamesTheAccountAndTheStore() {
        let sb = Sandbox("pv-every-nouser")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let line = "photovault: no such account 'nobodyhere' in the store at \(sb.store)\n"
        for args in [["export", "/", "-"], ["mount", mp, "--no-dbus"], ["import", sb.passfile, "/x"]] {
            let r = sb.pv(args + ["--store", sb.store, "--user", "nobodyhere", "--passfile", sb.passfile])
            XCTAssertEqual(r.status, 4, "\(args): \(r.stderr)")
            XCTAssertEqual(r.stderr, line, "\(args)")
        }
        let check = sb.pv(["user", "check", "nobodyhere", "--store", sb.store])
        XCTAssertEqual(check.status, 4, check.stderr)
        XCTAssertEqual(check.stderr, line)
    }
}
