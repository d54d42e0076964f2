import Foundation
import XCTest

/// `photovault user add-login` and `user remove-login` (issue 37): the account's login slot,
/// added and removed with the vault password; `user remove` takes it along.
final class SessionLoginSlotCommandTests: XCTestCase {
    private func loginFiles(_ s: Sandbox) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: s.store + "/accounts")) ?? []).filter { $0.hasSuffix(".login") }
    }

    func testAddAndRemoveTheLoginSlot() throws {
        let s = Sandbox("pv-session-slot")
        s.initStore()
        let lp = s.root + "/lp"
        try Sandbox.writeSecret("login words 1", to: lp)
        let wrong = s.root + "/wrong"
        try Sandbox.writeSecret("not the vault password", to: wrong)
        let base = ["--store", s.store, "--login-passfile", lp]

        assertFailure(s.pv(["user", "add-login", "bob", "--passfile", s.passfile] + base), 4, "no such account")
        assertFailure(s.pv(["user", "add-login", "alice", "--passfile", wrong] + base), 5, "wrong password")
        XCTAssertEqual(loginFiles(s), [])

        let add = s.pv(["user", "add-login", "alice", "--passfile", s.passfile] + base)
        XCTAssertEqual(add.status, 0, add.stderr)
        XCTAssertEqual(add.stdout, "Your login password now opens the vault of alice (through the PAM line; see the README)\n")
        XCTAssertEqual(loginFiles(s).count, 1)
        s.assertNoPlaintext(["login words 1", "alice"])

        assertFailure(s.pv(["user", "remove-login", "alice", "--store", s.store, "--passfile", wrong]), 5, "wrong password")
        XCTAssertEqual(loginFiles(s).count, 1)
        let remove = s.pv(["user", "remove-login", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(remove.status, 0, remove.stderr)
        XCTAssertEqual(remove.stdout, "The login password no longer opens the vault of alice\n")
        XCTAssertEqual(loginFiles(s), [])
        let again = s.pv(["user", "remove-login", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(again.stdout, "The vault of alice had no login slot; nothing changed\n")

        XCTAssertEqual(s.pv(["user", "add-login", "alice", "--passfile", s.passfile] + base).status, 0)
        XCTAssertEqual(s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile]).status, 0)
        XCTAssertEqual(loginFiles(s), [], "user remove left the login slot")
    }
}
