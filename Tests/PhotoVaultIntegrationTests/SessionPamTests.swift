import Foundation
import XCTest

/// Unlocking with the login (issue 37): a real libpam stack driven by `pamtester`, with a PAM
/// service file the test writes into /etc/pam.d (and removes) holding the README's line,
/// `auth optional pam_exec.so quiet expose_authtok PHOTOVAULT pam ...`.
///
/// The account belongs to a real OS user (`pvsession`, with a login password set through
/// chpasswd and a home in the sandbox), since the line acts as PAM_USER. This machine's
/// /dev/fuse is root's alone (mode 600), so each scenario runs in a private mount namespace
/// where a node of the same device with Debian's usual mode 666 is bound over it; the user's
/// mounts live and die in that namespace.
final class SessionPamTests: XCTestCase {
    static let osUser = SessionTestUser.name
    static let loginPassword = "login words 1"
    static let vaultPassword = "vault words 2"

    /// The PAM line exactly as the README gives it, with the built binary in place of the
    /// installed one.
    static func readmeLine() throws -> String {
        let readme = try String(contentsOf: SessionSystemdTests.repoRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let line = try XCTUnwrap(readme.split(separator: "\n").first { $0.hasPrefix("auth optional pam_exec.so ") },
                                 "the README has no PAM line")
        XCTAssertTrue(line.contains(" /usr/local/bin/photovault pam"), String(line))
        return line.replacingOccurrences(of: "/usr/local/bin/photovault", with: Harness.binary)
    }

    private var service: String?
    override func tearDown() {
        if let s = service { unlink("/etc/pam.d/" + s) }
        super.tearDown()
    }

    private func prepareUser(_ s: Sandbox) -> String {
        SessionTestUser.prepare(s, loginPassword: Self.loginPassword, vaultPassword: Self.vaultPassword)
    }

    /// A PAM service of this test's own holding `lines`.
    private func writeService(_ lines: String) throws -> String {
        // Lower case: libpam looks a service up by its name in lower case.
        let name = "pv-session-test-\(UUID().uuidString.prefix(8).lowercased())"
        try lines.write(toFile: "/etc/pam.d/" + name, atomically: true, encoding: .utf8)
        service = name
        return name
    }

    /// Runs `script` in a private mount namespace with a mode-666 /dev/fuse, `asu` (a command
    /// as the user, in the environment of their session without XDG_RUNTIME_DIR) and helpers.
    private func inNamespace(_ s: Sandbox, home: String, _ script: String) -> Harness.Result {
        let uid = Harness.run(["id", "-u", Self.osUser]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let full = """
            set -u
            mount --make-rprivate / || exit 99
            \(SessionTestUser.openFuseDevice(s))
            H=\(home); MP=\(home)/PhotoVault; PV=\(Harness.binary); U=\(Self.osUser)
            ACC=$H/.local/share/photovault/store/accounts
            cleanup() {
                for m in $(awk '$5 ~ "^\(s.root)/home" {print $5}' /proc/self/mountinfo); do fusermount3 -uz "$m"; done
                rm -rf /tmp/photovault-\(uid)
            }
            trap cleanup EXIT
            asu() { runuser -u $U -- env -u XDG_RUNTIME_DIR -u PHOTOVAULT_DEVICE_SECRET -u XDG_DATA_HOME -u XDG_CACHE_HOME HOME=$H PHOTOVAULT_KDF_PROFILE=floor "$@"; }
            # pamtester with the password on stdin; its output must hold nothing of photovault's.
            login() { out=$(printf '%s\\n' "$2" | pamtester "$1" $U authenticate 2>&1); rc=$?; case "$out" in *photovault*) echo "SPOKE: $out";; esac; [ $rc = 0 ] || echo "pamtester: $out" >&2; return $rc; }
            # The line's work is done in the background: wait (at most 30 s) for it to end.
            settle() { for _ in $(seq 600); do pgrep -u $U -f __pam-worker >/dev/null || return 0; sleep 0.05; done; echo "worker still running"; }
            state() { asu $PV status | grep -o 'state=[a-z]*' | head -1; }
            until_readable() { for _ in $(seq 300); do asu cat "$1" 2>/dev/null && return 0; sleep 0.1; done; echo "never readable"; return 1; }
            \(script)
            """
        return Harness.run(["unshare", "-m", "--propagation", "private", "/bin/bash", "-c", full], env: s.env, timeout: 180)
    }

    /// GNOME's gdm-password with the README's line after `@include common-auth`: the login
    /// password (the user's real one, checked by pam_unix) mounts the vault at ~/PhotoVault,
    /// through the account's login slot; pamtester returns at once and nothing is said.
    func testLoggingInMountsTheVaultThroughTheLoginSlot() throws {
        let s = Sandbox("pv-session-pam")
        let home = prepareUser(s)
        let svc = try writeService("""
            @include common-auth
            \(try Self.readmeLine())
            account required pam_permit.so

            """)
        let r = inNamespace(s, home: home, """
            asu $PV init >/dev/null && asu $PV user add --passfile \(s.root)/vp >/dev/null || { echo "setup failed"; exit 1; }
            asu $PV user add-login --passfile \(s.root)/vp --login-passfile \(s.root)/lp
            login \(svc) "not the password" && echo "wrong password accepted"; settle
            [ -e "$MP" ] && grep -q " $MP " /proc/self/mountinfo && echo "mounted by a wrong password"
            start=$(date +%s%N)
            login \(svc) "\(Self.loginPassword)" || echo "login failed"
            echo "pamtester took $(( ($(date +%s%N) - start) / 1000000 )) ms" >&2
            [ $(( ($(date +%s%N) - start) / 1000000 )) -lt 5000 ] || echo "login held up"
            for _ in $(seq 300); do grep -q " $MP " /proc/self/mountinfo && break; sleep 0.1; done
            state
            echo "at first login" | asu tee "$MP/a.txt" >/dev/null && asu cat "$MP/a.txt"
            asu $PV unmount "$MP" && echo "unmounted"
            """)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout) stderr: \(r.stderr)")
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init),
                       ["Your login password now opens the vault of \(Self.osUser) (through the PAM line; see the README)",
                        "state=unlocked", "at first login", "unmounted"], r.stderr)
    }

    /// A screen unlock: the line alone in the stack, so that photovault itself sees every
    /// password. A mount locked with --on-lock stay is unlocked by the login password (login
    /// slot) and by the vault password; wrong passwords change nothing, are not counted (no
    /// throttle file, no wait for the right one after them), and neither is a login password
    /// once its slot is removed.
    func testScreenUnlockReopensALockedStayMountAndWrongPasswordsChangeNothing() throws {
        let s = Sandbox("pv-session-pam")
        let home = prepareUser(s)
        let svc = try writeService("""
            \(try Self.readmeLine())
            auth required pam_permit.so

            """)
        let r = inNamespace(s, home: home, """
            asu $PV init >/dev/null && asu $PV user add --passfile \(s.root)/vp >/dev/null || { echo "setup failed"; exit 1; }
            asu $PV user add-login --passfile \(s.root)/vp --login-passfile \(s.root)/lp >/dev/null
            asu mkdir -p "$MP"
            asu $PV mount "$MP" --passfile \(s.root)/vp --on-lock stay --no-dbus >/dev/null || { echo "mount failed"; exit 1; }
            echo "complete photo" | asu tee "$MP/c.jpg" >/dev/null
            asu $PV lock "$MP" >/dev/null; state
            asu cat "$MP/c.jpg" 2>/dev/null || echo "unreadable while locked"
            for i in 1 2 3 4 5 6; do login \(svc) "wrong guess $i" || echo "pam failed"; done; settle
            state; ls "$ACC" | grep -c '[.]throttle$'
            login \(svc) "\(Self.vaultPassword)"
            until_readable "$MP/c.jpg"; state
            asu $PV lock "$MP" >/dev/null
            login \(svc) "\(Self.loginPassword)"
            until_readable "$MP/c.jpg"; state
            asu $PV user remove-login --passfile \(s.root)/vp
            asu $PV lock "$MP" >/dev/null
            login \(svc) "\(Self.loginPassword)"; settle
            state
            asu $PV unmount "$MP" && echo "unmounted"
            """)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout) stderr: \(r.stderr)")
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init),
                       ["state=locked", "unreadable while locked",
                        "state=locked", "0",
                        "complete photo", "state=unlocked",
                        "complete photo", "state=unlocked",
                        "The login password no longer opens the vault of \(Self.osUser)",
                        "state=locked", "unmounted"], r.stderr)
    }
}
