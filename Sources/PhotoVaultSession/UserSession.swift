import CSystemd
import Glibc

/// The login session a vault mounted at login belongs to. PAM's auth stack runs before the
/// session exists (pam_systemd opens it afterwards), so a mount made then would find no
/// /run/user/UID (its registry would go to the fallback directory, where the session's
/// `photovault status` and `lock` do not look), no session bus (no screen-saver signals) and
/// no logind session of its own. On a systemd machine this waits, in the background worker,
/// until the user's session bus is there, and names the user's display session.
public enum UserSession {
    public struct Found: Equatable {
        /// /run/user/UID once its session bus socket exists; nil if it never came.
        public var runtimeDirectory: String?
        /// logind's display session of the user (sd_uid_get_display), for XDG_SESSION_ID.
        public var sessionID: String?
    }

    /// True on a machine booted with systemd (sd_booted(3)); elsewhere nothing is waited for.
    public static var systemdBooted: Bool { sd_booted() > 0 }

    /// Waits at most `timeout` seconds for /run/user/`uid`/bus on a systemd machine.
    public static func await(uid: uid_t, timeout: Double) -> Found {
        let runtime = "/run/user/\(uid)"
        var st = stat()
        func busThere() -> Bool { stat(runtime + "/bus", &st) == 0 }
        if systemdBooted {
            var waited = 0.0
            while !busThere() && waited < timeout {
                usleep(100_000)
                waited += 0.1
            }
        }
        var found = Found(runtimeDirectory: busThere() ? runtime : nil, sessionID: nil)
        var session: UnsafeMutablePointer<CChar>? = nil
        if systemdBooted, sd_uid_get_display(uid, &session) >= 0, let s = session {
            found.sessionID = String(cString: s)
            free(s)
        }
        return found
    }
}
