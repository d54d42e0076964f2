import Foundation
import XCTest

/// mount(8) and fstab (issue 37): `mount -t fuse.photovault`, an fstab line read with
/// util-linux's `mount -T FILE`, and `umount`, through the real /sbin/mount.fuse3.
///
/// mount(8) gives its helpers no PATH, so mount.fuse3's `/bin/sh -c photovault ...` finds the
/// program on the shell's default PATH only (/usr/local/sbin first). Each scenario runs in a
/// private mount namespace (unshare -m) where a directory holding `photovault` (the built
/// binary) is bound over /usr/local/sbin: other users of this machine see neither it nor the mount.
final class SessionFstabTests: XCTestCase {
    /// Runs `script` with bash inside a new private mount namespace, with `photovault` on the
    /// default PATH and $S (store), $MP (mountpoint), $PF (password file) set. Every mount the
    /// script leaves is lazily unmounted on the way out, so no daemon keeps the namespace.
    private func inNamespace(_ s: Sandbox, _ script: String, timeout: Double = 90) -> Harness.Result {
        let bin = s.root + "/bin"
        try? FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: bin + "/photovault")
        try? FileManager.default.createSymbolicLink(atPath: bin + "/photovault", withDestinationPath: Harness.binary)
        let mp = s.root + "/mnt"
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let full = """
            set -u
            mount --make-rprivate / && mount --bind \(bin) /usr/local/sbin || { echo "namespace setup failed"; exit 99; }
            S=\(s.store); MP=\(mp); PF=\(s.passfile)
            cleanup() { for m in $(awk '$5 ~ "^\(s.root)" {print $5}' /proc/self/mountinfo); do fusermount3 -uz "$m"; done; }
            trap cleanup EXIT
            # Waits (at most 10 s) until the daemon of the vault is gone after an unmount.
            daemon_gone() { for _ in $(seq 200); do photovault status | grep -qF "$MP$(printf '\\t')" || return 0; sleep 0.05; done; return 1; }
            \(script)
            """
        return Harness.run(["unshare", "-m", "--propagation", "private", "/bin/bash", "-c", full], env: s.env,
                           timeout: timeout)
    }

    func testMountDashTFusePhotovaultAndUmount() {
        let s = Sandbox("pv-session-fstab")
        s.initStore()
        let r = inNamespace(s, """
            mount -t fuse.photovault "$S" "$MP" -o user=alice,passfile=$PF,no-dbus,on-lock=stay,idle=1h,noauto,nofail,_netdev,x-systemd.automount,defaults,rw,dev,suid,exec >/dev/null || { echo "mount failed: $?"; exit 1; }
            findmnt -no FSTYPE "$MP"
            echo "through mount(8)" > "$MP/note.txt" && cat "$MP/note.txt"
            photovault status | grep -o "state=unlocked"
            umount "$MP" || { echo "umount failed"; exit 1; }
            mountpoint -q "$MP" && echo "still mounted"
            daemon_gone && echo "daemon gone"
            photovault export --store "$S" --user alice --passfile "$PF" /note.txt -
            """)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout) stderr: \(r.stderr)")
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init),
                       ["fuse.photovault", "through mount(8)", "state=unlocked", "daemon gone", "through mount(8)"],
                       r.stderr)
    }

    func testAnFstabLineMountsReadOnlyAndUmounts() {
        let s = Sandbox("pv-session-fstab")
        s.initStore()
        XCTAssertEqual(s.pv(["import", "--store", s.store, "--user", "alice", "--passfile", s.passfile,
                             "-", "/note.txt"], stdin: "imported before").status, 0)
        let r = inNamespace(s, """
            ls "$S" >/dev/null
            printf '%s %s fuse.photovault user=alice,passfile=%s,ro,no-dbus,noauto,nofail 0 0\\n' "$S" "$MP" "$PF" > \(s.root)/fstab
            mount -T \(s.root)/fstab "$MP" >/dev/null || { echo "mount failed: $?"; exit 1; }
            findmnt -no FSTYPE,VFS-OPTIONS "$MP" | tr ',' ' ' | awk '{print $1, $2}'
            cat "$MP/note.txt"; echo
            touch "$MP/new" 2>/dev/null && echo "writable" || echo "read-only"
            umount "$MP" && daemon_gone && echo "unmounted"
            """)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout) stderr: \(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines, ["fuse.photovault ro", "imported before", "read-only", "unmounted"], r.stderr)
    }

    /// A store whose name is a command word (here `user`) is still a store in the mount(8)
    /// form when written with a slash (`./user`); without one it stays the command.
    func testAStoreNamedLikeACommandIsAStoreWhenWrittenWithASlash() {
        let s = Sandbox("pv-session-fstab")
        let store = s.root + "/user"
        XCTAssertEqual(s.pv(["init", "--store", store]).status, 0)
        XCTAssertEqual(s.pv(["user", "add", "alice", "--store", store, "--passfile", s.passfile]).status, 0)
        let r = inNamespace(s, """
            cd \(s.root)
            photovault user mnt -o user=alice,passfile=$PF 2>&1; echo "exit $?"
            mount -t fuse.photovault ./user "$MP" -o user=alice,passfile=$PF,no-dbus >/dev/null || { echo "mount failed: $?"; exit 1; }
            findmnt -no FSTYPE "$MP"
            umount "$MP" && daemon_gone && echo "unmounted"
            photovault ./user "$MP" -o user=alice,passfile=$PF,no-dbus,sync 2>&1; echo "exit $?"
            """)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout) stderr: \(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 6, r.stdout)
        guard lines.count == 6 else { return }
        XCTAssertTrue(lines[0].contains("unknown command 'user mnt'"), lines[0])
        XCTAssertEqual(lines[1], "exit 2")
        XCTAssertEqual(Array(lines[2...3]), ["fuse.photovault", "unmounted"])
        XCTAssertTrue(lines[4].contains("unknown mount option 'sync'"), lines[4])
        XCTAssertEqual(lines[5], "exit 2")
    }

    /// `photovault mount -o ro` (gocryptfs' and sshfs' habit; issue 38 asks for it too): the
    /// same words as an fstab line, merged with the options given directly.
    func testMountDashOTakesTheFstabWords() {
        let s = Sandbox("pv-session-fstab")
        s.initStore()
        let mp = s.mount(extra: ["-o", "ro,on-lock=stay,noauto", "-o", "idle=1h"])
        XCTAssertEqual(Harness.run(["findmnt", "-no", "VFS-OPTIONS", mp]).stdout.split(separator: ",").first, "ro")
        let touch = Harness.run(["touch", mp + "/new"])
        XCTAssertNotEqual(touch.status, 0)
        XCTAssertTrue(touch.stderr.contains("Read-only file system"), touch.stderr)
        s.unmount(mp)

        let base = ["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus"]
        let twice = s.pv(base + ["--idle", "5m", "-o", "idle=10m"])
        XCTAssertEqual(twice.status, 2, twice.stderr)
        XCTAssertTrue(twice.stderr.contains("option '--idle' given both directly and in -o"), twice.stderr)
        let unknown = s.pv(base + ["-o", "ro,sync"])
        XCTAssertEqual(unknown.status, 2, unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("unknown mount option 'sync'"), unknown.stderr)
        XCTAssertFalse(Harness.isMounted(mp))
    }

    /// An fstab line with mount.fuse3's `setuid=USER`, mounted by root: photovault runs as
    /// that user, so the mount is theirs (a root-owned FUSE mount shuts every other user out),
    /// their default store is found without HOME, and `umount` by root ends their daemon.
    func testAnFstabLineWithSetuidMountsTheVaultForThatUser() {
        let s = Sandbox("pv-session-fstab")
        let home = SessionTestUser.prepare(s, loginPassword: "login words 1", vaultPassword: "vault words 2")
        let user = SessionTestUser.name
        let uid = Harness.run(["id", "-u", user]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let r = inNamespace(s, """
            \(SessionTestUser.openFuseDevice(s))
            asu() { runuser -u \(user) -- env -u XDG_RUNTIME_DIR -u PHOTOVAULT_DEVICE_SECRET -u XDG_DATA_HOME HOME=\(home) "$@"; }
            asu photovault init >/dev/null && asu photovault user add --passfile \(s.root)/vp >/dev/null || { echo "setup failed"; exit 1; }
            asu mkdir \(home)/vault
            echo "from the user's session" | asu photovault import --passfile \(s.root)/vp - /note.txt 2>/dev/null
            printf '%s %s fuse.photovault noauto,setuid=\(user),passfile=%s,no-dbus 0 0\\n' \(home)/.local/share/photovault/store \(home)/vault \(s.root)/vp > \(s.root)/fstab
            mount -T \(s.root)/fstab \(home)/vault >/dev/null || { echo "mount failed: $?"; exit 1; }
            grep " \(home)/vault " /proc/self/mountinfo | grep -o "user_id=[0-9]*"
            asu cat \(home)/vault/note.txt
            asu photovault status | grep -o "state=unlocked"
            umount \(home)/vault && for _ in $(seq 200); do asu photovault status | grep -q "no vault mounted" && break; sleep 0.05; done
            asu photovault status
            rm -rf /tmp/photovault-\(uid)
            """)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout) stderr: \(r.stderr)")
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init),
                       ["user_id=\(uid)", "from the user's session", "state=unlocked", "no vault mounted"], r.stderr)
    }
}
