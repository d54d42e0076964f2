import XCTest
@testable import PhotoVaultCLI

final class ParserTests: XCTestCase {
    let parser = ArgumentParser()

    /// Parses a command line that must run a command; fails the test otherwise.
    func run(_ args: [String], file: StaticString = #filePath, line: UInt = #line) throws -> ParsedArguments {
        guard case .run(_, let parsed) = try parser.parse(args) else {
            XCTFail("expected a command for \(args)", file: file, line: line)
            throw UsageError("not a command")
        }
        return parsed
    }

    func usageError(_ args: [String], file: StaticString = #filePath, line: UInt = #line) -> UsageError? {
        do {
            let r = try parser.parse(args)
            XCTFail("expected a usage error for \(args), got \(r)", file: file, line: line)
            return nil
        } catch let e as UsageError {
            return e
        } catch {
            XCTFail("unexpected \(error)", file: file, line: line)
            return nil
        }
    }

    func testEqualsAndSeparateValueAreTheSame() throws {
        let a = try run(["init", "--cipher=xchacha20poly1305", "--chunk-size", "4096"])
        let b = try run(["init", "--cipher", "xchacha20poly1305", "--chunk-size=4096"])
        XCTAssertEqual(a, b)
        XCTAssertEqual(a.value("cipher"), "xchacha20poly1305")
        XCTAssertEqual(a.value("chunk-size"), "4096")
        XCTAssertEqual(a.command, ["init"])
    }

    func testValueMayContainEqualsAndStartWithDash() throws {
        let p = try run(["unlock", "--extpass=pass show a=b", "/mnt"])
        XCTAssertEqual(p.value("extpass"), "pass show a=b")
        let q = try run(["unlock", "--passfile", "-weird-name"])
        XCTAssertEqual(q.value("passfile"), "-weird-name")
        XCTAssertNil(q.argument("MOUNTPOINT"))
    }

    func testDoubleDashEndsOptions() throws {
        let p = try run(["export", "--user", "alice", "--", "--force", "-h", "dest"])
        XCTAssertEqual(p.argumentList("PATH_IN_VAULT"), ["--force", "-h"])
        XCTAssertEqual(p.argument("DEST"), "dest")
        XCTAssertFalse(p.flag("force"))
        XCTAssertEqual(p.value("user"), "alice")
    }

    func testLoneDashIsPositional() throws {
        let p = try run(["import", "-", "/inbox/a.jpg", "--class", "none"])
        XCTAssertEqual(p.argumentList("SOURCE"), ["-"])
        XCTAssertEqual(p.argument("DEST_DIR_IN_VAULT"), "/inbox/a.jpg")
        XCTAssertEqual(p.value("class"), "none")
        let e = try run(["export", "/a.jpg", "-"])
        XCTAssertEqual(e.argument("DEST"), "-")
    }

    func testVariadicBeforeLastArgument() throws {
        let p = try run(["import", "a.jpg", "b.jpg", "dir", "/2024"])
        XCTAssertEqual(p.argumentList("SOURCE"), ["a.jpg", "b.jpg", "dir"])
        XCTAssertEqual(p.argument("DEST_DIR_IN_VAULT"), "/2024")
        XCTAssertEqual(p.positionals, ["a.jpg", "b.jpg", "dir", "/2024"])
        XCTAssertEqual(usageError(["import", "a.jpg"])?.problem, "missing argument DEST_DIR_IN_VAULT")
        XCTAssertEqual(usageError(["import"])?.problem, "missing argument SOURCE")
    }

    func testOptionalArgument() throws {
        XCTAssertNil(try run(["user", "add"]).argument("USER"))
        XCTAssertEqual(try run(["user", "add", "bob", "--this-device-only"]).argument("USER"), "bob")
        XCTAssertTrue(try run(["user", "add", "--this-device-only"]).flag("this-device-only"))
        XCTAssertEqual(usageError(["user", "add", "bob", "carol"])?.problem, "unexpected argument 'carol'")
    }

    func testGlobalOptionBeforeAndAfterCommand() throws {
        XCTAssertEqual(try run(["--store", "/s", "user", "list"]).value("store"), "/s")
        XCTAssertEqual(try run(["--store=/s", "status"]).value("store"), "/s")
        XCTAssertEqual(try run(["status", "--store", "/t"]).value("store"), "/t")
        XCTAssertEqual(usageError(["--store", "/s", "status", "--store=/t"])?.problem,
                       "option '--store' given more than once")
    }

