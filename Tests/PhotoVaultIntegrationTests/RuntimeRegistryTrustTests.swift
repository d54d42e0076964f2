import Foundation
import XCTest

/// `lock`, `unlock` and `status` find live mounts in the runtime directory
/// (`$XDG_RUNTIME_DIR/photovault`, else `/tmp/photovault-<uid>`). One that another user owns
/// or may enter is refused with one clear line, never trusted for a "locked" answer.
final class RuntimeRegistryTrustTests: XCTestCase {
    func testARegistryDirectoryOfAnotherUserOrOpenToOthersIsRefused() {
        let sb = Sandbox("pv-registry")
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        let registry = sb.root + "/photovault"
        XCTAssertTrue(sb.pv(["status"]).stdout.contains("\(mp)\t"))

        for (change, undo) in [("chown 65534 \(Sandbox.quote(registry))", "chown 0 \(Sandbox.quote(registry))"),
                               ("chmod 0755 \(Sandbox.quote(registry))", "chmod 0700 \(Sandbox.quote(registry))")] {
            sb.ok(change)
            // unlock too: it used to say "no vault is mounted at ..." about the mounted vault.
            for args in [["status"], ["lock", mp], ["unlock", mp, "--user", "alice", "--passfile", sb.passfile]] {
                let r = sb.pv(args)
                XCTAssertEqual(r.status, 1, "\(change): \(args[0]): \(r.stdout) \(r.stderr)")
                XCTAssertEqual(r.stdout, "", "\(change): \(args[0])")
                XCTAssertTrue(r.stderr.hasPrefix("photovault: \(registry) is not a private directory of this user"), r.stderr)
                XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
            }
            sb.ok(undo)
        }
        // Trusted again: the mount was never locked by the refused commands.
        XCTAssertTrue(sb.pv(["status"]).stdout.contains("\(mp)\t"))
        XCTAssertEqual(MountProbe.state(sb, mp), "unlocked")
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(sb, mp), "locked")
        sb.unmount(mp)
    }

    /// A registry directory the daemon cannot use: the mount still comes up, and `mount`
    /// says on stderr that lock, unlock and status will not reach it. It used to say nothing
    /// (only the journal knew), and those commands then answered "no vault is mounted".
    func testAMountWhoseControlSocketCannotBeMadeSaysSo() {
        let sb = Sandbox("pv-nosocket")
        sb.initStore()
        let registry = sb.root + "/photovault"
        sb.ok("mkdir -m 0700 \(Sandbox.quote(registry)) && chown 65534 \(Sandbox.quote(registry))")
        let mp = sb.root + "/mnt"
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let r = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        sb.mounts.append(mp)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(Harness.isMounted(mp))
        let lines = r.stderr.split(separator: "\n")
        XCTAssertEqual(lines.count, 1, r.stderr)
        XCTAssertTrue(r.stderr.hasPrefix("photovault: warning: control socket unavailable: \(registry) is not a private directory"), r.stderr)
        XCTAssertTrue(r.stderr.contains("'photovault lock', 'unlock' and 'status' will not reach this mount"), r.stderr)
        sb.ok("chown 0 \(Sandbox.quote(registry))")
        // The directory trusted again, lock and unlock find no entry there: they say why, not
        // "no vault is mounted at ..." (exit 18) about the mounted vault.
        for args in [["lock", mp], ["unlock", mp, "--user", "alice", "--passfile", sb.passfile]] {
            let l = sb.pv(args)
            XCTAssertEqual(l.status, 1, "\(args[0]): \(l.stderr)")
            XCTAssertEqual(l.stderr, "photovault: the vault at \(mp) is mounted, but " + Self.notRegistered(mp, registry) + "\n")
        }
        sb.unmount(mp)
    }

    static func notRegistered(_ mp: String, _ registry: String) -> String {
        "its daemon is not registered in \(registry) (it was mounted from another session, with another XDG_RUNTIME_DIR, "
            + "or its control socket could not be made when it was mounted), so lock and unlock cannot reach it from here; "
            + "'photovault unmount \(mp)' still works"
    }

    /// `lock` and `unlock` of a mount made from another session (another XDG_RUNTIME_DIR, as
    /// cron or sudo have) find it in no registry of theirs: they say so and change nothing.
    /// They blamed a control socket that could not be made, which was not the case.
    func testLockAndUnlockOfAMountOfAnotherSessionSayWhy() {
        let sb = Sandbox("pv-othersession")
        sb.initStore()
        let mp = sb.mount()
        var other = sb.env
        other["XDG_RUNTIME_DIR"] = sb.root + "/other-session"
        XCTAssertEqual(mkdir(sb.root + "/other-session", 0o700), 0)
        for args in [["lock", mp], ["unlock", mp, "--user", "alice", "--passfile", sb.passfile]] {
            let l = Harness.pv(args, env: other)
            XCTAssertEqual(l.status, 1, "\(args[0]): \(l.stderr)")
            XCTAssertEqual(l.stderr, "photovault: the vault at \(mp) is mounted, but "
                           + Self.notRegistered(mp, sb.root + "/other-session/photovault") + "\n")
        }
        XCTAssertEqual(MountProbe.state(sb, mp), "unlocked")
        sb.unmount(mp)
    }

    /// An entry from before start times were recorded (four lines), whose daemon is gone and
    /// whose pid another program got: stale. It used to count as a live mount, so `mount`
    /// of that vault said "already mounted" (16) while `unmount` said "not mounted" (18).
    func testAnOldEntryWhosePidAnotherProgramGotIsStale() throws {
        let sb = Sandbox("pv-pidreuse")
        sb.initStore()
        let mp = sb.mount()
        let dir = sb.root + "/photovault"
        let name = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: dir).first { $0.hasSuffix(".mount") })
        let lines = try String(contentsOfFile: dir + "/" + name, encoding: .utf8).split(separator: "\n").map(String.init)
        sb.unmount(mp)
        sb.mounts.removeAll { $0 == mp }
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/bin/sleep")
        other.arguments = ["60"]
        try other.run()
        defer { other.terminate(); other.waitUntilExit() }
        let old = [lines[0], lines[1], "\(other.processIdentifier)", lines[3]].joined(separator: "\n") + "\n"
        try old.write(toFile: dir + "/" + name, atomically: true, encoding: .utf8)
        // Not `== "no vault mounted"`: status lists every PhotoVault mount of this user, and
        // other tests' (or other sessions') mounts of root may be up meanwhile.
        XCTAssertFalse(sb.pv(["status"]).stdout.contains(mp + "\t"))
        let again = sb.mount()
        XCTAssertEqual(again, mp)
        XCTAssertNotNil(MountProbe.daemonPID(sb, mp))
        sb.unmount(mp)
    }

    /// The runtime directory removed under a live mount (systemd removes /run/user/<uid> at
    /// the last logout; a lingering daemon keeps the vault mounted): the daemon registers
    /// again, so `status` shows the mount and `lock` reaches it. They used to say "no vault
    /// mounted" / "no vault is mounted" about a mounted, unlocked vault.
    func testARemovedRuntimeDirectoryIsMadeAgainByTheDaemon() {
        let sb = Sandbox("pv-rmruntime")
        sb.initStore()
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        let registry = sb.root + "/photovault"
        sb.ok("rm -rf \(Sandbox.quote(registry))")
        XCTAssertTrue(Harness.waitUntil(8) { MountProbe.state(sb, mp) == "unlocked" }, sb.pv(["status"]).stdout)
        let lock = sb.pv(["lock", mp])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertEqual(MountProbe.state(sb, mp), "locked")
        sb.unmount(mp)
        // Not `== "no vault mounted"`: status lists every PhotoVault mount of this user, and
        // other tests' (or other sessions') mounts of root may be up meanwhile.
        XCTAssertFalse(sb.pv(["status"]).stdout.contains(mp + "\t"))
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: registry)) ?? ["?"], [])
    }

    /// `$XDG_RUNTIME_DIR` that is not a private directory of this user (a regular file,
    /// another user's directory, one anybody may write to, a relative path to a directory):
    /// every command falls back to `/tmp/photovault-<uid>`, as for a missing one, so mount,
    /// status, lock and unmount agree and nothing is created in it. A file there used to give
    /// a raw "lstat .../photovault: Not a directory" from status and lock; a relative path
    /// named another directory in the daemon (which works from /) than in the command, so
    /// status did not list the mount; root created a `photovault` of its own in the others.
    func testARuntimeDirectoryThatIsNotAPrivateDirectoryOfThisUserFallsBack() throws {
        let sb = Sandbox("pv-badxdg")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let file = sb.root + "/runtime-file"
        try "x".write(toFile: file, atomically: true, encoding: .utf8)
        let others = sb.plainDir("others"), open = sb.plainDir("open"), relative = sb.plainDir("rel")
        sb.ok("chown 65534 \(Sandbox.quote(others)) && chmod 0700 \(Sandbox.quote(others)) && chmod 0777 \(Sandbox.quote(open))"
              + " && chmod 0700 \(Sandbox.quote(relative))")
        for runtime in [file, others, open, "rel"] {
            var env = sb.env
            env["XDG_RUNTIME_DIR"] = runtime
            func pv(_ args: [String]) -> Harness.Result { Harness.run([Harness.binary] + args, env: env, cwd: sb.root) }
            let m = pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus",
                        "--on-lock", "stay"])
            sb.mounts.append(mp)
            XCTAssertEqual(m.status, 0, "\(runtime): \(m.stderr)")
            XCTAssertEqual(m.stderr, "", runtime)
            let st = pv(["status"])
            XCTAssertEqual(st.status, 0, "\(runtime): \(st.stderr)")
            XCTAssertEqual(st.stderr, "", runtime)
            XCTAssertTrue(st.stdout.contains("\(mp)\tpid="), "\(runtime): \(st.stdout)")
            let lock = pv(["lock", mp])
            XCTAssertEqual(lock.status, 0, "\(runtime): \(lock.stderr)")
            XCTAssertEqual(lock.stdout, "locked\n", runtime)
            XCTAssertTrue(pv(["status"]).stdout.contains("\(mp)\tpid="), runtime)
            let u = pv(["unmount", mp])
            XCTAssertEqual(u.status, 0, "\(runtime): \(u.stderr)")
            XCTAssertFalse(Harness.isMounted(mp), runtime)
            sb.mounts.removeAll { $0 == mp }
            XCTAssertFalse(pv(["status"]).stdout.contains("\(mp)\t"), runtime)
        }
        for dir in [others, open, relative] {
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [], "\(dir) must be left alone")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/rel"))
    }
}
