import Foundation
import XCTest

/// The daemon killed with SIGKILL: the dead mount is cleaned up with `photovault unmount`,
/// the vault mounts again (also elsewhere, at once) and everything synced before is intact.
final class MountCrashRecoveryTests: XCTestCase {
    func testKilledDaemonLeavesSyncedDataIntactAndTheMountRecoverable() throws {
        let sb = Sandbox("pv-crash")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        let plain = sb.plainDir("plain")
        sb.ok("""
        set -e
        head -c 3000000 /dev/urandom > \(Sandbox.quote(plain))/photo.jpg
        mkdir \(q)/Crash-Album
        cp \(Sandbox.quote(plain))/photo.jpg \(q)/Crash-Album/photo.jpg
        printf 'CRASH-NOTE\\n' > \(q)/Crash-Album/note.txt
        sync
        """)
        let status = sb.pv(["status"])
        XCTAssertEqual(status.status, 0, status.stderr)
        let pidText = status.stdout.split(separator: "\n").first { $0.hasPrefix(mp + "\t") }?
            .split(separator: "\t").first { $0.hasPrefix("pid=") }?.dropFirst(4)
        let pid = try XCTUnwrap(pidText.flatMap { pid_t($0) }, "no pid in status: \(status.stdout)")
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        // As soon as the daemon is dead, even before its new parent reaps it (a zombie still
        // answers kill(pid, 0)), `status` no longer lists its registration, and it names the
        // dead mount left behind (it used to say "no vault mounted").
        XCTAssertTrue(Harness.waitUntil(5) {
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            return stat.isEmpty || stat.split(separator: ")").last?.split(separator: " ").first == "Z"
        })
        let afterKill = sb.pv(["status"])
        XCTAssertEqual(afterKill.status, 0, afterKill.stderr)
        // Its line alone (status lists every PhotoVault mount of root: other tests' may be up).
        XCTAssertEqual(afterKill.stdout.split(separator: "\n").filter { $0.hasPrefix(mp + "\t") },
                       ["\(mp)\tstate=dead (its daemon is gone: run 'photovault unmount \(mp)')"], afterKill.stdout)
        XCTAssertTrue(Harness.waitUntil(5) { kill(pid, 0) != 0 })

        let dead = sb.run("ls \(q)")
        XCTAssertNotEqual(dead.status, 0)
        XCTAssertTrue(dead.stderr.contains("Transport endpoint is not connected"), dead.stderr)
        // `lock` and `unlock` say what is there (they said "no vault is mounted", 18), and so
        // do the class commands given a path there (they took it for a vault path in the
        // default store: "no PhotoVault store at ... (run 'photovault init')", exit 3).
        for args in [["lock", mp], ["unlock", mp, "--user", "alice", "--passfile", sb.passfile],
                     ["class", "set", mp + "/Crash-Album/note.txt", "none"], ["class", "get", mp + "/Crash-Album/note.txt"],
                     ["class", "list", mp + "/Crash-Album"]] {
            assertFailure(sb.pv(args), 25, "\(mp) holds a dead PhotoVault mount (its daemon is gone)", args[0])
        }
        // The dead daemon's registration does not block mounting the same vault elsewhere.
        let other = sb.mount(at: "elsewhere")
        sb.ok("cmp \(Sandbox.quote(plain))/photo.jpg \(Sandbox.quote(other))/Crash-Album/photo.jpg")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(other))/Crash-Album/note.txt"), "CRASH-NOTE\n")
        sb.unmount(other)
        // Mounting onto the dead mount is refused (nothing is mounted over it), with one line
        // that says what is there and how to clear it, and its own exit code ...
        let again = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(again.status, 25, again.stderr)
        XCTAssertEqual(again.stderr, "photovault: \(mp) holds a dead PhotoVault mount (its daemon is gone): "
                       + "run 'photovault unmount \(mp)' (or 'fusermount3 -u \(mp)'), then mount again\n")
        XCTAssertEqual(again.stdout, "")
        // ... until `photovault unmount` removes it; then the vault mounts there again.
        let un = sb.pv(["unmount", mp])
        XCTAssertEqual(un.status, 0, un.stderr)
        XCTAssertFalse(Harness.isMounted(mp))
        sb.mounts.removeAll { $0 == mp }
        let back = sb.mount()
        XCTAssertEqual(back, mp)
        sb.ok("cmp \(Sandbox.quote(plain))/photo.jpg \(q)/Crash-Album/photo.jpg")
        XCTAssertEqual(sb.ok("ls \(q)/Crash-Album"), "note.txt\nphoto.jpg\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["CRASH-NOTE", "Crash-Album", "photo.jpg", "note.txt"])
    }

