import Foundation
import XCTest

/// The OS user the session tests act for (`pvsession`): PAM's line and mount.fuse3's
/// `setuid=` work as a real user, with a home in the sandbox and a known login password.
enum SessionTestUser {
    static let name = "pvsession"

    /// Creates the user if needed, points its home into the sandbox and sets its login
    /// password; writes `vp` (vault password), `lp` (login password) and `wrong` into the
    /// sandbox, the user's and mode 600. Returns the home.
    static func prepare(_ s: Sandbox, loginPassword: String, vaultPassword: String,
                        file: StaticString = #filePath, line: UInt = #line) -> String {
        let home = s.root + "/home"
        chmod(s.root, 0o755)
        if Harness.run(["id", name]).status != 0 {
            XCTAssertEqual(Harness.run(["useradd", "-M", "-s", "/bin/bash", "-d", home, name]).status, 0,
                           file: file, line: line)
        }
        let prep = Harness.sh("""
            set -e
            # usermod refuses while the user runs anything (a daemon of the previous test,
            # still on its way out after its lazy unmount): wait for those first. The
            # privacy sweep a previous test's unmount left (docs/PRIVACY.md: it keeps the
            # thumbnail cache closed for 60 s) is ended: it belongs to that test's vault.
            for p in $(pgrep -u \(name) -f '__privacy-sweep'); do kill "$p"; done
            for _ in $(seq 200); do pgrep -u \(name) >/dev/null || break; sleep 0.05; done
            usermod -d \(home) \(name) 2>/dev/null || true
            [ "$(getent passwd \(name) | cut -d: -f6)" = \(home) ] || { echo "the home of \(name) is not \(home)" >&2; exit 1; }
            mkdir -p \(home) && chown \(name): \(home) && chmod 700 \(home)
            echo '\(name):\(loginPassword)' | chpasswd
            printf '%s\\n' '\(vaultPassword)' > \(s.root)/vp
            printf '%s\\n' '\(loginPassword)' > \(s.root)/lp
            printf '%s\\n' 'not the password' > \(s.root)/wrong
            chown \(name) \(s.root)/vp \(s.root)/lp \(s.root)/wrong && chmod 600 \(s.root)/vp \(s.root)/lp \(s.root)/wrong
            """)
        XCTAssertEqual(prep.status, 0, prep.stderr, file: file, line: line)
        return home
    }

    /// Shell lines for a private mount namespace: this machine's /dev/fuse is root's alone
    /// (mode 600), so a node of the same device with Debian's usual mode 666 is bound over it,
    /// and the user can mount (through fusermount3) as on a desktop.
    static func openFuseDevice(_ s: Sandbox) -> String {
        "mknod \(s.root)/fuse c 10 229 && chmod 666 \(s.root)/fuse && mount --bind \(s.root)/fuse /dev/fuse "
            + "|| { echo \"no fuse node\"; exit 99; }"
    }
}
