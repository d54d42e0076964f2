import Foundation
import XCTest

/// First use at a terminal (issue 38, items 1 and 2): a too-short password or a mistyped
/// retype is asked again (three tries, as passwd does), and the mount that follows uses the
/// password just set. A first slip used to end the whole set-up (exit 8 or 27) and leave an
/// empty ~/PhotoVault; after the recovery key a third, unlabelled "Password:" was asked.
final class EverydayFirstUseTests: XCTestCase {
    /// Runs argv[2:] on a pseudo-terminal and answers, in order, each prompt of the JSON list
    /// argv[1] ([[prompt, answer], ...]) once it has appeared; prints all the terminal showed,
    /// then `DRIVER steps=N status=S` (S is None when the command was still running at the
    /// 60-second deadline, which ends the test rather than hanging it).
    static let driver = #"""
import json, os, pty, select, signal, sys, time
answers = [(p.encode(), a.encode()) for p, a in json.loads(sys.argv[1])]
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
seen, out, step, status = b"", b"", 0, None
deadline = time.time() + 60
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        out += chunk
        seen += chunk
        while step < len(answers) and answers[step][0] in seen:
            seen = seen[seen.index(answers[step][0]) + len(answers[step][0]):]
            time.sleep(0.1)
            os.write(fd, answers[step][1])
            step += 1
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(st)
        break
if status is None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
while select.select([fd], [], [], 0.2)[0]:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode(errors="replace"))
sys.stdout.write("\nDRIVER steps=%d status=%s\n" % (step, status))
"""#

    /// Runs `photovault ARGS` at a terminal in `s`'s environment, answering `answers`.
    static func atTerminal(_ s: Sandbox, _ answers: [(String, String)], _ args: [String], timeout: Double = 90) -> String {
        let json = try! JSONSerialization.data(withJSONObject: answers.map { [$0.0, $0.1] })
        let r = Harness.run(["python3", "-c", driver, String(decoding: json, as: UTF8.self), Harness.binary] + args,
                            env: s.env, timeout: timeout)
        XCTAssertEqual(r.status, 0, r.stderr)
        return r.stdout
    }

    func testFirstUseAsksAgainAfterASlipAndMountsWithThePasswordJustSet() throws {
        let s = Sandbox("pv-every-first")
        let mountpoint = s.root + "/PhotoVault"
        defer { Harness.forceUnmount(mountpoint) }
        let good = Sandbox.password + "\n"
        // A too-short one is refused before its retype (PasswordInput), then asked again.
        let out = Self.atTerminal(s, [("[y/N]", "y\n"), ("Password:", "short\n"),
                                      ("Password:", good), ("Retype", "mistyped password\n"),
                                      ("Password:", good), ("Retype", good)],
                                  ["mount", "--user", "alice", "--no-dbus"])
        XCTAssertTrue(out.contains("DRIVER steps=6 status=0\n"), out)
        XCTAssertTrue(out.contains("photovault: the password is too short: it needs at least 8 characters; try again"), out)
        XCTAssertTrue(out.contains("photovault: passwords do not match; try again"), out)
        XCTAssertTrue(out.contains("Created the store and the account 'alice'"), out)
        XCTAssertTrue(out.contains("Mounted the vault of alice at \(mountpoint)"), out)
        // No prompt after the recovery key: three "Password:" prompts, all before it.
        let afterKey = out.components(separatedBy: "shown only once").last ?? ""
        XCTAssertFalse(afterKey.contains("Password"), out)
        XCTAssertEqual(out.components(separatedBy: "Password:").count - 1, 3, out)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mountpoint) })
        XCTAssertEqual(s.pv(["unmount", mountpoint]).status, 0)
        // The password set is the account's.
        let again = s.pv(["mount", "--user", "alice", "--passfile", s.passfile, "--no-dbus"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(s.pv(["unmount", mountpoint]).status, 0)
    }

    func testThreeSlipsEndTheFirstUseAndLeaveNothingBehind() throws {
        let s = Sandbox("pv-every-first-fail")
        let out = Self.atTerminal(s, [("[y/N]", "y\n"), ("Password:", "short\n"), ("Password:", "tiny\n"),
                                      ("Password:", "small\n")],
                                  ["mount", "--user", "alice", "--no-dbus"])
        XCTAssertTrue(out.contains("DRIVER steps=4 status=8\n"), out)
        XCTAssertEqual(out.components(separatedBy: "; try again").count - 1, 2, out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.root + "/data/photovault/store/photovault.conf"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.root + "/PhotoVault"), "an empty ~/PhotoVault was left")
    }
}
