import XCTest
@testable import PhotoVaultCLI

/// Help, man page and completion come from the command table; the committed man page and
/// completion script must be exactly what the table generates today.
final class GeneratedDocsTests: XCTestCase {
    static let repoRoot = URL(fileURLWithPath: #filePath).resolvingSymlinksInPath()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Whitespace-insensitive view of wrapped text.
    func flat(_ s: String) -> String {
        s.split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
    }

    func testCommittedManPageMatchesTheSpec() throws {
        let committed = try String(contentsOf: Self.repoRoot.appendingPathComponent("docs/photovault.1"), encoding: .utf8)
        XCTAssertEqual(committed, ManPage.render(),
                       "docs/photovault.1 is stale: regenerate with 'photovault --generate-man > docs/photovault.1'")
    }

    func testCommittedCompletionMatchesTheSpec() throws {
        let committed = try String(contentsOf: Self.repoRoot.appendingPathComponent("scripts/photovault-completion.bash"),
                                   encoding: .utf8)
        XCTAssertEqual(committed, Completion.bash(),
                       "scripts/photovault-completion.bash is stale: regenerate with "
                           + "'photovault --generate-completion bash > scripts/photovault-completion.bash'")
    }

    func testCommandHelpListsEveryOptionWithItsDefault() {
        for c in CommandSpec.all {
            let help = flat(Help.command(c))
            XCTAssertTrue(help.contains("Usage: \(c.usage)"), c.name)
            for o in c.allOptions {
                XCTAssertTrue(help.contains(o.synopsis + " "), "\(c.name) help lacks \(o.synopsis)")
                if let d = o.defaultText {
                    XCTAssertTrue(help.contains(flat("(default: \(d))")), "\(c.name) help lacks the default of --\(o.long)")
                }
            }
            for a in c.arguments { XCTAssertTrue(help.contains(a.name), "\(c.name) help lacks \(a.name)") }
            for e in c.examples { XCTAssertTrue(help.contains("$ " + flat(e.command)), e.command) }
            for line in Help.command(c).split(separator: "\n") {
                XCTAssertLessThanOrEqual(line.count, Help.width, "too wide in \(c.name): \(line)")
            }
        }
    }

    func testSpecificDefaultsAreShown() {
        let mount = flat(Help.text(for: ["mount"])!)
        XCTAssertTrue(mount.contains("--on-lock ACTION"))
        XCTAssertTrue(mount.contains("(default: unmount)"))
        XCTAssertTrue(mount.contains("(default: 60s)"))
        XCTAssertTrue(mount.contains("(default: ~/PhotoVault)"))
        let initHelp = flat(Help.text(for: ["init"])!)
        XCTAssertTrue(initHelp.contains("(default: 4096)"))
        XCTAssertTrue(initHelp.contains("(default: aes256gcm when the CPU has AES-NI, else xchacha20poly1305)"))
    }

    func testTopLevelHelpHasEveryCommandAndTheExitCodeTable() {
        let top = Help.topLevel()
        for c in CommandSpec.all { XCTAssertTrue(top.contains("  \(c.name) "), c.name) }
        for e in ExitCodes.table {
            let row = "    \(e.code)" + String(repeating: " ", count: 4 - String(e.code).count)
            XCTAssertTrue(top.contains(row + e.meaning.split(separator: " ").first!), "exit code \(e.code)")
        }
        let group = Help.text(for: ["user"])!
        for sub in ["add", "passwd", "reset-password", "remove", "list", "check"] {
            XCTAssertTrue(group.contains("  \(sub) "), sub)
        }
    }

    func testManPageCarriesTheSameText() {
        let man = ManPage.render()
        XCTAssertTrue(man.hasPrefix(".\\\" Generated"))
        XCTAssertTrue(man.contains(".TH PHOTOVAULT 1"))
        for c in CommandSpec.all {
            XCTAssertTrue(man.contains(".SS \"\(ManPage.escape(c.usage))\""), c.name)
            for o in c.options { XCTAssertTrue(man.contains("\\fB\\-\\-\(ManPage.escape(o.long))\\fR"), o.long) }
        }
        for e in ExitCodes.table { XCTAssertTrue(man.contains(".B \(e.code)\n\(ManPage.text(e.meaning))\n")) }
        XCTAssertEqual(ManPage.text(".hidden 'x'"), "\\&.hidden 'x'")
        XCTAssertEqual(ManPage.escape("a\\b-c"), "a\\eb\\-c")
    }

    /// groff must accept the page without warnings (-ww) in the man macro package.
    func testManPageFormatsWithoutWarnings() throws {
        // scripts/deps.sh installs groff-base for the tests: a missing groff is a setup error.
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/groff") else {
            return XCTFail("groff is not installed: run 'bash scripts/deps.sh test' (package groff-base)")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/groff")
        p.arguments = ["-man", "-Tutf8", "-ww", "-z"]
        let input = Pipe(), errors = Pipe()
        p.standardInput = input
        p.standardError = errors
        try p.run()
        input.fileHandleForWriting.write(Data(ManPage.render().utf8))
        try input.fileHandleForWriting.close()
        p.waitUntilExit()
        let warnings = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertEqual(warnings, "")
    }
}
