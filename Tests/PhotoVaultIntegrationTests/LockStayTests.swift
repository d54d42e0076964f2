import Foundation
import XCTest

/// `--on-lock stay`: what each protection class allows while the mount is locked, through
/// new opens and through handles opened before the lock; `photovault unlock` restores all.
final class LockStayTests: XCTestCase {
    /// Holds files open (O_RDWR) from before the lock; on `go` it reads and writes through
    /// each handle and reports the outcome (data or errno name) as JSON; on `close` it exits.
    static let holder = """
        import os, sys, time, json, errno
        d = sys.argv[1]
        fds = {p: os.open(p, os.O_RDWR) for p in sys.argv[2:]}
        open(d + "/opened", "w").close()
        while not os.path.exists(d + "/go"): time.sleep(0.02)
        res = {}
        for p, fd in fds.items():
            r = {}
            try: r["read"] = os.pread(fd, 64, 0).decode("latin1")
            except OSError as e: r["read"] = errno.errorcode[e.errno]
            try:
                os.pwrite(fd, b"W", 0)
                r["write"] = "ok"
            except OSError as e: r["write"] = errno.errorcode[e.errno]
            try:
                os.fsync(fd)
                r["fsync"] = "ok"
            except OSError as e: r["fsync"] = errno.errorcode[e.errno]
            res[os.path.basename(p)] = r
        json.dump(res, open(d + "/result.tmp", "w"))
        os.rename(d + "/result.tmp", d + "/result.json")
        while not os.path.exists(d + "/close"): time.sleep(0.02)
        for fd in fds.values(): os.close(fd)
        """

    private func write(_ text: String, _ path: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNoThrow(try Data(text.utf8).write(to: URL(fileURLWithPath: path)), file: file, line: line)
    }

    private func read(_ path: String) -> Harness.Result { Harness.run(["/bin/cat", path], timeout: 10) }

