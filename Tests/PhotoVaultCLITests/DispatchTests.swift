import XCTest
import PhotoVaultStore
@testable import PhotoVaultCLI

final class DispatchTests: XCTestCase {
    final class Capture {
        var out = ""
        var err = ""
        var console: Console { Console(out: { self.out += $0 }, err: { self.err += $0 }) }
    }

    func run(_ args: [String], handlers: [String: CommandHandler] = Dispatch.handlers) -> (Int32, Capture) {
        let c = Capture()
        let code = PhotoVaultCLI.run(args, console: c.console, handlers: handlers)
        return (code, c)
    }

    func testHandlerGetsParsedArgumentsAndItsCodeIsReturned() {
        var seen: ParsedArguments?
        let (code, c) = run(["user", "check", "alice", "--store=/s"], handlers: ["user check": { a in seen = a; return 4 }])
        XCTAssertEqual(code, 4)
        XCTAssertEqual(seen?.argument("USER"), "alice")
        XCTAssertEqual(seen?.storePath, "/s")
        XCTAssertEqual(c.err, "")
    }

    func testErrorsBecomeOneLineAndTheirCode() {
        let cases: [(Error, String, Int32)] = [
            (StoreError.wrongPassword, "photovault: wrong password\n", 5),
            (StoreError.noSuchAccount, "photovault: no such account in this store\n", 4),
            (CLIError.notMounted("/m"), "photovault: no vault is mounted at /m\n", 18),
            (CLIError.vaultMounted(user: "alice", mountpoint: "/m", pid: 42),
             "photovault: the vault of alice is mounted at /m: run this command on the mount or unmount first\n", 11),
            (CLIError.vaultMounted(user: "alice", mountpoint: nil, pid: 42),
             "photovault: the vault of alice is mounted (photovault process 42): run this command on the mount or unmount first\n", 11),
            (CLIError.repairWhileMounted(user: "alice", mountpoint: "/m", pid: nil),
             "photovault: the vault of alice is mounted at /m: unmount it before 'fsck --repair' (the mount must be its only writer)\n", 11),
            (CLIError.repairWhileMounted(user: "alice", mountpoint: nil, pid: 42),
             "photovault: the vault of alice is mounted (photovault process 42): unmount it before 'fsck --repair' "
                + "(the mount must be its only writer)\n", 11),
            (CLIError.removeWhileMounted(user: "alice", mountpoint: "/m", pid: 42, deletePhotos: true),
             "photovault: the vault of alice is mounted at /m: unmount it before 'user remove --delete-photos' (nothing was removed)\n", 11),
            (CLIError.removeWhileMounted(user: "alice", mountpoint: nil, pid: 42, deletePhotos: true),
             "photovault: the vault of alice is mounted (photovault process 42): unmount it before 'user remove --delete-photos' "
                + "(nothing was removed)\n", 11),
            (CLIError.removeWhileMounted(user: "alice", mountpoint: "/m", pid: 42, deletePhotos: false),
             "photovault: the vault of alice is mounted at /m: unmount it before 'user remove' (nothing was removed)\n", 11),
            (CLIError.fsckFoundDamage(problems: 2), "photovault: fsck found 2 problems\n", 21),
            (DaemonFailure(code: 11, message: "the store is busy"), "photovault: the store is busy\n", 11),
            (CLIError.deadMount("/m", fsType: "fuse.sshfs"),
             "photovault: /m holds a dead fuse.sshfs mount (its program is gone): run 'fusermount3 -u /m' first\n", 25),
            (UsageError("invalid duration 'x'", command: ["fsck"]),
             "photovault: invalid duration 'x' (see 'photovault fsck --help')\n", 2),
        ]
        for (error, line, expected) in cases {
            let (code, c) = run(["fsck"], handlers: ["fsck": { _ in throw error }])
            XCTAssertEqual(code, expected, "\(error)")
            XCTAssertEqual(c.err, line)
            XCTAssertEqual(c.out, "")
        }
    }

    func testUsageErrorIsOneLineOnStderrWithCode2() {
        let (code, c) = run(["mount", "--bogus"])
        XCTAssertEqual(code, 2)
        XCTAssertEqual(c.err, "photovault: unknown option '--bogus' (see 'photovault mount --help')\n")
        XCTAssertEqual(c.out, "")
    }

    func testNotImplementedHandlerReportsOneLine() {
        var handlers = Dispatch.handlers
        handlers["status"] = { _ in throw CLIError.notImplemented("status") }
        let (code, c) = run(["status"], handlers: handlers)
        XCTAssertEqual(code, 1)
        XCTAssertEqual(c.err, "photovault: 'status' is not implemented yet\n")
    }

    func testHelpVersionAndGenerators() {
        var (code, c) = run(["--help"])
        XCTAssertEqual(code, 0)
        XCTAssertEqual(c.out, Help.topLevel())
        XCTAssertTrue(c.out.contains("Exit status:"))
        (code, c) = run(["help", "user", "add"])
        XCTAssertEqual(c.out, Help.command(ArgumentParser().command(["user", "add"])!))
        (code, c) = run(["--version"])
        XCTAssertEqual(c.out, "photovault \(PhotoVaultCLI.version)\n")
        (code, c) = run(["--generate-man"])
        XCTAssertEqual(c.out, ManPage.render())
        (code, c) = run(["--generate-completion", "bash"])
        XCTAssertEqual(c.out, Completion.bash())
        XCTAssertEqual(code, 0)
    }
}
