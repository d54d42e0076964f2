import Foundation
import XCTest

/// An account name given on the command line does not stay in the process's command line,
/// which every local user reads (`ps`, /proc/PID/cmdline).
final class AccountNameExposureTests: XCTestCase {
    /// The command line of `argv` while it waits at its password (stdin, held open here).
    func commandLineAtThePasswordPrompt(_ argv: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Harness.binary)
        p.arguments = argv
        let stdin = Pipe()
        p.standardInput = stdin
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        defer {
            p.terminate()
            try? stdin.fileHandleForWriting.close()
            p.waitUntilExit()
        }
        // Blocked in read(0, ...): the password prompt.
        let waiting = Harness.waitUntil(30) {
            ((try? String(contentsOfFile: "/proc/\(p.processIdentifier)/syscall", encoding: .utf8)) ?? "").hasPrefix("0 0x0 ")
        }
        XCTAssertTrue(waiting, "\(argv) never waited for its password")
        let raw = try Data(contentsOf: URL(fileURLWithPath: "/proc/\(p.processIdentifier)/cmdline"))
        return String(decoding: raw.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
    }

    func testAnAccountNameOnTheCommandLineIsNotShownToOtherProcesses() throws {
        let s = Sandbox("name-exposure")
        // mount checks that the account exists before it asks for the password; user add
        // that it does not.
        let name = "dr-jekyll-private", newName = "mr-hyde-private"
        s.initStore(users: [name])
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        for (argv, hidden) in [(["mount", mp, "--store", s.store, "--user", name, "--password-stdin", "--no-dbus"], name),
                               (["mount", mp, "--store", s.store, "--user=\(name)", "--password-stdin", "--no-dbus"], name),
                               (["user", "add", newName, "--store", s.store, "--password-stdin"], newName)] {
            let shown = try commandLineAtThePasswordPrompt(argv)
            XCTAssertFalse(shown.contains(hidden), "the account name is in the command line: \(shown)")
            // The rest is still there (what ps shows is this process's own).
            XCTAssertTrue(shown.contains(s.store) && shown.contains("--password-stdin"), shown)
        }
        XCTAssertFalse(Harness.isMounted(mp))
    }
}
