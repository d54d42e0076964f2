import XCTest
import Glibc
import PhotoVaultCrypto
@testable import PhotoVaultStore
@testable import PhotoVaultCLI

/// `photovault user passwd` typed at a terminal (a pty), run in this process so that the
/// password KEKs it derives can be counted.
final class PasswdTerminalTests: XCTestCase {
    var dir = ""
    var layout: StoreLayout!
    let current = "the current password"
    var recoveryKey = ""

    override func setUpWithError() throws {
        var template = Array("/tmp/pv-passwd-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw StoreError.posix("mkdtemp") }
        dir = String(cString: p)
        layout = StoreLayout(root: dir + "/store")
        var config = StoreConfig()
        config.accountNameKDF = .testing
        try layout.initialise(config: config)
        let rk = try AccountStore(layout: layout).add(user: "alice", password: secret(current), deviceBound: false,
                                                      parameters: .floor)
        recoveryKey = rk.formatted
        rk.wipe()
    }

    override func tearDownWithError() throws {
        try? TreeRemoval.removeRecursively(dir)
    }

    func secret(_ s: String) -> SecureBytes { SecureBytes(copying: Array(s.utf8)) }

    func recordBytes() throws -> [UInt8] {
        let names = try FileManager.default.contentsOfDirectory(atPath: layout.accountsDir).filter { $0.hasSuffix(".rec") }
        XCTAssertEqual(names.count, 1)
        return Array(try Data(contentsOf: URL(fileURLWithPath: layout.accountsDir + "/" + names[0])))
    }

    func assertOpens(_ password: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNoThrow(try AccountStore(layout: layout).open(user: "alice", password: secret(password)).wipe(),
                         password, file: file, line: line)
    }

    func assertRefused(_ password: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try AccountStore(layout: layout).open(user: "alice", password: secret(password)),
                             password, file: file, line: line) {
            XCTAssertEqual($0 as? StoreError, .wrongPassword, file: file, line: line)
        }
    }

    /// Runs `user passwd alice` with the pty as its terminal. `duringNewPrompt` runs once the
    /// "New password: " prompt shows, before anything is typed at it. Returns the exit
    /// code, stderr and the number of password KEKs derived.
    func passwd(new: String, duringNewPrompt: () throws -> Void = {}) throws -> (code: Int32, stderr: String, derivations: Int) {
        try atTerminal("passwd", UserCommands.passwd, first: ("Current password: ", current), new: new,
                       duringNewPrompt: duringNewPrompt)
    }

    /// `user COMMAND alice`: answers `first`, then the new password twice.
    func atTerminal(_ command: String, _ handler: @escaping (ParsedArguments, PasswordInput) throws -> Int32,
                    first: (prompt: String, answer: String), new: String,
                    duringNewPrompt: () throws -> Void) throws -> (code: Int32, stderr: String, derivations: Int) {
        let pty = try PasswordInputTests.PTY()
        defer { close(pty.master) }
        let slave = open(pty.slavePath, O_RDWR | O_NOCTTY)   // keeps the pty alive between prompts
        defer { close(slave) }
        let input = PasswordInput(standardInputFD: -1, terminalPath: pty.slavePath)
        final class Box: @unchecked Sendable { var code: Int32 = -1; var err = "" }
        let box = Box()
        let argv = ["user", command, "alice", "--store", layout.root]
        let before = AccountStore.passwordKDFRuns.load(ordering: .relaxed)
        let done = expectation(description: "passwd")
        Thread {
            box.code = PhotoVaultCLI.run(argv, console: Console(out: { _ in }, err: { box.err += $0 }),
                                         handlers: ["user \(command)": { try handler($0, input) }])
            done.fulfill()
        }.start()
        XCTAssertTrue(pty.waitFor(first.prompt, timeout: 20).contains(first.prompt))
        pty.type(first.answer + "\n")
        XCTAssertTrue(pty.waitFor("New password: ", timeout: 20).contains("New password: "))
        try duringNewPrompt()
        pty.type(new + "\n")
        XCTAssertTrue(pty.waitFor("Retype new password: ", timeout: 20).contains("Retype new password: "))
        pty.type(new + "\n")
        wait(for: [done], timeout: 60)
        return (box.code, box.err, AccountStore.passwordKDFRuns.load(ordering: .relaxed) - before)
    }

    /// One Argon2id of the current password (checked before the new one is asked for, its
    /// key kept for the change) and one of the new: it used to derive the current one twice.
    func testPasswdAtATerminalDerivesTheCurrentPasswordOnce() throws {
        let r = try passwd(new: "a brand new passphrase") {
            // The kept payload (master key and tree ID) is zeroed if a signal ends the prompt.
            XCTAssertEqual(TerminalRestore.heldByteCount, 48)
        }
        XCTAssertEqual(r.code, 0, r.stderr)
        XCTAssertEqual(r.stderr, "")
        XCTAssertEqual(r.derivations, 2, "Argon2id runs: one for the current password, one for the new")
        assertOpens("a brand new passphrase")
        assertRefused(current)
    }

