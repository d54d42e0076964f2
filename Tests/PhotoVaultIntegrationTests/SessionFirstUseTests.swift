import Foundation
import XCTest

/// First use without a terminal (issue 37, item 4): `photovault mount` started by systemd or a
/// display manager (no controlling terminal; a standard input that never ends) says in one
/// line what to do, at once, instead of waiting for a prompt.
final class SessionFirstUseTests: XCTestCase {
    /// Runs `photovault ARGS` in a new session (no controlling terminal) with a standard input
    /// that stays open for 60 s; returns the result and how long it took.
    private func withoutTerminal(_ s: Sandbox, _ args: String, env: [String: String] = [:]) -> (Harness.Result, Double) {
        let start = Date()
        let r = Harness.run(["/bin/bash", "-c", "exec 3< <(sleep 60); setsid -w \(Harness.binary) \(args) <&3"],
                            env: s.env.merging(env) { _, b in b }, timeout: 90)
        return (r, Date().timeIntervalSince(start))
    }

    func testAFirstMountWithoutATerminalSaysHowToCreateTheStore() {
        let s = Sandbox("pv-session-first")
        let (r, took) = withoutTerminal(s, "mount")
        XCTAssertEqual(r.status, 3, r.stderr)
        XCTAssertEqual(r.stderr, "photovault: no PhotoVault store at \(s.root)/data/photovault/store yet, and no terminal "
                       + "to create it from: run 'photovault mount' once in a terminal (it offers to create the store "
                       + "and your account), then start this again\n")
        XCTAssertLessThan(took, 20, "it waited")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.root + "/data/photovault/store"))
    }

    func testAMountWithNoPasswordSourceSaysWhatToUseUnderSystemdAndElsewhere() {
        let s = Sandbox("pv-session-first")
        s.initStore(users: [])
        s.addUser("alice")
        try? FileManager.default.createDirectory(atPath: s.root + "/mnt", withIntermediateDirectories: true)
        let (plain, took) = withoutTerminal(s, "mount --store \(s.store) --user alice \(s.root)/mnt")
        XCTAssertEqual(plain.status, 27, plain.stderr)
        XCTAssertTrue(plain.stderr.hasPrefix("photovault: no terminal to ask the password on: give it with --passfile"),
                      plain.stderr)
        XCTAssertTrue(plain.stderr.contains("PAM"), plain.stderr)
        XCTAssertEqual(plain.stderr.split(separator: "\n").count, 1, plain.stderr)
        XCTAssertLessThan(took, 20, "it waited")

        let (unit, _) = withoutTerminal(s, "mount -f --store \(s.store) --user alice \(s.root)/mnt",
                                        env: ["INVOCATION_ID": "0123456789abcdef0123456789abcdef"])
        XCTAssertEqual(unit.status, 27, unit.stderr)
        XCTAssertTrue(unit.stderr.hasPrefix("photovault: no terminal to ask the password on (started by systemd): "
                                            + "give it with --extpass 'systemd-ask-password"), unit.stderr)
        XCTAssertEqual(unit.stderr.split(separator: "\n").count, 1, unit.stderr)
        XCTAssertFalse(Harness.isMounted(s.root + "/mnt"))
    }
}