    func testClassRulesWhileLockedAndUnlock() throws {
        let s = Sandbox("lock-stay")
        s.initStore()
        let mp = s.mount(extra: ["--on-lock", "stay"])
        try FileManager.default.createDirectory(atPath: mp + "/open", withIntermediateDirectories: false)
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/open", "complete-unless-open").status, 0)
        write("complete data", mp + "/c.jpg")
        write("held complete", mp + "/held-c.jpg")
        write("held open data", mp + "/open/held.jpg")
        write("old open data", mp + "/open/old.jpg")
        write("ufa data", mp + "/u.jpg")
        write("none data", mp + "/n.jpg")
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/u.jpg", "until-first-auth").status, 0)
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/n.jpg", "none").status, 0)
        XCTAssertEqual(ClassAttributeTests.getClass(mp + "/c.jpg"), "complete")
        XCTAssertEqual(ClassAttributeTests.getClass(mp + "/open/held.jpg"), "complete-unless-open")

        // Handles opened before the lock.
        let ctl = s.root + "/holder"
        try FileManager.default.createDirectory(atPath: ctl, withIntermediateDirectories: true)
        let holder = try BackgroundProcess(["/usr/bin/python3", "-c", Self.holder, ctl, mp + "/held-c.jpg", mp + "/open/held.jpg"],
                                           output: ctl + "/log")
        defer { holder.stop() }
        XCTAssertTrue(Harness.waitUntil(10) { FileManager.default.fileExists(atPath: ctl + "/opened") }, holder.output)

        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        let lock = s.pv(["lock", mp])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        XCTAssertTrue(Harness.isMounted(mp), "--on-lock stay must keep the mount")

        // complete: no new open, no read, no write.
        let rc = read(mp + "/c.jpg")
        XCTAssertNotEqual(rc.status, 0)
        XCTAssertTrue(rc.stderr.contains("Permission denied"), rc.stderr)
        XCTAssertFalse(rc.stdout.contains("complete data"))
        let wc = Harness.sh("echo more >> '\(mp)/c.jpg'")
        XCTAssertNotEqual(wc.status, 0)
        XCTAssertTrue(wc.stderr.contains("Permission denied"), wc.stderr)
        // complete-unless-open: an existing file cannot be opened for reading...
        let ro = read(mp + "/open/old.jpg")
        XCTAssertNotEqual(ro.status, 0)
        XCTAssertTrue(ro.stderr.contains("Permission denied"), ro.stderr)
        // ...but new files can be created and written (sealed to the public key).
        let wn = Harness.sh("printf 'written while locked' > '\(mp)/open/new.jpg' && cp '\(mp)/u.jpg' '\(mp)/open/copy.jpg'")
        XCTAssertEqual(wn.status, 0, wn.stderr)
        XCTAssertEqual(ClassAttributeTests.getClass(mp + "/open/new.jpg"), "complete-unless-open")
        XCTAssertNotEqual(read(mp + "/open/new.jpg").status, 0, "a closed complete-unless-open file must not reopen while locked")
        // until-first-auth and none: readable and writable.
        for (f, text) in [("u.jpg", "ufa data"), ("n.jpg", "none data")] {
            XCTAssertEqual(read(mp + "/" + f).stdout, text, f)
            let w = Harness.sh("echo ' more' >> '\(mp)/\(f)'")
            XCTAssertEqual(w.status, 0, "\(f): \(w.stderr)")
        }
        // Listing still works (names use the name keys, not a class key).
        let ls = try FileManager.default.contentsOfDirectory(atPath: mp + "/open").sorted()
        XCTAssertEqual(ls, ["copy.jpg", "held.jpg", "new.jpg", "old.jpg"])

        // Through the handles opened before the lock.
        XCTAssertTrue(FileManager.default.createFile(atPath: ctl + "/go", contents: nil))
        XCTAssertTrue(Harness.waitUntil(20) { FileManager.default.fileExists(atPath: ctl + "/result.json") }, holder.output)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: ctl + "/result.json")))
                                 as? [String: [String: String]])
        print("held handles after lock: \(json)")
        XCTAssertEqual(json["held-c.jpg"]?["read"], "EACCES", "read through a complete handle opened before the lock")
        XCTAssertTrue(json["held-c.jpg"]?["write"] == "EACCES" || json["held-c.jpg"]?["fsync"] == "EACCES",
                      "write through a complete handle opened before the lock must fail: \(json)")
        XCTAssertEqual(json["held.jpg"]?["read"], "held open data", "complete-unless-open handle must keep working")
        XCTAssertEqual(json["held.jpg"]?["write"], "ok")
        XCTAssertEqual(json["held.jpg"]?["fsync"], "ok")
        XCTAssertTrue(FileManager.default.createFile(atPath: ctl + "/close", contents: nil))
        XCTAssertNotNil(holder.wait(10))
        // Closed now: the complete-unless-open file cannot be reopened.
        XCTAssertNotEqual(read(mp + "/open/held.jpg").status, 0)

        // Unlock with the password restores everything.
        let wrongFile = s.root + "/wrong"
        try Sandbox.writeSecret("not the password\n", to: wrongFile)
        let wrong = s.pv(["unlock", mp, "--user", "alice", "--passfile", wrongFile])
        XCTAssertEqual(wrong.status, 5, wrong.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        // A raw unlock request over the control socket with 32 bytes that are not the key is
        // refused, and the mount stays locked (it used to answer "unlocked" and say so).
        let bogus = s.run("""
            python3 - \(Sandbox.quote(s.root))/photovault/*.sock <<'PY'
            import socket, struct, sys
            c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])
            body = bytes([6]) + b"unlock" + bytes(range(32))
            c.sendall(struct.pack(">I", len(body)) + body)
            n = struct.unpack(">I", c.recv(4))[0]
            r = c.recv(n)
            print(r[0], r[1:].decode())
            PY
            """)
        XCTAssertEqual(bogus.stdout, "1 that key does not open the vault mounted here\n", bogus.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        XCTAssertNotEqual(read(mp + "/c.jpg").status, 0)
        let unlock = s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(unlock.status, 0, unlock.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        XCTAssertEqual(read(mp + "/c.jpg").stdout, "complete data")
        XCTAssertEqual(read(mp + "/held-c.jpg").stdout, "held complete", "the refused write must not have landed")
        XCTAssertEqual(read(mp + "/open/old.jpg").stdout, "old open data")
        XCTAssertEqual(read(mp + "/open/new.jpg").stdout, "written while locked")
        XCTAssertEqual(read(mp + "/open/copy.jpg").stdout, "ufa data")
        XCTAssertEqual(read(mp + "/open/held.jpg").stdout, "Weld open data")
        XCTAssertEqual(read(mp + "/u.jpg").stdout, "ufa data more\n")
        s.unmount(mp)
        // And the same holds after a remount.
        let mp2 = s.mount(at: "again")
        XCTAssertEqual(read(mp2 + "/open/new.jpg").stdout, "written while locked")
        s.unmount(mp2)
        s.assertNoPlaintext(["complete data", "written while locked", "held open data"])
    }

    /// Resident memory of `pid` in KiB (VmRSS), nil once it is gone.
    private static func residentKiB(_ pid: pid_t) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return nil }
        return Int(line.split(separator: " ").dropFirst().first ?? "")
    }

    /// Mounts bob, an account with the standard Argon2id cost (256 MiB), so that an unlock's
    /// key derivation is long and big enough to be caught in the middle.
    private static func mountStandardCostAccount(_ s: Sandbox, extra: [String]) -> String {
        s.initStore(users: [])
        let add = Harness.pv(["user", "add", "bob", "--store", s.store, "--passfile", s.passfile],
                             env: s.env.merging(["PHOTOVAULT_KDF_PROFILE": "standard"]) { _, b in b })
        XCTAssertEqual(add.status, 0, add.stderr)
        return s.mount("bob", extra: extra)
    }

    /// Starts `photovault unlock` for bob and freezes it (SIGSTOP, as a suspend freezes it) in
    /// the middle of its Argon2id, seen as its memory growing past 100 MiB; that is after it
    /// asked the daemon for its lock-event count. Returns it and its resident KiB then.
    private static func unlockFrozenMidDerivation(_ s: Sandbox, _ mp: String,
                                                  file: StaticString = #filePath, line: UInt = #line) throws -> (BackgroundProcess, Int) {
        let unlock = try BackgroundProcess([Harness.binary, "unlock", mp, "--user", "bob", "--passfile", s.passfile],
                                           env: s.env, output: s.root + "/unlock.log")
        XCTAssertTrue(Harness.waitUntil(30) { (residentKiB(unlock.pid) ?? 0) > 100 * 1024 || !unlock.isRunning },
                      "the unlock's key derivation was not seen: \(unlock.output)", file: file, line: line)
        kill(unlock.pid, SIGSTOP)
        return (unlock, residentKiB(unlock.pid) ?? 0)
    }

    /// A lock that comes while `photovault unlock` derives the key (the lid closed, the screen
    /// locked, a second after the password was typed) wins: the unlock that arrives after it
    /// is refused and the vault stays locked. It used to open the vault behind the locked
    /// screen. The unlock is frozen (SIGSTOP) in the middle of its Argon2id, as a suspend
    /// freezes it, while `photovault lock` runs; the account has the standard cost (256 MiB),
    /// so "in the middle" is seen as its memory growing past 100 MiB.
    func testALockWhileTheUnlockDerivesTheKeyWins() throws {
        let s = Sandbox("lock-overtaken")
        let mp = Self.mountStandardCostAccount(s, extra: ["--on-lock", "stay"])
        write("complete data", mp + "/c.jpg")
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")

        let (unlock, memory) = try Self.unlockFrozenMidDerivation(s, mp)
        defer { unlock.stop() }
        let lock = s.pv(["lock", mp])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        kill(unlock.pid, SIGCONT)
        print("unlock stopped at \(memory / 1024) MiB resident (mid-Argon2id), then 'photovault lock'")
        XCTAssertGreaterThan(memory, 100 * 1024, "the unlock had finished before the lock: \(unlock.output)")
        let status = unlock.wait(60)
        XCTAssertNotNil(status, "unlock did not finish")
        XCTAssertNotEqual(status, 0, "an unlock overtaken by a lock succeeded: \(unlock.output)")
        XCTAssertTrue(unlock.output.contains("the vault was locked again while the key was being derived"), unlock.output)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        XCTAssertNotEqual(read(mp + "/c.jpg").status, 0, "a complete file is readable after the overtaken unlock")

        // Nothing overtakes this one: it opens the vault.
        let again = s.pv(["unlock", mp, "--user", "bob", "--passfile", s.passfile])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        XCTAssertEqual(read(mp + "/c.jpg").stdout, "complete data")
        s.unmount(mp)
    }

    /// An idle timeout that passes while the vault is locked already is no lock event: it
    /// used to count as one, so an unlock whose key derivation spanned it (a slow Argon2id,
    /// a suspend in the middle, `--idle` shorter than the time taken to type the password
    /// after the screen lock) was refused as "locked again while the key was being derived",
    /// and the user had to run it again. Here `--idle 2s` passes while the unlock is frozen
    /// in the middle of its Argon2id; the unlock succeeds, and the idle timer, re-armed by it,
    /// locks the untouched vault again once --idle has passed.
    func testAnIdleTimeoutWhileLockedDoesNotRefuseAnUnlock() throws {
        let s = Sandbox("lock-idle-locked")
        let mp = Self.mountStandardCostAccount(s, extra: ["--on-lock", "stay", "--idle", "2s"])
        write("complete data", mp + "/c.jpg")
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")

        let (unlock, _) = try Self.unlockFrozenMidDerivation(s, mp)
        defer { unlock.stop() }
        sleep(4)   // --idle 2s since the write, and its timer's tick, pass while locked
        kill(unlock.pid, SIGCONT)
        let status = unlock.wait(60)
        XCTAssertEqual(status, 0, "an idle timeout while locked refused the unlock: \(unlock.output)")
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        XCTAssertEqual(read(mp + "/c.jpg").stdout, "complete data")
        LockSourceTests.assertIdleLock("locked again", after: "the unlock") { MountProbe.state(s, mp) == "locked" }
        s.unmount(mp)
    }

    /// Data written to a `complete` file before the lock is in the store already (a write is
    /// sealed and written before it is acknowledged): an fsync through a handle opened before
    /// the lock syncs the ciphertext file (it needs no key) and reports what that fsync
    /// reports. It was refused with EACCES, so an app saving a photo as the screen locked was
    /// told its save failed and could not make it durable. Shown by an EIO injected on the
    /// ciphertext file reaching the app (the fsync went to the store), then a plain fsync
    /// succeeding; reads and writes through the handle are still refused.
    func testFsyncAfterTheLockSyncsWhatWasWrittenBefore() throws {
        let s = Sandbox("lock-stay-fsync")
        s.initStore()
        let fg = try ForegroundMount(sandbox: s, at: "mnt", extra: ["--on-lock", "stay"])
        defer { fg.stop(s) }
        XCTAssertTrue(fg.waitMounted(), fg.log)
        let mp = fg.mountpoint
        write("", mp + "/c.jpg")
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/c.jpg", "complete").status, 0)
        let tree = try FileManager.default.contentsOfDirectory(atPath: s.store + "/users")
        XCTAssertEqual(tree.count, 1)
        let treePath = s.store + "/users/" + tree[0]
        let files = try FileManager.default.contentsOfDirectory(atPath: treePath).filter { !$0.hasPrefix(".") }
        XCTAssertEqual(files.count, 1, "\(files)")
        let ctl = s.root + "/holder"
        try FileManager.default.createDirectory(atPath: ctl, withIntermediateDirectories: true)
        let holder = try BackgroundProcess(["/usr/bin/python3", "-c", """
            import os, sys, time, errno
            d, path = sys.argv[1], sys.argv[2]
            def step(name):
                while not os.path.exists(d + "/" + name): time.sleep(0.02)
            def attempt(name, f):
                try: f(); r = "ok"
                except OSError as e: r = errno.errorcode[e.errno]
                open(d + "/" + name + ".tmp", "w").write(r)
                os.rename(d + "/" + name + ".tmp", d + "/" + name)
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, b"saved before the lock " * 5000)
            open(d + "/written", "w").close()
            step("go1"); attempt("fsync1", lambda: os.fsync(fd))
            step("go2"); attempt("fsync2", lambda: os.fdatasync(fd))
            attempt("write", lambda: os.pwrite(fd, b"W", 0))
            os.close(fd)
            """, ctl, mp + "/c.jpg"], output: ctl + "/log")
        defer { holder.stop() }
        XCTAssertTrue(Harness.waitUntil(10) { FileManager.default.fileExists(atPath: ctl + "/written") }, holder.output)
        let lock = s.pv(["lock", mp])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        func result(_ name: String) -> String? {
            guard Harness.waitUntil(20, { FileManager.default.fileExists(atPath: ctl + "/" + name) }) else { return nil }
            return try? String(contentsOfFile: ctl + "/" + name, encoding: .utf8)
        }
        let fault = try fg.injectFault(on: treePath + "/" + files[0], syscall: "fsync", error: "EIO")
        XCTAssertTrue(FileManager.default.createFile(atPath: ctl + "/go1", contents: nil))
        XCTAssertEqual(result("fsync1"), "EIO", "the fsync after the lock must reach the ciphertext file: \(holder.output)")
        fault.terminate()
        fault.waitUntilExit()
        XCTAssertTrue(FileManager.default.createFile(atPath: ctl + "/go2", contents: nil))
        XCTAssertEqual(result("fsync2"), "ok", holder.output)
        XCTAssertEqual(result("write"), "EACCES", "writes stay refused after the lock")
        XCTAssertNotNil(holder.wait(10))
        let unlock = s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(unlock.status, 0, unlock.stderr)
        XCTAssertEqual(try String(contentsOfFile: mp + "/c.jpg", encoding: .utf8), String(repeating: "saved before the lock ", count: 5000))
    }

}
