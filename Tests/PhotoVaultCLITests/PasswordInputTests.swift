import XCTest
import Glibc
import PhotoVaultCrypto
import PhotoVaultStore
@testable import PhotoVaultCLI

final class PasswordInputTests: XCTestCase {
    var dir = ""

    override func setUpWithError() throws {
        dir = "/tmp/pv-pw-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func bytes(_ s: SecureBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }

    func args(_ argv: [String]) throws -> ParsedArguments {
        guard case .run(_, let a) = try ArgumentParser().parse(argv) else { throw UsageError("not a command") }
        return a
    }

    func file(_ name: String, _ content: String) -> String {
        let path = dir + "/" + name
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(content.utf8)))
        XCTAssertEqual(chmod(path, 0o600), 0)   // as a careful user keeps it: no warning
        return path
    }

    /// Warnings collected instead of printed.
    final class Warnings { var lines: [String] = [] }

    func warningInput(_ warnings: Warnings) -> PasswordInput {
        var input = PasswordInput()
        input.warn = { warnings.lines.append($0) }
        return input
    }

    /// A regular password file other users may read or write, or that another user owns, is
    /// read all the same, with one warning; a private one, and a pipe, get none.
    func testPasswordFileOthersCanReachIsWarnedAboutOnce() throws {
        let warnings = Warnings()
        let f = file("pw", "correct horse\n")
        XCTAssertEqual(bytes(try warningInput(warnings).read(from: .file(f), confirm: false, prompt: "")),
                       Array("correct horse".utf8))
        XCTAssertEqual(warnings.lines, [])
        for (mode, access) in [(0o640, "read"), (0o604, "read"), (0o620, "written"), (0o666, "read and written")] as [(mode_t, String)] {
            warnings.lines = []
            XCTAssertEqual(chmod(f, mode), 0)
            let a = try args(["user", "passwd", "--passfile", f, "--new-passfile", f])
            let b = try args(["user", "reset-password", "--recovery-key-file", f])
            XCTAssertEqual(bytes(try warningInput(warnings).password(a)), Array("correct horse".utf8))
            XCTAssertEqual(bytes(try warningInput(warnings).newPassword(a)), Array("correct horse".utf8))
            XCTAssertEqual(bytes(try warningInput(warnings).recoveryKey(b)), Array("correct horse".utf8))
            let line = "the password file \(f) can be \(access) by other users (mode \(String(mode, radix: 8))): run 'chmod 600 \(f)'"
            XCTAssertEqual(warnings.lines, [line, line, line.replacingOccurrences(of: "password file", with: "recovery-key file")])
        }
        // Owner: judged against the effective uid.
        var st = stat()
        XCTAssertEqual(stat(f, &st), 0)
        XCTAssertEqual(PasswordInput.exposure(of: f, st, euid: st.st_uid + 1),
                       "the password file \(f) belongs to uid \(st.st_uid), not to you (uid \(st.st_uid + 1)) and can be read "
                       + "and written by other users (mode 666): keep it in a file of your own with mode 600")
        XCTAssertEqual(chmod(f, 0o600), 0)
        XCTAssertEqual(stat(f, &st), 0)
        XCTAssertNil(PasswordInput.exposure(of: f, st, euid: st.st_uid))
        XCTAssertEqual(PasswordInput.exposure(of: f, st, euid: st.st_uid + 1),
                       "the password file \(f) belongs to uid \(st.st_uid), not to you (uid \(st.st_uid + 1)): "
                       + "keep it in a file of your own with mode 600")
        // A pipe (`--passfile <(cmd)`) is nobody's file on disk: no warning.
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&fds), 0)
        defer { close(fds[0]) }
        XCTAssertEqual(write(fds[1], "piped pw\n", 9), 9)
        close(fds[1])
        warnings.lines = []
        XCTAssertEqual(bytes(try warningInput(warnings).read(from: .file("/proc/self/fd/\(fds[0])"), confirm: false, prompt: "")),
                       Array("piped pw".utf8))
        XCTAssertEqual(warnings.lines, [])
    }

    func testPassfileFirstLineWithoutNewline() throws {
        let f = file("pw", "correct horse\nsecond line\n")
        let pw = try PasswordInput().password(try args(["unlock", "--passfile", f]))
        XCTAssertEqual(bytes(pw), Array("correct horse".utf8))
        let crlf = file("crlf", "windows\r\n")
        XCTAssertEqual(bytes(try PasswordInput().read(from: .file(crlf), confirm: false, prompt: "")), Array("windows".utf8))
        let noNewline = file("nonl", "last")
        XCTAssertEqual(bytes(try PasswordInput().read(from: .file(noNewline), confirm: false, prompt: "")), Array("last".utf8))
    }

    func testEmptyAndMissingPassfile() throws {
        let empty = file("empty", "\nsecond\n")
        XCTAssertThrowsError(try PasswordInput().read(from: .file(empty), confirm: false, prompt: "")) {
            XCTAssertEqual($0 as? StoreError, .emptyPassword)
        }
        XCTAssertThrowsError(try PasswordInput().read(from: .file(dir + "/absent"), confirm: false, prompt: "")) {
            XCTAssertEqual($0 as? CLIError, .cannotReadPassword(source: self.dir + "/absent", errno: ENOENT))
        }
    }

    func testTooLongIsRefusedNotTruncated() throws {
        let f = file("long", String(repeating: "x", count: PasswordInput.maximumLength + 1) + "\n")
        XCTAssertThrowsError(try PasswordInput().read(from: .file(f), confirm: false, prompt: "")) {
            XCTAssertEqual($0 as? CLIError, .passwordTooLong(maximum: PasswordInput.maximumLength))
        }
        let ok = file("max", String(repeating: "y", count: PasswordInput.maximumLength) + "\n")
        XCTAssertEqual(try PasswordInput().read(from: .file(ok), confirm: false, prompt: "").count,
                       PasswordInput.maximumLength)
    }

    /// --password-stdin reads only the first line: the rest of stdin stays for the command.
    func testStdinReadsOnlyTheFirstLine() throws {
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&fds), 0)
        defer { close(fds[0]) }
        let payload = Array("from stdin\nREST".utf8)
        XCTAssertEqual(write(fds[1], payload, payload.count), payload.count)
        close(fds[1])
        let input = PasswordInput(standardInputFD: fds[0], terminalPath: "/nonexistent")
        let pw = try input.password(try args(["mount", "--password-stdin"]))
        XCTAssertEqual(bytes(pw), Array("from stdin".utf8))
        var rest = [UInt8](repeating: 0, count: 16)
        let n = read(fds[0], &rest, rest.count)
        XCTAssertEqual(Array(rest[0..<max(n, 0)]), Array("REST".utf8))
    }

    func testExternalCommand() throws {
        let pw = try PasswordInput().password(try args(["unlock", "--extpass", "printf 'from cmd\\nignored\\n'"]))
        XCTAssertEqual(bytes(pw), Array("from cmd".utf8))
        // Output larger than a pipe buffer after the first line must not block or fail.
        let big = try PasswordInput().read(from: .command("echo pw; head -c 200000 /dev/zero"), confirm: false, prompt: "")
        XCTAssertEqual(bytes(big), Array("pw".utf8))
        XCTAssertThrowsError(try PasswordInput().read(from: .command("echo partial; exit 3"), confirm: false, prompt: "")) {
            XCTAssertEqual($0 as? CLIError, .externalPasswordCommandFailed(status: 3))
        }
        XCTAssertThrowsError(try PasswordInput().read(from: .command("true"), confirm: false, prompt: "")) {
            XCTAssertEqual($0 as? StoreError, .emptyPassword)
        }
    }

    func testExactlyOneSource() throws {
        XCTAssertEqual(try PasswordInput.source(try args(["unlock"])), .terminal)
        XCTAssertEqual(try PasswordInput.source(try args(["unlock", "--password-stdin"])), .standardInput)
        XCTAssertEqual(try PasswordInput.source(try args(["unlock", "--extpass", "x"])), .command("x"))
        XCTAssertThrowsError(try PasswordInput.source(try args(["unlock", "--passfile", "f", "--password-stdin"]))) {
            XCTAssertEqual(($0 as? UsageError)?.problem, "give only one password source, not --passfile and --password-stdin")
            XCTAssertEqual(($0 as? UsageError)?.command, ["unlock"])
        }
    }

    func testNewPasswordAndRecoveryKeyFiles() throws {
        let newFile = file("new", "new secret\n")
        let keyFile = file("key", "ABCD-EFGH\n")
        let a = try args(["user", "reset-password", "--recovery-key-file", keyFile, "--new-passfile", newFile])
        XCTAssertEqual(bytes(try PasswordInput().newPassword(a)), Array("new secret".utf8))
        XCTAssertEqual(bytes(try PasswordInput().recoveryKey(a)), Array("ABCD-EFGH".utf8))
    }

    func testNoTerminal() throws {
        let input = PasswordInput(standardInputFD: 0, terminalPath: dir + "/no-tty")
        XCTAssertThrowsError(try input.password(try args(["unlock"]))) {
            XCTAssertEqual($0 as? CLIError, .noTerminal)
        }
    }

    func testConstantTimeEqual() {
        XCTAssertTrue(PasswordInput.equal(SecureBytes(copying: [1, 2, 3]), SecureBytes(copying: [1, 2, 3])))
        XCTAssertFalse(PasswordInput.equal(SecureBytes(copying: [1, 2, 3]), SecureBytes(copying: [1, 2, 4])))
        XCTAssertFalse(PasswordInput.equal(SecureBytes(copying: [1, 2, 3]), SecureBytes(copying: [1, 2])))
    }

    /// A secret held across a prompt is zeroed by the prompt's signal handler before the
    /// signal kills the process: a child of this test, armed as at a prompt, holds a page it
    /// shares with the parent and raises SIGTERM; the parent finds the page zeroed.
    func testASignalAtAPromptZeroesTheSecretsHeldAcrossIt() throws {
        let size = 48
        guard let page = mmap(nil, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0),
              page != MAP_FAILED else { throw CLIError.failed("mmap") }
        defer { munmap(page, 4096) }
        memset(page, 0xA5, 4096)
        TerminalRestore.arm(fd: -1, state: termios())
        let pid = TerminalRestore.holding(page, count: size) {
            XCTAssertEqual(TerminalRestore.heldByteCount, size)
            let pid = fork()
            if pid == 0 { raise(SIGTERM); _exit(99) }   // the child: only async-signal-safe calls
            return pid
        }
        TerminalRestore.disarm()
        XCTAssertGreaterThan(pid, 0)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(status & 0x7f, SIGTERM, "the child must die of the signal (status \(status))")
        let bytes = Array(UnsafeRawBufferPointer(start: page, count: 4096))
        XCTAssertEqual(Array(bytes[0..<size]), [UInt8](repeating: 0, count: size), "the held secret was not zeroed")
        XCTAssertEqual(Array(bytes[size...]), [UInt8](repeating: 0xA5, count: 4096 - size), "only the held bytes are zeroed")
        XCTAssertEqual(TerminalRestore.heldByteCount, 0)
    }

    /// A signal the caller ignores (SIGHUP under nohup, SIGINT and SIGQUIT for a job that
    /// a non-interactive shell started with '&') stays ignored while a prompt waits, and
    /// after it: the prompt's handler used to replace SIG_IGN and kill the process. A
    /// signal not ignored still gets the handler, and its old disposition back afterwards.
    func testASignalTheCallerIgnoresStaysIgnoredAtAPrompt() throws {
        func disposition(_ s: Int32) -> Int {
            var a = sigaction()
            sigaction(s, nil, &a)
            return unsafeBitCast(a.__sigaction_handler.sa_handler, to: Int.self)
        }
        let ignored = unsafeBitCast(SIG_IGN, to: Int.self), byDefault = unsafeBitCast(SIG_DFL, to: Int.self)
        let savedHUP = signal(SIGHUP, SIG_IGN), savedTERM = signal(SIGTERM, SIG_DFL)
        defer { signal(SIGHUP, savedHUP); signal(SIGTERM, savedTERM) }
        TerminalRestore.arm(fd: -1, state: termios())
        XCTAssertEqual(disposition(SIGHUP), ignored)
        XCTAssertNotEqual(disposition(SIGTERM), byDefault, "a signal not ignored gets the prompt's handler")
        let pid = fork()
        if pid == 0 { raise(SIGHUP); _exit(7) }   // the child: only async-signal-safe calls
        TerminalRestore.disarm()
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(status, 7 << 8, "an ignored SIGHUP killed the process at the prompt (status \(status))")
        XCTAssertEqual(disposition(SIGHUP), ignored)
        XCTAssertEqual(disposition(SIGTERM), byDefault)
    }

    // MARK: - A real pseudo-terminal

    /// A pty pair: the reader uses the slave as its /dev/tty, the test types on the master.
    struct PTY {
        let master: Int32
        let slavePath: String
        // Glibc's Swift module hides the XSI pty functions (they need _XOPEN_SOURCE); look them
        // up by name and call them with their C signatures.
        typealias IntFn = @convention(c) (Int32) -> Int32
        typealias NameFn = @convention(c) (Int32) -> UnsafeMutablePointer<CChar>?
        static func symbol<T>(_ name: String, _: T.Type) throws -> T {
            guard let p = dlsym(nil, name) else { throw CLIError.failed("no \(name)") }
            return unsafeBitCast(p, to: T.self)
        }

        init() throws {
            let openpt = try Self.symbol("posix_openpt", IntFn.self)
            let grant = try Self.symbol("grantpt", IntFn.self)
            let unlock = try Self.symbol("unlockpt", IntFn.self)
            let ptsname = try Self.symbol("ptsname", NameFn.self)
            master = openpt(O_RDWR | O_NOCTTY)
            guard master >= 0, grant(master) == 0, unlock(master) == 0, let name = ptsname(master) else {
                throw CLIError.failed("no pty")
            }
            slavePath = String(cString: name)
        }

        /// Reads master output until `text` appears (or `timeout` passes); returns all output read.
        func waitFor(_ text: String, timeout: TimeInterval = 5) -> String {
            var seen = ""
            let deadline = Date().addingTimeInterval(timeout)
            while !seen.contains(text) && Date() < deadline {
                var pfd = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
                guard poll(&pfd, 1, 100) > 0 else { continue }
                var buf = [UInt8](repeating: 0, count: 256)
                let n = read(master, &buf, buf.count)
                if n > 0 { seen += String(decoding: buf[0..<n], as: UTF8.self) }
            }
            return seen
        }

        func type(_ s: String) { _ = s.withCString { write(master, $0, strlen($0)) } }
    }

    /// Runs `body` on a thread with the pty as terminal while the test types answers.
    func withTerminal(confirm: Bool, answers: [String]) throws -> (Result<SecureBytes, Error>, String, tcflag_t) {
        let pty = try PTY()
        defer { close(pty.master) }
        // Keep a slave fd open so its settings can be read back after the reader closes its own.
        let slave = open(pty.slavePath, O_RDWR | O_NOCTTY)
        defer { close(slave) }
        let input = PasswordInput(standardInputFD: -1, terminalPath: pty.slavePath)
        final class Box: @unchecked Sendable { var result: Result<SecureBytes, Error>? }
        let box = Box()
        let done = expectation(description: "read")
        Thread {
            box.result = Result { try input.read(from: .terminal, confirm: confirm, prompt: "Password: ") }
            done.fulfill()
        }.start()
        var transcript = pty.waitFor("Password: ")
        pty.type(answers[0] + "\n")
        if confirm && answers.count > 1 {
            transcript += pty.waitFor("Retype password: ")
            // The first entry is held across the retype prompt: a signal there zeroes it.
            XCTAssertEqual(TerminalRestore.heldByteCount, answers[0].utf8.count)
            pty.type(answers[1] + "\n")
        }
        wait(for: [done], timeout: 10)
        transcript += pty.waitFor("\u{0}", timeout: 0.3)   // drain whatever else was written (echo would show here)
        var t = termios()
        XCTAssertEqual(tcgetattr(slave, &t), 0)
        return (try XCTUnwrap(box.result), transcript, t.c_lflag)
    }

    func testTerminalPromptWithoutEchoAndRestoresEcho() throws {
        let (result, transcript, lflag) = try withTerminal(confirm: true, answers: ["s3cret pass", "s3cret pass"])
        XCTAssertEqual(bytes(try result.get()), Array("s3cret pass".utf8))
        XCTAssertTrue(transcript.contains("Password: "))
        XCTAssertTrue(transcript.contains("Retype password: "))
        XCTAssertFalse(transcript.contains("s3cret"), "the password was echoed: \(transcript)")
        XCTAssertNotEqual(lflag & tcflag_t(ECHO), 0, "echo was not restored")
    }

    func testTerminalMismatch() throws {
        let (result, _, lflag) = try withTerminal(confirm: true, answers: ["first password", "second password"])
        XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? CLIError, .passwordsDoNotMatch) }
        XCTAssertNotEqual(lflag & tcflag_t(ECHO), 0)
    }

    /// A new password the rules refuse is refused after the first entry: it used to be asked
    /// a second time ('Retype password:') and only then called too short.
    func testTerminalNewPasswordTooShortIsRefusedBeforeTheRetype() throws {
        let (result, transcript, lflag) = try withTerminal(confirm: true, answers: ["short"])
        XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? StoreError, .passwordTooShort(minimum: 8)) }
        XCTAssertFalse(transcript.contains("Retype"), transcript)
        XCTAssertNotEqual(lflag & tcflag_t(ECHO), 0)
    }

    func testTerminalEmptyPassword() throws {
        let (result, _, _) = try withTerminal(confirm: false, answers: [""])
        XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? StoreError, .emptyPassword) }
    }
}
