import Foundation
import XCTest

/// After several wrong passwords the next attempts wait (1, 2, 4 s ...), and on a terminal
/// that is now said (issue 38, item 9): the wait was silent and read as a hang. A script
/// (stderr not a terminal) gets no new line.
final class EverydayThrottleNoticeTests: XCTestCase {
    func testAThrottledAttemptSaysItWaitsOnATerminalOnly() throws {
        let sb = Sandbox("pv-every-throttle")
        sb.initStore()
        let wrong = sb.root + "/wrong"
        try Sandbox.writeSecret("not the password\n", to: wrong)
        let args = ["class", "list", "/", "--store", sb.store, "--user", "alice"]
        // Three free failures, then the fourth counts towards a 1 s wait, the fifth 2 s.
        for _ in 0..<5 {
            let r = sb.pv(args + ["--passfile", wrong])
            XCTAssertEqual(r.status, 5, r.stderr)
        }
        // Not on a terminal: the wrong-password line alone, as before.
        let piped = sb.pv(args + ["--passfile", wrong])
        XCTAssertEqual(piped.status, 5, piped.stderr)
        XCTAssertFalse(piped.stderr.contains("waiting"), piped.stderr)

        let tty = Harness.run(["python3", "-c", EverydayFirstUseTests.driver, "[]", Harness.binary] + args
                              + ["--passfile", sb.passfile], env: sb.env, timeout: 90)
        XCTAssertTrue(tty.stdout.contains("DRIVER steps=0 status=0\n"), tty.stdout)
        let said = tty.stdout.range(of: #"photovault: waiting [0-9]+ s after recent wrong passwords\r?\n"#, options: .regularExpression)
        XCTAssertNotNil(said, tty.stdout)
    }
}
