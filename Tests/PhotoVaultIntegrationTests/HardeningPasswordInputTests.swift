import Foundation
import XCTest

/// Issue 35, item 5: a password source that never ends or never answers fails within
/// seconds, with one line and the password-input exit code (27), instead of hanging:
/// `--extpass yes` was read to its end (for ever, at full CPU), and a `--passfile` FIFO with
/// no writer waited for ever in open(2).
final class HardeningPasswordInputTests: XCTestCase {
    private func classList(_ sb: Sandbox, _ source: [String]) -> (Harness.Result, Double) {
        let start = Date()
        let r = sb.pv(["class", "list", "/", "--store", sb.store, "--user", "alice"] + source, timeout: 60)
        return (r, Date().timeIntervalSince(start))
    }

    private func assertRefused(_ r: Harness.Result, within seconds: Double, took: Double, _ line: String,
                               file: StaticString = #filePath, line l: UInt = #line) {
        XCTAssertEqual(r.status, 27, r.stderr, file: file, line: l)
        XCTAssertEqual(r.stderr, "photovault: " + line + "\n", file: file, line: l)
        XCTAssertLessThan(took, seconds, "it took \(took) s", file: file, line: l)
    }

    func testAnExtpassCommandThatNeverEndsIsStopped() throws {
        let sb = Sandbox("pv-hard-extpass")
        sb.initStore()
        // Endless output: stopped once it has printed 64 KiB past its first line.
        let (yes, t1) = classList(sb, ["--extpass", "yes"])
        assertRefused(yes, within: 5, took: t1, "the --extpass command printed more than 1 MiB after the password; it was stopped")
        // The password, then nothing and no end: stopped 5 s later.
        let pw = Sandbox.quote(Sandbox.password)
        let pidFile = sb.root + "/extpass.pid"
        let (sleeper, t2) = classList(sb, ["--extpass", "echo $$ > \(Sandbox.quote(pidFile)); echo \(pw); exec sleep 300"])
        assertRefused(sleeper, within: 15, took: t2, "the --extpass command did not end within 5 s of printing the password; it was stopped")
        XCTAssertGreaterThanOrEqual(t2, 4.5)
        // A command that prints its line and ends, with more lines (as `pass show` does), works.
        let (ok, _) = classList(sb, ["--extpass", "echo \(pw); echo 'url: example'; echo 'user: me'"])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        let pid = try XCTUnwrap(pid_t((try String(contentsOfFile: pidFile, encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)))
        XCTAssertTrue(kill(pid, 0) != 0 && errno == ESRCH, "the stopped command must be gone")
    }

    func testAFifoPassfileWithoutAWriterFailsAndOneWithAWriterWorks() throws {
        let sb = Sandbox("pv-hard-fifo")
        sb.initStore()
        let fifo = sb.root + "/pass.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let (none, t) = classList(sb, ["--passfile", fifo])
        assertRefused(none, within: 15, took: t,
                      "no password came through \(fifo): it is a FIFO that no process opened for writing within 5 s")
        XCTAssertGreaterThanOrEqual(t, 4.5)
        // A writer that comes a moment later is waited for.
        let writer = try BackgroundProcess(["/bin/bash", "-c", "sleep 1; printf '%s\\n' \(Sandbox.quote(Sandbox.password)) > \(Sandbox.quote(fifo))"],
                                           output: sb.root + "/writer.log")
        defer { writer.stop() }
        let (ok, _) = classList(sb, ["--passfile", fifo])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertEqual(writer.wait(10), 0)
    }
}
