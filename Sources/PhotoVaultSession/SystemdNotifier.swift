import CSystemd
import Glibc

/// The sd_notify(3) protocol for `photovault mount -f` run as a `Type=notify` unit: READY=1
/// once the mount is live, STATUS= lines, STOPPING=1 when it goes. Without $NOTIFY_SOCKET
/// (not under systemd) every call does nothing.
public enum SystemdNotifier {
    /// True when a service manager listens (the unit is `Type=notify`, or a test bound one).
    public static var isActive: Bool { getenv("NOTIFY_SOCKET") != nil }

    /// Sends newline-separated `KEY=VALUE` assignments; false if they could not be sent.
    @discardableResult
    public static func notify(_ assignments: [String]) -> Bool {
        guard isActive else { return false }
        // A newline inside a value would start another assignment: a STATUS= text names a
        // mountpoint, which may hold one.
        let text = assignments.map { $0.replacingNewlines() }.joined(separator: "\n")
        return sd_notify(0, text) > 0
    }

    public static func ready(status: String) { notify(["READY=1", "STATUS=" + status]) }
    public static func status(_ text: String) { notify(["STATUS=" + text]) }
    public static func stopping(status: String) { notify(["STOPPING=1", "STATUS=" + status]) }
}

extension String {
    func replacingNewlines() -> String { String(map { $0 == "\n" ? " " : $0 }) }
}