    func testShortOptions() throws {
        XCTAssertTrue(try run(["mount", "-f"]).flag("foreground"))
        XCTAssertTrue(try run(["mount", "--foreground", "/mnt"]).flag("foreground"))
        XCTAssertEqual(try parser.parse(["mount", "-fh"]), .help(["mount"]))
        XCTAssertEqual(usageError(["mount", "-fz"])?.problem, "unknown option '-z'")
    }

    func testHelpForms() throws {
        XCTAssertEqual(try parser.parse(["--help"]), .help([]))
        XCTAssertEqual(try parser.parse(["-h"]), .help([]))
        XCTAssertEqual(try parser.parse(["help"]), .help([]))
        XCTAssertEqual(try parser.parse(["help", "user", "add"]), .help(["user", "add"]))
        XCTAssertEqual(try parser.parse(["help", "class"]), .help(["class"]))
        XCTAssertEqual(try parser.parse(["user", "--help"]), .help(["user"]))
        XCTAssertEqual(try parser.parse(["user", "add", "--passfile", "x", "--help"]), .help(["user", "add"]))
        XCTAssertEqual(try parser.parse(["fsck", "-h"]), .help(["fsck"]))
        XCTAssertEqual(usageError(["help", "nope"])?.problem, "unknown command 'nope'")
    }

    func testHiddenTopLevelOptions() throws {
        XCTAssertEqual(try parser.parse(["--version"]), .version)
        XCTAssertEqual(try parser.parse(["--generate-man"]), .generateManPage)
        XCTAssertEqual(try parser.parse(["--generate-completion", "bash"]), .generateCompletion(shell: "bash"))
        XCTAssertEqual(try parser.parse(["--generate-completion=bash"]), .generateCompletion(shell: "bash"))
        XCTAssertEqual(usageError(["--generate-completion", "tcsh"])?.problem,
                       "unsupported shell 'tcsh' (supported: bash)")
    }

    func testErrorsNameTheCommandForHelp() {
        let e = usageError(["user", "add", "--pasfile", "x"])
        XCTAssertEqual(e?.problem, "unknown option '--pasfile'; did you mean '--passfile'?")
        XCTAssertEqual(e?.description,
                       "photovault: unknown option '--pasfile'; did you mean '--passfile'? (see 'photovault user add --help')")
        XCTAssertEqual(usageError([])?.description, "photovault: no command given (see 'photovault --help')")
        XCTAssertEqual(usageError(["usr"])?.problem, "unknown command 'usr'; did you mean 'user'?")
        XCTAssertEqual(usageError(["user"])?.command, ["user"])
        XCTAssertEqual(usageError(["user", "frobnicate"])?.problem, "unknown command 'user frobnicate'")
    }

    func testValueAndFlagMistakes() {
        XCTAssertEqual(usageError(["mount", "--idle"])?.problem, "option '--idle' needs a value (DURATION)")
        XCTAssertEqual(usageError(["fsck", "--repair=yes"])?.problem, "option '--repair' takes no value")
        XCTAssertEqual(usageError(["init", "--cipher", "rot13"])?.problem,
                       "invalid value 'rot13' for '--cipher' (expected aes256gcm, xchacha20poly1305)")
        XCTAssertEqual(usageError(["mount", "--on-lock=sleep"])?.problem,
                       "invalid value 'sleep' for '--on-lock' (expected unmount, stay)")
        XCTAssertEqual(usageError(["class", "set", "/a.jpg", "secret"])?.problem,
                       "invalid CLASS 'secret' (expected complete, complete-unless-open, until-first-auth, none)")
        XCTAssertEqual(usageError(["status", "--user", "x"])?.problem, "unknown option '--user'")
    }

    func testClassSet() throws {
        let p = try run(["class", "set", "~/PhotoVault/a.jpg", "complete-unless-open", "--user=bob"])
        XCTAssertEqual(p.argument("PATH"), "~/PhotoVault/a.jpg")
        XCTAssertEqual(p.argument("CLASS"), "complete-unless-open")
        XCTAssertEqual(p.value("user"), "bob")
    }

    func testEditDistance() {
        XCTAssertEqual(editDistance("kitten", "sitting"), 3)
        XCTAssertEqual(editDistance("", "abc"), 3)
        XCTAssertEqual(editDistance("abc", ""), 3)
        XCTAssertEqual(editDistance("same", "same"), 0)
    }
}