    /// Another command changes the account while the new password is typed: the change is
    /// refused in one line, exit 31, and the other command's password stays. (Re-checking
    /// the current password against the new record said 'wrong password', exit 5.)
    func testAnAccountChangedWhileTheNewPasswordIsTypedIsNotOverwritten() throws {
        var changed: [UInt8] = []
        let r = try passwd(new: "a brand new passphrase") {
            try AccountStore(layout: layout).changePassword(user: "alice", old: secret(current), new: secret("set by another command"))
            changed = try recordBytes()
        }
        XCTAssertEqual(r.code, 31, r.stderr)
        XCTAssertEqual(r.stderr, "photovault: the account was changed by another command (passwd, reset-password or remove) "
                       + "while the new password was typed; nothing was changed: run 'photovault user passwd' again\n")
        XCTAssertTrue(try recordBytes() == changed, "the record written meanwhile must stay as it is")
        assertOpens("set by another command")
        assertRefused("a brand new passphrase")
    }

    /// The same account removed and added again (same name, same password) while the new
    /// password is typed: the key kept from the old record must not be written into the new
    /// account's record (it would open the removed account's tree).
    func testAnAccountRemovedAndAddedAgainMeanwhileIsNotOverwritten() throws {
        var changed: [UInt8] = []
        let r = try passwd(new: "a brand new passphrase") {
            let store = try AccountStore(layout: layout)
            try store.remove(user: "alice", password: secret(current), deletePhotos: false)
            _ = try store.add(user: "alice", password: secret(current), deviceBound: false, parameters: .floor)
            changed = try recordBytes()
        }
        XCTAssertEqual(r.code, 31, r.stderr)
        XCTAssertTrue(try recordBytes() == changed, "the new account's record must stay as it is")
        assertOpens(current)
    }

    /// reset-password holds the recovery key across the new-password prompts: a signal there
    /// zeroes it (as the kept key of passwd).
    func testResetPasswordHoldsTheRecoveryKeyForTheSignalHandler() throws {
        let r = try atTerminal("reset-password", UserCommands.resetPassword, first: ("Recovery key: ", recoveryKey),
                               new: "set with the recovery key") {
            XCTAssertEqual(TerminalRestore.heldByteCount, RecoveryKey.size, "the parsed key (the typed text is wiped)")
        }
        XCTAssertEqual(r.code, 0, r.stderr)
        XCTAssertEqual(r.derivations, 1, "Argon2id runs: the new password only")
        assertOpens("set with the recovery key")
    }

    /// A recovery key that is mistyped (its checksum), or that is another account's, is
    /// refused right after it is typed, before the new password is asked for twice: both
    /// used to be said only after the new password had been typed twice for nothing.
    func testAWrongRecoveryKeyIsSaidBeforeTheNewPassword() throws {
        let bob = try AccountStore(layout: layout).add(user: "bob", password: secret("bob's password"), deviceBound: false,
                                                       parameters: .floor)
        var typo = Array(recoveryKey)
        typo[0] = typo[0] == "A" ? "B" : "A"
        let cases: [(String, String)] = [
            (String(typo), "photovault: the recovery key is mistyped (its checksum does not match)\n"),
            (bob.formatted, "photovault: that recovery key does not open this account\n"),
        ]
        bob.wipe()
        for (key, line) in cases {
            let pty = try PasswordInputTests.PTY()
            defer { close(pty.master) }
            let slave = open(pty.slavePath, O_RDWR | O_NOCTTY)
            defer { close(slave) }
            let input = PasswordInput(standardInputFD: -1, terminalPath: pty.slavePath)
            final class Box: @unchecked Sendable { var code: Int32 = -1; var err = "" }
            let box = Box()
            let argv = ["user", "reset-password", "alice", "--store", layout.root]
            let done = expectation(description: "reset-password")
            Thread {
                box.code = PhotoVaultCLI.run(argv, console: Console(out: { _ in }, err: { box.err += $0 }),
                                             handlers: ["user reset-password": { try UserCommands.resetPassword($0, input: input) }])
                done.fulfill()
            }.start()
            XCTAssertTrue(pty.waitFor("Recovery key: ", timeout: 20).contains("Recovery key: "))
            pty.type(key + "\n")
            let after = pty.waitFor("New password: ", timeout: 3)
            XCTAssertFalse(after.contains("New password: "), "the new password was asked for first")
            if after.contains("New password: ") {   // let the old order finish
                pty.type("set for nothing 1\n")
                _ = pty.waitFor("Retype", timeout: 5)
                pty.type("set for nothing 1\n")
            }
            wait(for: [done], timeout: 60)
            XCTAssertEqual(box.code, 2, box.err)
            XCTAssertEqual(box.err, line)
        }
        assertOpens(current)
    }
}