    /// `mount -f 2>&1 | head -1` (or `| tee log` after Ctrl-C): the reader of the daemon's log
    /// is gone. The next log line used to kill the daemon with SIGPIPE before it unmounted,
    /// leaving a dead mount, its registration and unflushed writes behind.
    func testForegroundDaemonWhoseLogReaderIsGoneStillUnmountsOnSIGTERM() throws {
        let sb = Sandbox("pv-sigpipe")
        sb.initStore()
        let mp = sb.root + "/fg"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Harness.binary)
        p.arguments = ["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus", "-f"]
        p.environment = ProcessInfo.processInfo.environment.merging(sb.env) { _, b in b }
        let log = Pipe()
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = log
        try p.run()
        sb.mounts.append(mp)
        defer { if p.isRunning { p.terminate() } }
        XCTAssertTrue(Harness.waitUntil(10) { Harness.isMounted(mp) })
        try log.fileHandleForWriting.close()
        try log.fileHandleForReading.close()   // like head -1 after its line
        sb.ok("printf 'PIPE-NOTE\\n' > \(Sandbox.quote(mp))/note.txt")
        kill(p.processIdentifier, SIGTERM)
        XCTAssertTrue(Harness.waitUntil(10) { !p.isRunning })
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .exit, "the daemon died of signal \(p.terminationStatus)")
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertFalse(Harness.isMounted(mp), "a dead mount was left")
        XCTAssertFalse(sb.pv(["status"]).stdout.contains(mp + "\t"))   // other mounts of root may be up
        sb.mounts.removeAll { $0 == mp }
        let again = sb.mount(at: "fg")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(again))/note.txt"), "PIPE-NOTE\n")
        sb.unmount(again)
    }

    /// Every terminating signal a user sends (kill, Ctrl-C, a closed terminal, Ctrl-\) unmounts
    /// and zeroes the keys. SIGQUIT used to kill the daemon outright: a dead mount was left.
    func testTerminatingSignalsUnmountCleanly() {
        let sb = Sandbox("pv-signals")
        sb.initStore()
        // And the other signals whose default ends the process: they left a dead mount.
        let others = [("USR2", SIGUSR2), ("ALRM", SIGALRM), ("VTALRM", SIGVTALRM), ("PROF", SIGPROF), ("PWR", SIGPWR),
                      ("IO", SIGIO), ("STKFLT", SIGSTKFLT)]
        for (name, sig) in [("TERM", SIGTERM), ("INT", SIGINT), ("HUP", SIGHUP), ("QUIT", SIGQUIT)] + others {
            let mp = sb.mount(at: "mnt-\(name)")
            sb.ok("printf x > \(Sandbox.quote(mp))/a.jpg")
            LockSourceTests.assertLockUnmounts(sb, mp, "SIG\(name)") { pid in kill(pid, sig) }
        }
    }

    /// A terminating signal that comes while the daemon mounts (strace delivers SIGTERM at
    /// its mount(2), so the daemon gets it just after the mount is made, before its signal
    /// watcher used to start): the daemon unmounts, `mount` says why and exits 1, and nothing
    /// stays. The signal used to kill the daemon and leave a dead mount (exit 25 with the
    /// dead-mount message). A SIGTERM from a shutdown, or Ctrl-C on `mount -f`, met the same.
    func testASignalWhileTheDaemonMountsLeavesNoMount() {
        let sb = Sandbox("pv-earlysignal")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let r = sb.mountUnderStrace(mp, fault: "mount:signal=SIGTERM")
        sb.mounts.append(mp)
        XCTAssertEqual(r.status, 1, r.stderr)
        XCTAssertEqual(r.stderr, "photovault: the mount daemon was stopped by signal 15 (Terminated) before the mount was ready; "
                       + "nothing is mounted\n")
        XCTAssertFalse(Harness.isMounted(mp), "a mount (or a dead one) was left")
        XCTAssertFalse(sb.pv(["status"]).stdout.contains(mp + "\t"))   // other mounts of root may be up
        sb.mounts.removeAll { $0 == mp }
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// `unmount` returns once the daemon has ended, even when nobody reaps it at once: here
    /// `mount` runs under a child subreaper (python3, prctl PR_SET_CHILD_SUBREAPER) that never
    /// reaps, so the daemon stays a zombie after it exits (as under a container's init that
    /// reaps late). `unmount` waited with kill(pid, 0), which succeeds on a zombie, and so took
    /// its full 10 s every time.
    func testUnmountDoesNotWaitForTheDaemonsZombieToBeReaped() throws {
        let sb = Sandbox("pv-zombie")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let reaper = """
            import ctypes, subprocess, sys, time
            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
            print("mount=%d" % subprocess.run(sys.argv[1:]).returncode, flush=True)
            time.sleep(120)
            """
        let holder = try BackgroundProcess(["/usr/bin/python3", "-c", reaper, Harness.binary, "mount", mp, "--store", sb.store,
                                            "--user", "alice", "--passfile", sb.passfile, "--no-dbus"],
                                           env: sb.env, output: sb.root + "/reaper.log")
        sb.mounts.append(mp)
        XCTAssertTrue(Harness.waitUntil(30) { holder.output.contains("mount=") }, holder.output)
        XCTAssertTrue(holder.output.contains("mount=0"), holder.output)
        let pid = try XCTUnwrap(MountProbe.daemonPID(sb, mp))
        let start = Date()
        sb.unmount(mp)
        let took = Date().timeIntervalSince(start)
        XCTAssertLessThan(took, 5, "unmount waited for the zombie to be reaped")
        XCTAssertTrue(MountProbe.hasEnded(pid))
        XCTAssertTrue(FileManager.default.fileExists(atPath: "/proc/\(pid)"), "the daemon must still be an unreaped zombie")
        XCTAssertTrue(holder.isRunning, "the subreaper must still hold the zombie during the unmount")
        holder.stop()
    }
}
