import Foundation
import XCTest

/// `photovault init` and `photovault user ...` driven through the built binary: exit codes,
/// one clear error line each, and what each command does to the store (issue "The credential
/// store").
final class AccountCommandTests: XCTestCase {
    func testInitTwiceIsRefused() {
        let s = Sandbox("acct-init")
        let first = s.pv(["init", "--store", s.store])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertTrue(first.stdout.contains("Created an empty PhotoVault store"), first.stdout)
        let config = try? Data(contentsOf: URL(fileURLWithPath: s.store + "/photovault.conf"))
        XCTAssertNotNil(config)
        let again = s.pv(["init", "--store", s.store])
        assertFailure(again, 20, "already exists")
        XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: s.store + "/photovault.conf")), config,
                       "a refused init must not rewrite the config")
    }

    /// A store path through a file, or where nothing can be made, is one line naming the
    /// directory: it was Foundation's 'Error Domain=NSCocoaErrorDomain Code=512 "(null)"
    /// UserInfo={...}'.
    func testInitWhereTheStoreCannotBeMadeSaysWhyInOneLine() throws {
        let s = Sandbox("acct-init-nodir")
        FileManager.default.createFile(atPath: s.root + "/file", contents: Data([1]))
        assertFailure(s.pv(["init", "--store", s.root + "/file/sub/store"]), 1,
                      "photovault: mkdir \(s.root)/file/sub: Not a directory")
        assertFailure(s.pv(["init", "--store", "/proc/self/none/store"]), 1,
                      "photovault: mkdir /proc/self/none: No such file or directory")
    }

    func testUserAddRefusesExistingEmptyAndShortInput() throws {
        let s = Sandbox("acct-add")
        s.initStore(users: [])
        let r = s.pv(["user", "add", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertNotNil(AccountFixtures.recoveryKey(in: r.stdout), "no recovery key printed: \(r.stdout)")

        assertFailure(s.pv(["user", "add", "alice", "--store", s.store, "--passfile", s.passfile]), 6, "already exists")
        assertFailure(s.pv(["user", "add", "", "--store", s.store, "--passfile", s.passfile]), 7, "user name is empty")

        let empty = s.root + "/empty-pass"
        try Sandbox.writeSecret("", to: empty)
        assertFailure(s.pv(["user", "add", "bob", "--store", s.store, "--passfile", empty]), 7, "password is empty")

        let short = s.root + "/short-pass"
        try Sandbox.writeSecret("seven77\n", to: short)
        // The rule must be stated, not just "too short".
        assertFailure(s.pv(["user", "add", "bob", "--store", s.store, "--passfile", short]), 8, "at least 8 characters")

        // Eight code points in 10 bytes are enough (code points, not bytes).
        let umlaut = s.root + "/umlaut-pass"
        try Sandbox.writeSecret("pässwörd", to: umlaut)
        XCTAssertEqual(s.pv(["user", "add", "bob", "--store", s.store, "--passfile", umlaut]).status, 0)
        // None of the refused attempts left a record behind.
        XCTAssertEqual(AccountFixtures.recordFiles(s).count, 2)
    }

    /// Bytes that are not UTF-8 used to be decoded to U+FFFD, so the names '\xff\xfe' and
    /// '\xff\xfd' were one account ("account exists", and 'check' said yes for the other).
    /// A password that cannot be read exits 27 with one line saying why (it used to be 1,
    /// "other failure", like any unexpected error): a missing passfile, a failing --extpass
    /// command, a line over 4096 bytes, no terminal to ask on. Nothing is mounted.
    func testAPasswordThatCannotBeReadExits27() throws {
        let s = Sandbox("acct-pw-unread")
        s.initStore()
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let long = s.root + "/long"
        try Sandbox.writeSecret(String(repeating: "a", count: 5000), to: long)
        let mount = ["mount", mp, "--store", s.store, "--user", "alice", "--no-dbus"]
        for (extra, needle) in [(["--passfile", s.root + "/missing"], "cannot read the password from"),
                                (["--extpass", "false"], "the --extpass command failed"),
                                (["--passfile", long], "longer than 4096 bytes")] {
            assertFailure(s.pv(mount + extra), 27, needle, extra.joined(separator: " "))
        }
        // No controlling terminal (a new session) and no password option.
        let noTTY = Harness.run(["setsid", "-w", Harness.binary] + mount, stdin: "", env: s.env, timeout: 60)
        assertFailure(noTTY, 27, "no terminal to ask the password on", "setsid")
        XCTAssertFalse(Harness.isMounted(mp))
    }

    /// Started by a caller that ignores SIGCHLD (the setting survives exec), photovault had
    /// its children reaped by the kernel: waitpid gave ECHILD (the mount daemon looked reaped
    /// by someone else) and a failing --extpass command's status read as 0, a success.
    func testAnIgnoredSIGCHLDFromTheCallerDoesNotHideAFailingExtpass() {
        let s = Sandbox("acct-sigchld")
        s.initStore()
        let failing = "cat \(Sandbox.quote(s.passfile)); exit 3"
        let r = Harness.run(["perl", "-e", "$SIG{CHLD} = 'IGNORE'; exec @ARGV or die", Harness.binary,
                             "class", "list", "/", "--store", s.store, "--user", "alice", "--extpass", failing], env: s.env)
        assertFailure(r, 27, "the --extpass command failed (exit status 3)")
        // The same command with a succeeding --extpass still works there.
        let ok = Harness.run(["perl", "-e", "$SIG{CHLD} = 'IGNORE'; exec @ARGV or die", Harness.binary,
                              "class", "list", "/", "--store", s.store, "--user", "alice", "--extpass", "cat \(Sandbox.quote(s.passfile))"],
                             env: s.env)
        XCTAssertEqual(ok.status, 0, ok.stderr)
    }

    func testUserNameThatIsNotUTF8IsRefused() {
        let s = Sandbox("acct-utf8")
        s.initStore(users: [])
        func pv(_ name: String, _ rest: String) -> Harness.Result {
            let pass = rest == "check" ? "" : " --passfile '\(s.passfile)'"
            return Harness.sh("'\(Harness.binary)' user \(rest) $'\(name)' --store '\(s.store)'" + pass, env: s.env)
        }
        assertFailure(pv("\\xff\\xfe", "add"), 2, "user name is not valid UTF-8")
        XCTAssertEqual(AccountFixtures.recordFiles(s).count, 0)
        // The valid name made of two real U+FFFD characters is still an ordinary name.
        XCTAssertEqual(pv("\\xef\\xbf\\xbd\\xef\\xbf\\xbd", "add").status, 0)
        assertFailure(pv("\\xff\\xfd", "check"), 2, "user name is not valid UTF-8")
        assertFailure(pv("\\xff\\xfd", "remove"), 2, "user name is not valid UTF-8")
        XCTAssertEqual(AccountFixtures.recordFiles(s).count, 1)
    }

    func testUserListCountsAndCheckAnswersWithoutPassword() {
        let s = Sandbox("acct-list")
        s.initStore(users: [])
        let zero = s.pv(["user", "list", "--store", s.store])
        XCTAssertEqual(zero.status, 0, zero.stderr)
        XCTAssertTrue(zero.stdout.hasPrefix("0 accounts"), zero.stdout)
        s.addUser("alice")
        s.addUser("bob")
        let two = s.pv(["user", "list", "--store", s.store])
        XCTAssertEqual(two.status, 0, two.stderr)
        XCTAssertTrue(two.stdout.hasPrefix("2 accounts"), two.stdout)
        XCTAssertFalse(two.stdout.contains("alice"), "names are not stored, so list cannot show them")

        let yes = s.pv(["user", "check", "alice", "--store", s.store])
        XCTAssertEqual(yes.status, 0, yes.stderr)
        XCTAssertEqual(yes.stdout + yes.stderr, "", "user check prints nothing, as its help says")
        assertFailure(s.pv(["user", "check", "carol", "--store", s.store]), 4, "no such account")
        // Names are not case folded.
        assertFailure(s.pv(["user", "check", "Alice", "--store", s.store]), 4, "no such account")
    }

    /// The binary run as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: mode bits bind it.
    static let withoutDACOverride = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                                     "--bounding-set=-dac_override,-dac_read_search", Harness.binary]

    /// An account whose record cannot be looked up (accounts/ unreadable: root without
    /// CAP_DAC_OVERRIDE here) is that error, exit 1, not "no such account" (exit 4), which
    /// `user check` used to answer and every password command to say.
    func testAnAccountThatCannotBeLookedUpIsNotCalledMissing() {
        let s = Sandbox("acct-eacces")
        s.initStore()
        let accounts = s.store + "/accounts"
        XCTAssertEqual(chmod(accounts, 0), 0)
        defer { chmod(accounts, 0o700) }
        for args in [["user", "check", "alice"], ["user", "passwd", "alice", "--passfile", s.passfile, "--new-passfile", s.passfile],
                     ["export", "--user", "alice", "--passfile", s.passfile, "/", s.root + "/out"]] {
            let r = Harness.run(Self.withoutDACOverride + args + ["--store", s.store], env: s.env, timeout: 60)
            assertFailure(r, 1, "photovault: look up the account record in \(accounts): Permission denied", "\(args)")
        }
    }

    /// A store whose config cannot be looked up (the store directory unreadable) is that
    /// error, exit 1, not "no PhotoVault store at ... (run 'photovault init')" (exit 3).
    func testAStoreThatCannotBeReadIsNotCalledMissing() {
        let s = Sandbox("acct-store-eacces")
        s.initStore()
        XCTAssertEqual(chmod(s.store, 0), 0)
        defer { chmod(s.store, 0o700) }
        for args in [["user", "list"], ["user", "check", "alice"], ["export", "--user", "alice", "--passfile", s.passfile, "/", s.root + "/out"]] {
            let r = Harness.run(Self.withoutDACOverride + args + ["--store", s.store], env: s.env, timeout: 60)
            assertFailure(r, 1, "photovault: look up \(s.store)/photovault.conf: Permission denied", "\(args)")
        }
    }

    func testStoreNotInitialisedIsExit3ForEveryAccountCommand() {
        let s = Sandbox("acct-noinit")
        for args in [["user", "add", "alice", "--passfile", s.passfile], ["user", "list"], ["user", "check", "alice"],
                     ["user", "passwd", "alice", "--passfile", s.passfile, "--new-passfile", s.passfile],
                     ["user", "remove", "alice", "--passfile", s.passfile]] {
            let r = s.pv(args + ["--store", s.store])
            assertFailure(r, 3, "no PhotoVault store", "\(args)")
        }
        let mp = s.root + "/mnt"
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        assertFailure(s.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus"]),
                      3, "no PhotoVault store")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.store), "a failed command must not create the store")
    }

    /// The password changes, the old one stops working, and no byte of the photos changes.
    func testPasswdRewrapsOnlyAndOldPasswordStopsWorking() throws {
        let s = Sandbox("acct-passwd")
        s.initStore()
        let mp = s.mount()
        let photo = AccountFixtures.randomBytes(300_000)
        try Data(photo).write(to: URL(fileURLWithPath: mp + "/IMG_0001.jpg"))
        s.unmount(mp)
        let treeBefore = AccountFixtures.snapshot(s.store + "/users")
        XCTAssertFalse(treeBefore.isEmpty)
        let recordBefore = try AccountFixtures.onlyRecordBytes(s)

        let newPass = s.root + "/new-pass"
        try Sandbox.writeSecret("a brand new passphrase\n", to: newPass)
        let r = s.pv(["user", "passwd", "alice", "--store", s.store, "--passfile", s.passfile, "--new-passfile", newPass])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertNotEqual(try AccountFixtures.onlyRecordBytes(s), recordBefore, "the record must be rewritten")
        XCTAssertEqual(AccountFixtures.snapshot(s.store + "/users"), treeBefore,
                       "a password change must not touch any file of the tree (no re-encryption)")

        // Old password: refused. New password: the same photo, byte for byte.
        let mp2 = s.root + "/mnt2"
        try FileManager.default.createDirectory(atPath: mp2, withIntermediateDirectories: true)
        assertFailure(s.pv(["mount", mp2, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus"]),
                      5, "wrong password")
        XCTAssertFalse(Harness.isMounted(mp2))
        let m = s.mount(at: "mnt2", passfile: newPass)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: m + "/IMG_0001.jpg")), Data(photo))
        s.unmount(m)
    }

    /// `user passwd` whose fsync of accounts/ fails (EIO injected with strace) after the new
    /// record took its name: one line saying the new password is in effect and that only its
    /// durability is unknown, exit 28. It said "fsync ...: Input/output error", exit 1, as if
    /// the change had failed, while the old password no longer worked.
    func testPasswdWhoseDirectorySyncFailsSaysTheNewPasswordIsInEffect() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let s = Sandbox("acct-passwd-eio")
        s.initStore()
        let newPass = s.root + "/new-pass"
        try Sandbox.writeSecret("a brand new passphrase\n", to: newPass)
        let r = Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", s.store + "/accounts",
                             "-e", "trace=fsync", "-e", "inject=fsync:error=EIO",
                             Harness.binary, "user", "passwd", "alice", "--store", s.store,
                             "--passfile", s.passfile, "--new-passfile", newPass], env: s.env, timeout: 60)
        assertFailure(r, 28, "photovault: the new password is in effect, but the change could not be confirmed on disk "
                      + "(fsync of its directory: Input/output error): after a crash the old password may be the one that works again")
        XCTAssertEqual(r.stdout, "")
        // It is: the new password changes it back, the old one is refused.
        assertFailure(s.pv(["user", "passwd", "alice", "--store", s.store, "--passfile", s.passfile, "--new-passfile", newPass]),
                      5, "wrong password")
        let back = s.pv(["user", "passwd", "alice", "--store", s.store, "--passfile", newPass, "--new-passfile", s.passfile])
        XCTAssertEqual(back.status, 0, back.stderr)
    }

    /// A missing account (passwd, reset-password, remove) and a wrong current password
    /// (passwd) are said before the next secret is asked for. Run without a terminal
    /// (setsid), the old order showed only the next prompt's failure: 'no terminal', exit 27.
    func testNoSuchAccountAndAWrongCurrentPasswordAreSaidBeforeTheNextPrompt() throws {
        let s = Sandbox("acct-order")
        s.initStore()
        let wrong = s.root + "/wrong-pass"
        try Sandbox.writeSecret("not the password\n", to: wrong)
        func noTTY(_ args: [String]) -> Harness.Result {
            Harness.run(["setsid", "-w", Harness.binary] + args + ["--store", s.store], stdin: "", env: s.env, timeout: 60)
        }
        assertFailure(noTTY(["user", "passwd", "alice", "--passfile", wrong]), 5, "wrong password", "passwd, wrong password")
        assertFailure(noTTY(["user", "passwd", "bob"]), 4, "no such account", "passwd bob")
        assertFailure(noTTY(["user", "reset-password", "bob"]), 4, "no such account", "reset-password bob")
        assertFailure(noTTY(["user", "remove", "bob"]), 4, "no such account", "remove bob")
        // The right current password still gets as far as asking for the new one.
        assertFailure(noTTY(["user", "passwd", "alice", "--passfile", s.passfile]), 27, "no terminal", "passwd alice")
    }

    /// mount, unlock and the offline commands that open an account say 'no such account'
    /// (exit 4) before the password is read: an --extpass command is not run and a terminal
    /// is not asked (setsid: no terminal). They used to run the command, or say 'no terminal'
    /// (exit 27), and only then 'no such account'. An existing account still opens.
    func testNoSuchAccountIsSaidBeforeThePasswordForMountUnlockAndOfflineCommands() throws {
        let s = Sandbox("acct-order-open")
        s.initStore()
        let mp = s.mount()
        let ran = s.root + "/extpass-ran"
        let extpass = "touch \(Sandbox.quote(ran)); cat \(Sandbox.quote(s.passfile))"
        let mpBob = s.root + "/mnt-bob"
        try FileManager.default.createDirectory(atPath: mpBob, withIntermediateDirectories: true)
        let commands: [[String]] = [["mount", mpBob, "--no-dbus"], ["unlock", mp], ["import", s.passfile, "/"],
                                    ["export", "/", s.root + "/out"], ["fsck"], ["class", "list", "/"],
                                    ["class", "get", "/"], ["class", "set", "/", "complete"]]
        for cmd in commands {
            let r = s.pv(cmd + ["--store", s.store, "--user", "bob", "--extpass", extpass])
            assertFailure(r, 4, "no such account", "\(cmd) with --extpass")
            XCTAssertFalse(FileManager.default.fileExists(atPath: ran), "\(cmd) ran --extpass for a missing account")
            let tty = Harness.run(["setsid", "-w", Harness.binary] + cmd + ["--store", s.store, "--user", "bob"],
                                  stdin: "", env: s.env, timeout: 60)
            assertFailure(tty, 4, "no such account", "\(cmd) without a terminal")
        }
        XCTAssertFalse(Harness.isMounted(mpBob))
        // An existing account still reads the password (and runs --extpass) as before.
        let ok = s.pv(["class", "list", "/", "--store", s.store, "--user", "alice", "--extpass", extpass])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: ran))
        s.unmount(mp)
    }

    /// `user add` whose recovery key cannot be written (stdout on a full device, a pipe
    /// nobody reads, or closed) fails with one line and leaves no account: the key is shown only once.
    /// The account used to stay with a key nobody saw: exit 19 'no space left on the device
    /// holding the store' (wrong device, too), or killed by SIGPIPE (141) without a word.
    func testAnAccountWhoseRecoveryKeyCouldNotBeShownIsNotCreated() throws {
        let s = Sandbox("acct-key-unseen")
        s.initStore(users: [])
        let add = [Harness.binary, "user", "add", "bob", "--store", s.store, "--passfile", s.passfile]
        let full = Harness.run(["bash", "-c", "exec \"$@\" > /dev/full", "bash"] + add, env: s.env, timeout: 60)
        assertFailure(full, 1, "photovault: the recovery key could not be shown (writing to standard output: No space left on "
                      + "device), so the account was not created: run the command again with its output on a terminal or in a file")
        // A pipe whose reader is gone; the child gets SIGPIPE's default action, as from a shell.
        let closed = Harness.run(["python3", "-c", """
        import os, subprocess, sys
        r, w = os.pipe()
        os.close(r)
        p = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE)
        sys.stdout.write("%d\\n%s" % (p.returncode, p.stderr.decode()))
        """] + add, env: s.env, timeout: 60)
        XCTAssertEqual(closed.stdout, "1\nphotovault: the recovery key could not be shown (writing to standard output: Broken "
                       + "pipe), so the account was not created: run the command again with its output on a terminal or in a file\n")
        // A closed stdout (the key used to go into the /dev/null put there, exit 0).
        let shut = Harness.run(["bash", "-c", "exec \"$@\" >&-", "bash"] + add, env: s.env, timeout: 60)
        assertFailure(shut, 1, "photovault: the recovery key could not be shown (writing to standard output: Bad file "
                      + "descriptor), so the account was not created")
        assertFailure(s.pv(["user", "check", "bob", "--store", s.store]), 4, "no such account")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: s.store + "/users"), [])
        // With somewhere to show the key, the same add works.
        let ok = s.pv(["user", "add", "bob", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertNotNil(AccountFixtures.recoveryKey(in: ok.stdout))
    }

    /// A command whose output cannot be written (stdout on a full device) fails with one line,
    /// as `ls` does: `user list`, `class list` and `--help` exited 0 with their output lost.
    /// A stdout the caller closed (`>&-`) is output it discarded: still exit 0.
    func testOutputThatCannotBeWrittenIsAFailure() {
        let s = Sandbox("acct-out-full")
        s.initStore()
        let store = Sandbox.quote(s.store), pf = Sandbox.quote(s.passfile), pv = Sandbox.quote(Harness.binary)
        s.ok("echo x | \(pv) import - /a.jpg --store \(store) --user alice --passfile \(pf)")
        for line in ["user list --store \(store)", "class list / --store \(store) --user alice --passfile \(pf)", "--help"] {
            assertFailure(s.run("\(pv) \(line) > /dev/full"), 19,
                          "photovault: no space left on the device holding standard output", line)
        }
        let closed = s.run("\(pv) user list --store \(store) >&-")
        XCTAssertEqual(closed.status, 0, closed.stderr)
        XCTAssertEqual(closed.stderr, "")
    }

    /// remove --delete-photos whose tree cannot be deleted to the end (an immutable file,
    /// chattr +i) says that the account is removed all the same; it said only 'unlink ...:
    /// Operation not permitted', as if nothing had happened, and a retry said 'no such account'.
    func testRemoveWhosePhotosCannotAllBeDeletedSaysTheAccountIsGone() throws {
        let s = Sandbox("acct-remove-eperm")
        s.initStore()
        let tree = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: s.store + "/users").first)
        let pinned = s.store + "/users/" + tree + "/.pvdir"
        XCTAssertEqual(Harness.run(["chattr", "+i", pinned]).status, 0, "chattr +i needs root on ext4/xfs/btrfs")
        defer { _ = Harness.run(["chattr", "-i", pinned]) }
        let r = s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile, "--delete-photos"])
        assertFailure(r, 1, "photovault: the account is removed, but deleting its photos stopped at unlink \(pinned): "
                      + "Operation not permitted")
        assertFailure(s.pv(["user", "check", "alice", "--store", s.store]), 4, "no such account")
    }

    func testResetPasswordWithTheRecoveryKey() throws {
        let s = Sandbox("acct-reset")
        s.initStore(users: [])
        let add = s.pv(["user", "add", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(add.status, 0, add.stderr)
        let key = try XCTUnwrap(AccountFixtures.recoveryKey(in: add.stdout))
        // bob's key is well-formed but belongs to another account.
        let addBob = s.pv(["user", "add", "bob", "--store", s.store, "--passfile", s.passfile])
        let bobKey = try XCTUnwrap(AccountFixtures.recoveryKey(in: addBob.stdout))
        XCTAssertNotEqual(key, bobKey)

        let newPass = s.root + "/new-pass"
        try Sandbox.writeSecret("reset by recovery key\n", to: newPass)
        let keyFile = s.root + "/key"
        func reset(_ k: String) -> Harness.Result {
            try? Sandbox.writeSecret(k + "\n", to: keyFile)
            return s.pv(["user", "reset-password", "alice", "--store", s.store, "--recovery-key-file", keyFile,
                         "--new-passfile", newPass])
        }
        assertFailure(reset(bobKey), 2, "does not open this account")
        // One character changed: caught by the checksum as a typo.
        var typo = Array(key)
        typo[0] = typo[0] == "A" ? "B" : "A"
        assertFailure(reset(String(typo)), 2, "mistyped")
        // Still the old password after the refusals.
        XCTAssertEqual(AccountFixtures.mountWorks(s, passfile: s.passfile), 0)

        // Lower case and without dashes is accepted (parsing ignores both).
        let ok = reset(key.lowercased().replacingOccurrences(of: "-", with: " "))
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertEqual(AccountFixtures.mountWorks(s, passfile: s.passfile), 5, "the old password must stop working")
        XCTAssertEqual(AccountFixtures.mountWorks(s, passfile: newPass), 0)
        // The recovery key stays valid after use.
        try Sandbox.writeSecret("second reset password\n", to: newPass)
        XCTAssertEqual(reset(key).status, 0)
        XCTAssertEqual(AccountFixtures.mountWorks(s, passfile: newPass), 0)
    }

    /// --delete-photos does not delete a tree its daemon is serving: refused (store busy),
    /// nothing removed; after the unmount it goes through.
    func testRemoveWithDeletePhotosWaitsForTheUnmount() throws {
        let s = Sandbox("acct-remove-mounted")
        s.initStore()
        let mp = s.mount()
        try Data("MOUNTED-photo".utf8).write(to: URL(fileURLWithPath: mp + "/p.jpg"))
        let busy = s.pv(["user", "remove", "alice", "--delete-photos", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(busy.status, 11, busy.stdout + busy.stderr)
        XCTAssertEqual(busy.stderr.split(separator: "\n").count, 1, busy.stderr)
        // It names the mount, not another command to wait for ('try again' would fail again).
        XCTAssertTrue(busy.stderr.contains("the vault of alice is mounted at \(mp):"), busy.stderr)
        XCTAssertTrue(busy.stderr.contains("unmount it before 'user remove --delete-photos'"), busy.stderr)
        XCTAssertEqual(s.pv(["user", "check", "alice", "--store", s.store]).status, 0, "the refused remove removed the account")
        XCTAssertEqual(try String(contentsOfFile: mp + "/p.jpg", encoding: .utf8), "MOUNTED-photo")
        s.unmount(mp)
        let done = s.pv(["user", "remove", "alice", "--delete-photos", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(done.status, 0, done.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: s.store + "/users"), [])
        s.assertNoPlaintext(["MOUNTED-photo"])
    }

    /// Without --delete-photos too, a mounted vault's account is not removed: the remove used
    /// to succeed ("its encrypted photos stay in the store, unreadable") while the mount went on
    /// taking photos into a tree that nothing could open once it was unmounted. Another
    /// account of the store is removed as usual meanwhile.
    func testRemoveOfAMountedAccountIsRefusedWithoutDeletePhotosToo() throws {
        let s = Sandbox("acct-remove-live")
        s.initStore(users: ["alice", "bob"])
        let mp = s.mount()
        let t0 = Date()
        let busy = s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(busy.status, 11, busy.stdout + busy.stderr)
        // At once (the mount is in the registry), not after the 10 s lock timeout, during
        // which every other account's change waited on the store's lock.
        XCTAssertLessThan(Date().timeIntervalSince(t0), 5)
        // From another session (another runtime directory) too: the daemon's lock names it.
        var otherSession = s.env
        otherSession["XDG_RUNTIME_DIR"] = s.root + "/other-session"
        XCTAssertEqual(mkdir(s.root + "/other-session", 0o700), 0)
        let t1 = Date()
        let elsewhere = Harness.pv(["user", "remove", "alice", "--delete-photos", "--store", s.store, "--passfile", s.passfile],
                                   env: otherSession)
        XCTAssertEqual(elsewhere.status, 11, elsewhere.stdout + elsewhere.stderr)
        XCTAssertEqual(elsewhere.stderr, "photovault: the vault of alice is mounted at \(mp): unmount it before "
                       + "'user remove --delete-photos' (nothing was removed)\n")
        XCTAssertLessThan(Date().timeIntervalSince(t1), 5)
        XCTAssertEqual(busy.stderr, "photovault: the vault of alice is mounted at \(mp): unmount it before 'user remove' "
                       + "(nothing was removed)\n")
        XCTAssertEqual(busy.stdout, "")
        XCTAssertEqual(s.pv(["user", "check", "alice", "--store", s.store]).status, 0, "the refused remove removed the account")
        let bob = s.pv(["user", "remove", "bob", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(bob.status, 0, bob.stderr)
        // What the mount takes after the refusal is the account's, and opens again.
        try Data("TAKEN-after-refusal".utf8).write(to: URL(fileURLWithPath: mp + "/p.jpg"))
        s.unmount(mp)
        let again = s.mount()
        XCTAssertEqual(try String(contentsOfFile: again + "/p.jpg", encoding: .utf8), "TAKEN-after-refusal")
        s.unmount(again)
        let done = s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(done.status, 0, done.stderr)
        XCTAssertTrue(done.stdout.contains("stay in the store"), done.stdout)
    }

    /// An account is not removed under an offline import into its tree, with or without
    /// --delete-photos: the remove waits for the import's tree lock and then gives up (store
    /// busy, exit 11, the account still there). Without --delete-photos it used to succeed at
    /// once, and the import then finished into a tree nothing could open, exit 0.
    func testRemoveIsRefusedWhileAnImportWritesIntoTheTree() throws {
        let s = Sandbox("acct-remove-import")
        s.initStore()
        let q = Sandbox.quote(s.root)
        let importing = s.run("""
        cd \(q) && mkfifo in
        (head -c 100000 /dev/urandom; sleep 30) > in &
        writer=$!
        \(OfflineCommandTests.pvLine(s, ["import", "-", "/card/a.jpg"])) < in > import.out 2>&1 &
        importer=$!
        sleep 1
        \(([Harness.binary, "user", "remove", "alice", "--store", s.store, "--passfile", s.passfile]).map(Sandbox.quote).joined(separator: " ")) > remove.out 2>&1
        echo "remove $?"
        kill $writer; wait $importer; echo "import $?"
        """, timeout: 60)
        XCTAssertEqual(importing.stdout, "remove 11\nimport 0\n", (try? String(contentsOfFile: s.root + "/remove.out", encoding: .utf8)) ?? "")
        XCTAssertEqual(s.pv(["user", "check", "alice", "--store", s.store]).status, 0, "the account must stay")
        XCTAssertEqual(s.ok("\(OfflineCommandTests.pvLine(s, ["export", "/card/a.jpg", "-"])) | wc -c"), "100000\n")
        let remove = s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(remove.status, 0, remove.stderr)
    }

    /// A record's temp file that a killed writer left in accounts/ (a SIGTERM between its
    /// creation and its rename) is removed by the next account change once it is ten minutes
    /// old; a younger one, as a login's throttle count may be writing at that moment, stays.
    /// Left-over temp files used to stay for good.
    func testTempFilesThatKilledWritersLeftInAccountsAreRemovedByTheNextChange() throws {
        let s = Sandbox("acct-stale-temp")
        s.initStore()
        let q = Sandbox.quote(s.store + "/accounts")
        s.ok("""
        cd \(q) && head -c 300 /dev/urandom > .pvtmp-OLDOLDOL && touch -d '-1 hour' .pvtmp-OLDOLDOL \
          && head -c 300 /dev/urandom > .pvtmp-NEWNEWNE
        """)
        s.addUser("bob")
        XCTAssertEqual(s.ok("cd \(q) && ls -A | grep -F .pvtmp- || true"), ".pvtmp-NEWNEWNE\n")
    }

    /// Without --delete-photos nothing in the tree changes, also when it was never mounted:
    /// the mount-lock file that the check for a mount needs is not made there (it dated the
    /// removal on the tree, next to the record's disappearance, telling which tree was
    /// orphaned when).
    func testRemoveWithoutDeletePhotosLeavesANeverMountedTreeUntouched() throws {
        let s = Sandbox("acct-remove-untouched")
        s.initStore(users: ["alice", "bob"])
        let snapshot = { s.ok("cd \(Sandbox.quote(s.store))/users && find . -printf '%p %y %m %s %T@ %C@\\n' | LC_ALL=C sort") }
        let before = snapshot()
        usleep(20_000)
        let r = s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(snapshot(), before)
        XCTAssertFalse(before.contains(".pvmount"), before)
    }

    func testRemoveNeedsThePasswordAndKeepsPhotosUnlessAsked() throws {
        let s = Sandbox("acct-remove")
        s.initStore(users: ["alice", "bob"])
        for user in ["alice", "bob"] {
            let mp = s.mount(user)
            try Data("photo of \(user)".utf8).write(to: URL(fileURLWithPath: mp + "/p.jpg"))
            s.unmount(mp)
        }
        let trees = { (try? FileManager.default.contentsOfDirectory(atPath: s.store + "/users").sorted()) ?? [] }
        XCTAssertEqual(trees().count, 2)
        let wrong = s.root + "/wrong"
        try Sandbox.writeSecret("not the password\n", to: wrong)
        assertFailure(s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", wrong]), 5, "wrong password")
        XCTAssertEqual(s.pv(["user", "check", "alice", "--store", s.store]).status, 0, "a refused remove removed")

        let keep = s.pv(["user", "remove", "alice", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(keep.status, 0, keep.stderr)
        XCTAssertTrue(keep.stdout.contains("stay in the store"), keep.stdout)
        assertFailure(s.pv(["user", "check", "alice", "--store", s.store]), 4, "no such account")
        XCTAssertEqual(trees().count, 2, "photos must stay without --delete-photos")
        XCTAssertEqual(AccountFixtures.recordFiles(s).count, 1)

        let before = trees()
        let del = s.pv(["user", "remove", "bob", "--store", s.store, "--passfile", s.passfile, "--delete-photos"])
        XCTAssertEqual(del.status, 0, del.stderr)
        XCTAssertEqual(trees().count, 1, "--delete-photos must remove bob's tree")
        XCTAssertTrue(Set(before).isSuperset(of: trees()))
        XCTAssertEqual(AccountFixtures.recordFiles(s).count, 0)
        assertFailure(s.pv(["user", "remove", "bob", "--store", s.store, "--passfile", s.passfile]), 4, "no such account")
    }

    func testPasswordStdinAndExtpass() throws {
        let s = Sandbox("acct-pwsrc")
        s.initStore(users: [])
        let add = s.pv(["user", "add", "carol", "--store", s.store, "--password-stdin"], stdin: "stdin password 1\n")
        XCTAssertEqual(add.status, 0, add.stderr)
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        // --extpass: the first line the command prints.
        let ok = s.pv(["mount", mp, "--store", s.store, "--user", "carol", "--no-dbus",
                       "--extpass", "printf 'stdin password 1\\nignored second line\\n'"])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) })
        s.mounts.append(mp)
        s.unmount(mp)
        assertFailure(s.pv(["mount", mp, "--store", s.store, "--user", "carol", "--no-dbus", "--extpass", "echo nope-nope-nope"]),
                      5, "wrong password")
        assertFailure(s.pv(["mount", mp, "--store", s.store, "--user", "carol", "--no-dbus", "--password-stdin"],
                           stdin: "stdin password 2\n"), 5, "wrong password")
        let viaStdin = s.pv(["mount", mp, "--store", s.store, "--user", "carol", "--no-dbus", "--password-stdin"],
                            stdin: "stdin password 1\n")
        XCTAssertEqual(viaStdin.status, 0, viaStdin.stderr)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) })
        s.unmount(mp)
    }
}

/// Exit code, and exactly one line on stderr that starts with "photovault:" and says `needle`.
func assertFailure(_ r: Harness.Result, _ code: Int32, _ needle: String, _ context: String = "",
                   file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(r.status, code, "\(context) exit code; stderr: \(r.stderr)", file: file, line: line)
    let lines = r.stderr.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
    XCTAssertEqual(lines.count, 1, "\(context) want one error line, got: \(r.stderr)", file: file, line: line)
    XCTAssertTrue(lines.first?.hasPrefix("photovault: ") ?? false, "\(context) \(r.stderr)", file: file, line: line)
    XCTAssertTrue(r.stderr.contains(needle), "\(context) stderr lacks '\(needle)': \(r.stderr)", file: file, line: line)
}

/// Store inspection shared by the account tests.
enum AccountFixtures {
    /// The recovery key `user add` printed: 14 groups of 4 base32 characters.
    static func recoveryKey(in stdout: String) -> String? {
        let pattern = try! NSRegularExpression(pattern: "[A-Z2-7]{4}(-[A-Z2-7]{4}){13}")
        let ns = stdout as NSString
        guard let m = pattern.firstMatch(in: stdout, range: NSRange(location: 0, length: ns.length)) else { return nil }
        return ns.substring(with: m.range)
    }

    static func recordFiles(_ s: Sandbox) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: s.store + "/accounts")) ?? [])
            .filter { $0.hasSuffix(".rec") }.sorted().map { s.store + "/accounts/" + $0 }
    }

    static func onlyRecordBytes(_ s: Sandbox) throws -> Data {
        let files = recordFiles(s)
        XCTAssertEqual(files.count, 1)
        return try Data(contentsOf: URL(fileURLWithPath: try XCTUnwrap(files.first)))
    }

    /// Relative path -> bytes of every regular file (and "dir"/"link" markers) below `dir`.
    static func snapshot(_ dir: String) -> [String: Data] {
        var out: [String: Data] = [:]
        guard let e = FileManager.default.enumerator(atPath: dir) else { return out }
        while let rel = e.nextObject() as? String {
            let p = dir + "/" + rel
            var st = stat()
            guard lstat(p, &st) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFREG: out[rel] = FileManager.default.contents(atPath: p) ?? Data()
            case S_IFDIR: out[rel] = Data("dir".utf8)
            default: out[rel] = Data("other".utf8)
            }
        }
        return out
    }

    static func randomBytes(_ n: Int) -> [UInt8] {
        var g = SystemRandomNumberGenerator()
        return (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
    }

    /// Mounts alice with `passfile` and unmounts again; returns the mount's exit code.
    static func mountWorks(_ s: Sandbox, user: String = "alice", passfile: String) -> Int32 {
        let mp = s.root + "/probe-\(user)"
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let r = s.pv(["mount", mp, "--store", s.store, "--user", user, "--passfile", passfile, "--no-dbus"])
        if r.status == 0 {
            _ = Harness.waitUntil(5) { Harness.isMounted(mp) }
            _ = s.pv(["unmount", mp])
            Harness.forceUnmount(mp)
        }
        return r.status
    }
}

extension Sandbox {
    /// A password or recovery-key file as a careful user keeps it (mode 0600, like `passfile`),
    /// so photovault's warning about a file other users can read appears only where a test
    /// asks for it.
    static func writeSecret(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        guard chmod(path, 0o600) == 0 else { throw CocoaError(.fileWriteNoPermission) }
    }
}
