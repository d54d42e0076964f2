import Foundation
import XCTest

/// Concurrency, wrong-password delays and secret hygiene of the account commands.
final class AccountSecurityTests: XCTestCase {
    /// Two `user add` processes at once (accounts/.lock serialises them): both accounts exist.
    func testConcurrentUserAddFromTwoProcesses() {
        let s = Sandbox("acct-race")
        s.initStore(users: [])
        for round in 0..<3 {
            let names = ["bob\(round)", "carol\(round)"]
            var results = [Harness.Result?](repeating: nil, count: 2)
            let lock = NSLock()
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let r = s.pv(["user", "add", names[i], "--store", s.store, "--passfile", s.passfile])
                lock.withLock { results[i] = r }
            }
            for (i, r) in results.enumerated() { XCTAssertEqual(r?.status, 0, "\(names[i]): \(r?.stderr ?? "")") }
            for n in names {
                XCTAssertEqual(s.pv(["user", "check", n, "--store", s.store]).status, 0, "\(n) missing after the race")
            }
        }
        let list = s.pv(["user", "list", "--store", s.store])
        XCTAssertTrue(list.stdout.hasPrefix("6 accounts"), list.stdout)
        // The trees of all six accounts exist, and no temporary file was left behind.
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: s.store + "/users"))?.count, 6)
        let leftovers = Sandbox.scanNames(s.store) { $0.contains(".pvtmp-") }
        XCTAssertEqual(leftovers, [])
    }

    /// Wrong passwords are answered more and more slowly (CREDENTIALS.md section 9).
    func testWrongPasswordsGetAnIncreasingDelay() throws {
        let s = Sandbox("acct-throttle")
        s.initStore()
        let wrong = s.root + "/wrong"
        try Sandbox.writeSecret("definitely wrong\n", to: wrong)
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        var times: [Double] = []
        for _ in 0..<6 {
            let t0 = Date()
            let r = s.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", wrong, "--no-dbus"])
            times.append(Date().timeIntervalSince(t0))
            assertFailure(r, 5, "wrong password")
        }
        print("wrong-password attempt durations (s): " + times.map { String(format: "%.2f", $0) }.joined(separator: " "))
        // delay(n) is 0 for n <= 3 failures, then 1 s, 2 s...: the 5th attempt waits about 1 s,
        // the 6th about 2 s.
        XCTAssertGreaterThan(times[4], times[0] + 0.6, "5th attempt not slower than the 1st: \(times)")
        XCTAssertGreaterThan(times[5], times[4] + 0.4, "6th attempt not slower than the 5th: \(times)")
        // The right password still works (after its own wait) and clears the counter.
        let t0 = Date()
        let ok = s.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus"])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        print(String(format: "right password after 6 failures took %.2f s", Date().timeIntervalSince(t0)))
        s.mounts.append(mp)
        _ = Harness.waitUntil(5) { Harness.isMounted(mp) }
        s.unmount(mp)
        let throttles = try FileManager.default.contentsOfDirectory(atPath: s.store + "/accounts").filter { $0.hasSuffix(".throttle") }
        XCTAssertEqual(throttles, [], "a right password must delete the counter")
        let t1 = Date()
        XCTAssertEqual(AccountFixtures.mountWorks(s, passfile: wrong), 5)
        XCTAssertLessThan(Date().timeIntervalSince(t1), times[5], "the counter was not reset")
    }

    /// A store whose filesystem is full cannot count a wrong password: guesses there used to
    /// be judged all the same, uncounted, so filling the disk turned the delays off. Now a
    /// password whose attempt cannot be counted is not checked at all, the right one neither:
    /// one line, exit 19 (the full-disk code). On a full disk a count goes into a block the
    /// throttle holds already: the spare block `accounts/throttle-reserve`, then the count
    /// file itself, overwritten in place. So every guess is counted and judged, and the owner
    /// gets in, after wrong guesses too (issue 35: one wrong guess used to use up the spare
    /// block, and the right password was refused until space was freed). Only without either
    /// is nothing judged. With space back, attempts count again.
    func testAFullStoreRefusesToCheckAPasswordItCannotCount() throws {
        let s = Sandbox("acct-full")
        let release = s.storeOnOwnFilesystem(size: "2m")
        defer { release() }
        s.initStore()
        let wrong = s.root + "/wrong"
        try Sandbox.writeSecret("definitely wrong\n", to: wrong)
        let fill = s.run("dd if=/dev/zero of=\(Sandbox.quote(s.store))/filler bs=4k")
        XCTAssertTrue(fill.stderr.contains("No space left on device"), fill.stderr)
        func fsck(_ passfile: String) -> Harness.Result {
            s.pv(["fsck", "--store", s.store, "--user", "alice", "--passfile", passfile])
        }
        let accounts = s.store + "/accounts"
        func entries(_ keep: (String) -> Bool) throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: accounts).filter(keep).sorted()
        }
        XCTAssertEqual(try entries { $0 == "throttle-reserve" }, ["throttle-reserve"], "user add keeps a spare block")
        // The owner still gets in (to free space through the mount): each right password is
        // counted in the spare block's place, and deleting the count makes the block again.
        for i in 0..<3 {
            let right = fsck(s.passfile)
            XCTAssertEqual(right.status, 0, "right password \(i + 1) on a full store: \(right.stderr)")
        }
        XCTAssertEqual(try entries { $0.hasSuffix(".throttle") || $0.contains(".pvtmp-") }, [])
        // Wrong guesses are counted (the first in the spare block's place, the next over that
        // count) and judged; the right password still gets in and gives the block back.
        for _ in 0..<3 { assertFailure(fsck(wrong), 5, "wrong password") }
        let counts = try entries { $0.hasSuffix(".throttle") }
        XCTAssertEqual(counts.count, 1)
        let count = try String(contentsOfFile: accounts + "/" + counts[0], encoding: .utf8)
        XCTAssertTrue(count.hasPrefix(#"{"failures":3,"#) || count.contains(#""failures":3"#), count)
        XCTAssertEqual(try entries { $0.contains(".pvtmp-") || $0 == "throttle-reserve" }, [])
        let rightAfterGuesses = fsck(s.passfile)
        XCTAssertEqual(rightAfterGuesses.status, 0, "the right password after wrong ones on a full store: \(rightAfterGuesses.stderr)")
        XCTAssertEqual(try entries { $0 == "throttle-reserve" || $0.hasSuffix(".throttle") }, ["throttle-reserve"])
        // Without the spare block and without a count, nothing can be counted: not judged.
        s.ok("rm \(Sandbox.quote(accounts))/throttle-reserve")
        let refill = s.run("dd if=/dev/zero of=\(Sandbox.quote(s.store))/filler-again bs=4k")
        XCTAssertTrue(refill.stderr.contains("No space left on device"), refill.stderr)
        assertFailure(fsck(wrong), 19, "the password was not checked", "a wrong password with no block to count in:")
        let right = fsck(s.passfile)
        assertFailure(right, 19, "no space left on the device holding the store", "the right password with no block to count in:")
        XCTAssertTrue(right.stderr.contains("the password was not checked"), right.stderr)
        XCTAssertEqual(try entries { $0.hasSuffix(".throttle") || $0.contains(".pvtmp-") }, [])
        // Space back: wrong passwords are judged and counted, the right one clears the count.
        s.ok("rm \(Sandbox.quote(s.store))/filler \(Sandbox.quote(s.store))/filler-again")
        for _ in 0..<2 { assertFailure(fsck(wrong), 5, "wrong password") }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: accounts).filter { $0.hasSuffix(".throttle") }.count, 1)
        let later = fsck(s.passfile)
        XCTAssertEqual(later.status, 0, later.stderr)
        XCTAssertEqual(try entries { $0.hasSuffix(".throttle") }, [])
        XCTAssertEqual(try entries { $0 == "throttle-reserve" }, ["throttle-reserve"], "a right password makes the spare block again")
        // A read-only store (nobody fills it) still opens, uncounted.
        s.ok("mount -o remount,ro \(Sandbox.quote(s.store))")
        assertFailure(fsck(wrong), 5, "wrong password")
        let readOnly = fsck(s.passfile)
        XCTAssertEqual(readOnly.status, 0, readOnly.stderr)
    }

    /// A password file other users can read or rewrite (here 0644, then another owner) gets one
    /// warning line on stderr naming the problem and the fix, and the command goes on (as
    /// gocryptfs and age do); a 0600 file of one's own gets none. It used to pass silently.
    func testPasswordFileOpenToOthersOrOwnedByAnotherUserIsWarnedAbout() throws {
        let s = Sandbox("acct-loose-passfile")
        s.initStore(users: [])
        let loose = s.root + "/loose-pass"
        try Sandbox.writeSecret(Sandbox.password + "\n", to: loose)
        XCTAssertEqual(chmod(loose, 0o644), 0)
        let add = s.pv(["user", "add", "bob", "--store", s.store, "--passfile", loose])
        XCTAssertEqual(add.status, 0, add.stderr)
        XCTAssertEqual(add.stderr, "photovault: warning: the password file \(loose) can be read by other users (mode 644): "
                                   + "run 'chmod 600 \(loose)'\n")
        // --new-passfile is a password file too; 0666 is readable and writable by others.
        XCTAssertEqual(chmod(loose, 0o666), 0)
        let passwd = s.pv(["user", "passwd", "bob", "--store", s.store, "--passfile", s.passfile, "--new-passfile", loose])
        XCTAssertEqual(passwd.status, 0, passwd.stderr)
        XCTAssertEqual(passwd.stderr, "photovault: warning: the password file \(loose) can be read and written by other "
                                      + "users (mode 666): run 'chmod 600 \(loose)'\n")
        // Another user's file, even at 0600: its owner can change what it says.
        XCTAssertEqual(chmod(loose, 0o600), 0)
        XCTAssertEqual(chown(loose, 65534, 65534), 0)
        let foreign = s.pv(["user", "add", "carol", "--store", s.store, "--passfile", loose])
        XCTAssertEqual(foreign.status, 0, foreign.stderr)
        XCTAssertEqual(foreign.stderr, "photovault: warning: the password file \(loose) belongs to uid 65534, not to you "
                                       + "(uid \(geteuid())): keep it in a file of your own with mode 600\n")
        // A 0600 file of one's own: not a word.
        let quiet = s.pv(["user", "add", "dave", "--store", s.store, "--passfile", s.passfile])
        XCTAssertEqual(quiet.status, 0, quiet.stderr)
        XCTAssertEqual(quiet.stderr, "")
    }

    /// The password (and the new one, and the recovery key) appear in no file under the store,
    /// the runtime directory or the device secret's directory, and in no command output.
    func testNoSecretInAnyFileOrOutput() throws {
        let s = Sandbox("acct-leak")
        let password = "Quartz-Zebra-\(UUID().uuidString.prefix(8))"
        let newPassword = "Walrus-Violet-\(UUID().uuidString.prefix(8))"
        let secretsDir = s.root + "/secrets"
        try FileManager.default.createDirectory(atPath: secretsDir, withIntermediateDirectories: true)
        let pf = secretsDir + "/pw", npf = secretsDir + "/npw"
        try Sandbox.writeSecret(password + "\n", to: pf)
        try Sandbox.writeSecret(newPassword + "\n", to: npf)
        var outputs: [Harness.Result] = []
        func run(_ args: [String], stdin: String? = nil) -> Harness.Result {
            let r = s.pv(args, stdin: stdin)
            outputs.append(r)
            return r
        }
        XCTAssertEqual(run(["init", "--store", s.store]).status, 0)
        let add = run(["user", "add", "alice", "--store", s.store, "--passfile", pf, "--this-device-only"])
        XCTAssertEqual(add.status, 0, add.stderr)
        let recovery = try XCTUnwrap(AccountFixtures.recoveryKey(in: add.stdout))
        XCTAssertEqual(run(["user", "add", "bob", "--store", s.store, "--password-stdin"], stdin: password + "\n").status, 0)
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        XCTAssertEqual(run(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", pf, "--no-dbus"]).status, 0)
        s.mounts.append(mp)
        _ = Harness.waitUntil(5) { Harness.isMounted(mp) }
        try Data("x".utf8).write(to: URL(fileURLWithPath: mp + "/a.jpg"))
        XCTAssertEqual(run(["status"]).status, 0)
        XCTAssertEqual(run(["lock", mp]).status, 0)
        _ = Harness.waitUntil(10) { !Harness.isMounted(mp) }
        XCTAssertEqual(run(["user", "passwd", "alice", "--store", s.store, "--passfile", pf, "--new-passfile", npf]).status, 0)
        XCTAssertEqual(run(["user", "passwd", "bob", "--store", s.store, "--extpass", "cat \(pf)", "--new-passfile", npf]).status, 0)
        let wrong = run(["user", "remove", "bob", "--store", s.store, "--passfile", pf])
        XCTAssertEqual(wrong.status, 5)

        // Needles: the passwords, and the recovery key with and without its dashes.
        let needles = [password, newPassword, recovery, recovery.replacingOccurrences(of: "-", with: "")]
        for dir in [s.store, s.root + "/photovault"] {
            XCTAssertEqual(Sandbox.scan(dir, needles), [], "secret found under \(dir)")
        }
        // Everything under the sandbox but the two password files themselves.
        let hits = Sandbox.scan(s.root, needles).filter { !$0.contains("secrets/") }
        XCTAssertEqual(hits, [])
        for r in outputs {
            for n in [password, newPassword] {
                XCTAssertFalse(r.stdout.contains(n) || r.stderr.contains(n), "password in command output")
            }
        }
        // The recovery key is printed exactly once: by user add, on stdout.
        XCTAssertEqual(outputs.filter { $0.stdout.contains(recovery) || $0.stderr.contains(recovery) }.count, 1)
        // Not on the command lines either: photovault never takes a password from argv or env.
        let procs = Harness.sh("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").stdout
        XCTAssertFalse(procs.contains(password) || procs.contains(newPassword))
    }
}

extension Sandbox {
    /// Relative paths below `dir` whose name matches.
    static func scanNames(_ dir: String, _ match: (String) -> Bool) -> [String] {
        var out: [String] = []
        guard let e = FileManager.default.enumerator(atPath: dir) else { return out }
        while let rel = e.nextObject() as? String {
            if match((rel as NSString).lastPathComponent) { out.append(rel) }
        }
        return out
    }
}
