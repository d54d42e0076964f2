import Foundation
import XCTest

/// Every source of a lock, against the real daemon: SIGUSR1, `photovault lock`, SIGTERM,
/// `--idle`, and the desktop's D-Bus signals on private buses. With the default
/// `--on-lock unmount`, each must end in the mount disappearing and the daemon exiting.
final class LockSourceTests: XCTestCase {
    /// Mounts with D-Bus watching on (no --no-dbus) against the rig's buses; `env` overrides
    /// the rig's environment.
    static func mountWatched(_ s: Sandbox, _ rig: DBusRig, name: String, extra: [String] = [], env extraEnv: [String: String] = [:],
                             file: StaticString = #filePath, line: UInt = #line) -> String {
        let mp = s.root + "/" + name
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let env = s.env.merging(rig.environment) { _, b in b }.merging(extraEnv) { _, b in b }
        let r = Harness.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile] + extra, env: env)
        XCTAssertEqual(r.status, 0, "mount: \(r.stderr)", file: file, line: line)
        XCTAssertFalse(r.stderr.contains("warning"), "both buses are there: \(r.stderr)", file: file, line: line)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) }, file: file, line: line)
        s.mounts.append(mp)
        return mp
    }

    /// Runs `trigger`, then waits (at most 5 s) for the mount to vanish and the daemon to exit;
    /// prints the time from the trigger to unmounted.
    static func assertLockUnmounts(_ s: Sandbox, _ mp: String, _ label: String, file: StaticString = #filePath,
                                   line: UInt = #line, trigger: (pid_t) -> Void) {
        guard let pid = MountProbe.daemonPID(s, mp) else {
            XCTFail("\(label): no daemon pid in photovault status", file: file, line: line)
            return
        }
        let t0 = Date()
        trigger(pid)
        let gone = Harness.waitUntil(5) { !Harness.isMounted(mp) }
        let ms = Date().timeIntervalSince(t0) * 1000
        print(String(format: "lock source %@: unmounted %.0f ms after the signal", label, ms))
        XCTAssertTrue(gone, "\(label): still mounted 5 s after the lock", file: file, line: line)
        XCTAssertTrue(Harness.waitUntil(5) { !MountProbe.isAlive(pid) }, "\(label): daemon still running", file: file, line: line)
        XCTAssertNil(MountProbe.daemonPID(s, mp), "\(label): still registered", file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/a.jpg"), "\(label): plaintext still visible",
                       file: file, line: line)
    }

    private func writeSample(_ mp: String) {
        XCTAssertNoThrow(try Data("sample".utf8).write(to: URL(fileURLWithPath: mp + "/a.jpg")))
    }

    func testSignalsAndTheLockCommand() {
        let s = Sandbox("lock-src")
        s.initStore()
        let sources: [(String, (pid_t) -> Void)] = [
            ("SIGUSR1", { pid in kill(pid, SIGUSR1) }),
            ("photovault lock", { _ in }),
            ("SIGTERM", { pid in kill(pid, SIGTERM) }),
        ]
        for (label, send) in sources {
            let mp = s.mount(at: "mnt-\(label.filter { $0.isLetter })")
            writeSample(mp)
            Self.assertLockUnmounts(s, mp, label) { pid in
                if label == "photovault lock" {
                    let r = s.pv(["lock", mp])
                    XCTAssertEqual(r.status, 0, r.stderr)
                } else {
                    send(pid)
                }
            }
        }
        // After all that the vault is intact.
        let mp = s.mount(at: "final")
        XCTAssertEqual(try? String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "sample")
        s.unmount(mp)
    }

    /// With --idle 2s and nothing touching the mount since `event` (just now): `locked`
    /// becomes true within 8 s, and not before the idle time has passed.
    static func assertIdleLock(_ outcome: String, after event: String, file: StaticString = #filePath, line: UInt = #line,
                               _ locked: () -> Bool) {
        let t0 = Date()
        XCTAssertTrue(Harness.waitUntil(8) { locked() }, "not \(outcome) 8 s after \(event) with --idle 2s", file: file, line: line)
        let idle = Date().timeIntervalSince(t0)
        print(String(format: "--idle 2s: %@ %.2f s after %@", outcome, idle, event))
        XCTAssertGreaterThan(idle, 1.5, "\(outcome) before the idle time had passed", file: file, line: line)
    }

    func testIdleTimeoutLocksOnlyWithoutActivity() throws {
        let s = Sandbox("lock-idle")
        s.initStore()
        let mp = s.mount(extra: ["--idle", "2s"])
        writeSample(mp)
        // Keep touching it for 5 s: more than twice the timeout, and it must stay.
        let busyUntil = Date().addingTimeInterval(5)
        while Date() < busyUntil {
            XCTAssertEqual(try? String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "sample")
            usleep(300_000)
        }
        XCTAssertTrue(Harness.isMounted(mp), "locked although the vault was in use")
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        Self.assertIdleLock("unmounted", after: "the last access") { !Harness.isMounted(mp) }
        XCTAssertTrue(Harness.waitUntil(5) { !MountProbe.isAlive(pid) })
    }

    /// After `photovault unlock`, an untouched mount locks again once --idle has passed: the
    /// timer that fired for the first lock is re-armed by the unlock, not only by later use.
    func testIdleLocksAgainAfterAnUnlockWithoutUse() throws {
        let s = Sandbox("lock-idle-again")
        s.initStore()
        let mp = s.mount(extra: ["--idle", "2s", "--on-lock", "stay"])
        writeSample(mp)
        XCTAssertTrue(Harness.waitUntil(8) { MountProbe.state(s, mp) == "locked" }, "no idle lock")
        let unlock = s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(unlock.status, 0, unlock.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        Self.assertIdleLock("locked again", after: "the unlock") { MountProbe.state(s, mp) == "locked" }
        s.unmount(mp)
    }

    /// Desktop panels and disk monitors poll mounts (statfs, stat); that is not use and
    /// must not keep the vault unlocked past --idle.
    func testPollingStatfsAndStatDoesNotDelayTheIdleLock() throws {
        let s = Sandbox("lock-idle-poll")
        s.initStore()
        let mp = s.mount(extra: ["--idle", "2s"])
        writeSample(mp)
        let t0 = Date()
        var polls = 0
        while Harness.isMounted(mp) && Date().timeIntervalSince(t0) < 8 {
            var sv = statvfs(), st = stat()
            _ = statvfs(mp, &sv)
            _ = stat(mp + "/a.jpg", &st)
            polls += 1
            usleep(200_000)
        }
        let idle = Date().timeIntervalSince(t0)
        print(String(format: "--idle 2s under statfs/stat polling: unmounted after %.2f s, %d polls", idle, polls))
        XCTAssertFalse(Harness.isMounted(mp), "polling statfs and stat kept the vault mounted for 8 s")
        XCTAssertGreaterThan(polls, 5)
    }

    /// Reading extended attributes (`ls -l`, `getfattr`, a file manager's properties) and
    /// following a symlink while stat-ing a path are metadata polling as much as stat is:
    /// they must not keep the vault unlocked past --idle either (they used to, for ever).
    func testPollingXattrsAndSymlinksDoesNotDelayTheIdleLock() throws {
        let s = Sandbox("lock-idle-xattr")
        s.initStore()
        let mp = s.mount(extra: ["--idle", "2s"])
        writeSample(mp)
        XCTAssertEqual(symlink("a.jpg", mp + "/link.jpg"), 0)
        // Polls every 0.2 s for up to 8 s, until the mount is gone; prints what the first poll
        // saw (each call really reached the mount) and the number of polls.
        let r = Harness.run(["/usr/bin/python3", "-c", """
            import os, sys, time
            mp = sys.argv[1]; t0 = time.time(); polls = 0; first = None
            while time.time() - t0 < 8 and os.path.ismount(mp):
                try:
                    seen = (os.getxattr(mp + "/a.jpg", "user.photovault.class").decode(),
                            "user.photovault.class" not in os.listxattr(mp + "/a.jpg"),
                            os.stat(mp + "/link.jpg").st_size)
                except OSError:
                    break
                first = first or seen
                polls += 1
                time.sleep(0.2)
            print(polls, first, round(time.time() - t0, 2))
            """, mp], timeout: 30)
        print("--idle 2s under getxattr/listxattr/symlink polling: polls, first answers, seconds: \(r.stdout)")
        let fields = r.stdout.split(separator: " ")
        XCTAssertGreaterThan(Int(fields.first ?? "") ?? 0, 5, r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("('complete', True, 6)"), r.stdout + r.stderr)
        XCTAssertFalse(Harness.isMounted(mp), "polling xattrs and a symlink kept the vault mounted for 8 s")
    }

    /// A mount that cannot watch a bus says so on the terminal (not only in the journal):
    /// the user must not believe the screen lock protects the vault when it does not.
    func testAMountThatCannotWatchDBusSaysSo() throws {
        let s = Sandbox("lock-nobus")
        s.initStore()
        let rig = try DBusRig(directory: s.root + "/bus")
        defer { rig.stop() }
        let missing = "unix:path=" + s.root + "/no-bus-here"
        // A graphical session (DISPLAY): where a screen lock could exist, so it is said
        // (EverydayDBusWarningTests: only there, once).
        let cases: [([String: String], String)] = [
            (["DBUS_SYSTEM_BUS_ADDRESS": missing, "DBUS_SESSION_BUS_ADDRESS": missing, "DISPLAY": ":99"],
             "photovault: warning: no D-Bus: the vault will not lock with the screen or on suspend; "),
            (rig.environment.merging(["DBUS_SESSION_BUS_ADDRESS": missing, "DISPLAY": ":99"]) { _, b in b },
             "photovault: warning: no session D-Bus: the vault will not lock with the screen saver; "),
        ]
        for (i, (busEnv, warning)) in cases.enumerated() {
            let mp = s.root + "/mnt\(i)"
            try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
            let r = Harness.pv(["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile],
                               env: s.env.merging(busEnv) { _, b in b })
            XCTAssertEqual(r.status, 0, r.stderr)
            s.mounts.append(mp)
            XCTAssertTrue(r.stderr.hasPrefix(warning), r.stderr)
            XCTAssertTrue(r.stderr.contains("use --idle or 'photovault lock'\n"), r.stderr)
            XCTAssertTrue(Harness.isMounted(mp))
            s.unmount(mp)
        }
        // --no-dbus: no warning.
        let quiet = s.root + "/mnt-quiet"
        try FileManager.default.createDirectory(atPath: quiet, withIntermediateDirectories: true)
        let r = Harness.pv(["mount", quiet, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus"],
                           env: s.env.merging(cases[0].0) { _, b in b })
        XCTAssertEqual(r.status, 0, r.stderr)
        s.mounts.append(quiet)
        XCTAssertFalse(r.stderr.contains("warning"), r.stderr)
        s.unmount(quiet)
    }

    func testDesktopLockSignalsOverDBus() throws {
        let s = Sandbox("lock-dbus")
        s.initStore()
        let rig = try DBusRig(directory: s.root + "/bus")
        defer { rig.stop() }
        let triggers: [(String, () -> Void)] = [
            ("logind Session.Lock", { rig.sessionLock() }),
            ("logind PrepareForSleep(true)", { rig.prepareForSleep(true) }),
            ("org.freedesktop.ScreenSaver ActiveChanged(true)", { rig.screenSaverActive("org.freedesktop.ScreenSaver", true) }),
            ("org.gnome.ScreenSaver ActiveChanged(true)", { rig.screenSaverActive("org.gnome.ScreenSaver", true) }),
            ("logind LockedHint=true", { rig.lockedHintAsLogind(true) }),
        ]
        for (i, (label, send)) in triggers.enumerated() {
            let mp = Self.mountWatched(s, rig, name: "mnt\(i)")
            writeSample(mp)
            // Signals that must not lock: the other session's Lock, and "unlocked" states.
            rig.send(system: true, sender: "org.freedesktop.login1", path: "/org/freedesktop/login1/session/_32",
                     member: "org.freedesktop.login1.Session.Lock")
            rig.screenSaverActive("org.freedesktop.ScreenSaver", false)
            rig.prepareForSleep(false)
            rig.lockedHintAsLogind(false)
            usleep(300_000)
            XCTAssertTrue(Harness.isMounted(mp), "\(label): an unrelated or 'unlocked' signal locked the vault")
            Self.assertLockUnmounts(s, mp, label) { _ in send() }
        }
    }

    /// A mount that came up before logind (early at boot, or while logind restarted) took
    /// no sleep inhibitor and found no session, for as long as it was mounted: a suspend
    /// locked it only if PrepareForSleep came, and nothing made logind wait for the keys to
    /// be gone. Now the logind that appears is asked for the session (the mount has no session
    /// path in its environment here) and for the inhibitor, and its PrepareForSleep(true)
    /// unmounts the vault, the inhibitor being let go once the keys are gone.
    func testALogindThatComesAfterTheMountGetsItsInhibitor() throws {
        let s = Sandbox("lock-late-logind")
        s.initStore()
        let rig = try DBusRig(directory: s.root + "/bus")
        defer { rig.stop() }
        let mp = Self.mountWatched(s, rig, name: "mnt", env: ["PHOTOVAULT_SESSION_PATH": "", "XDG_SESSION_ID": ""])
        writeSample(mp)
        let logind = try rig.startLogind()
        defer { logind.stop() }
        XCTAssertTrue(Harness.waitUntil(5) { logind.calls.contains("Inhibit(sleep,delay)") }, "\(logind.calls)")
        XCTAssertEqual(logind.calls.filter { $0.hasPrefix("GetSession") }, ["GetSessionByPID"])
        XCTAssertTrue(logind.calls.contains("Get(LockedHint)"), "\(logind.calls)")
        Self.assertLockUnmounts(s, mp, "PrepareForSleep(true) from a logind that came after the mount") { _ in
            logind.prepareForSleep(true)
        }
        XCTAssertTrue(Harness.waitUntil(5) { logind.calls.contains("released") }, "\(logind.calls)")
    }

    /// logind restarting under a mount (its inhibitor fd dies with it) is asked for a new
    /// inhibitor while the vault is unlocked; while it is locked (`--on-lock stay`) none is
    /// taken, as after a lock before sleep, and `photovault unlock` takes it.
    func testARestartedLogindGivesAnInhibitorOnlyWhileUnlocked() throws {
        let s = Sandbox("lock-logind-restart")
        s.initStore()
        let rig = try DBusRig(directory: s.root + "/bus")
        defer { rig.stop() }
        let first = try rig.startLogind(1)
        defer { first.stop() }
        let mp = Self.mountWatched(s, rig, name: "mnt", extra: ["--on-lock", "stay"])
        writeSample(mp)
        XCTAssertTrue(Harness.waitUntil(5) { first.calls.contains("Inhibit(sleep,delay)") }, "\(first.calls)")
        first.stop()
        let second = try rig.startLogind(2)
        defer { second.stop() }
        XCTAssertTrue(Harness.waitUntil(5) { second.calls.contains("Inhibit(sleep,delay)") },
                      "no inhibitor from the restarted logind: \(second.calls)")
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        second.stop()
        let third = try rig.startLogind(3)
        defer { third.stop() }
        // It reads LockedHint, then would ask for the inhibitor at once.
        XCTAssertTrue(Harness.waitUntil(5) { third.calls.contains("Get(LockedHint)") }, "\(third.calls)")
        usleep(500_000)
        XCTAssertFalse(third.calls.contains("Inhibit(sleep,delay)"), "an inhibitor taken while locked: \(third.calls)")
        let unlock = s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(unlock.status, 0, unlock.stderr)
        XCTAssertTrue(Harness.waitUntil(5) { third.calls.contains("Inhibit(sleep,delay)") }, "no inhibitor after the unlock: \(third.calls)")
        third.prepareForSleep(true)
        XCTAssertTrue(Harness.waitUntil(5) { MountProbe.state(s, mp) == "locked" }, "PrepareForSleep(true) did not lock")
        XCTAssertTrue(Harness.waitUntil(5) { third.calls.contains("released") }, "\(third.calls)")
        XCTAssertNil(try? String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "a complete file is readable after the sleep lock")
        s.unmount(mp)
    }

    /// Lock events never unlock: after a D-Bus lock of a `--on-lock stay` mount, the session's
    /// Unlock and ActiveChanged(false) leave it locked; only `photovault unlock` opens it.
    func testUnlockSignalsDoNotUnlockAStayMount() throws {
        let s = Sandbox("lock-nounlock")
        s.initStore()
        let rig = try DBusRig(directory: s.root + "/bus")
        defer { rig.stop() }
        let mp = Self.mountWatched(s, rig, name: "mnt", extra: ["--on-lock", "stay"])
        writeSample(mp)
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        rig.sessionLock()
        XCTAssertTrue(Harness.waitUntil(5) { MountProbe.state(s, mp) == "locked" }, "Session.Lock did not lock")
        rig.sessionUnlock()
        rig.screenSaverActive("org.freedesktop.ScreenSaver", false)
        rig.screenSaverActive("org.gnome.ScreenSaver", false)
        rig.lockedHintAsLogind(false)
        rig.prepareForSleep(false)
        usleep(700_000)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        XCTAssertTrue(Harness.isMounted(mp))
        XCTAssertNil(try? String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "a complete file is readable after Unlock")
        let r = s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        XCTAssertEqual(try? String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "sample")
        s.unmount(mp)
    }
}
