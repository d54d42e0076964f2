import Foundation

/// Where to listen. The defaults follow the environment, as a desktop session sets it up.
public struct LockWatcherConfiguration: Sendable {
    /// nil: sd-bus default (honours `DBUS_SYSTEM_BUS_ADDRESS`, else /run/dbus/system_bus_socket).
    public var systemBusAddress: String?
    /// nil: sd-bus default (honours `DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus`).
    public var sessionBusAddress: String?
    /// Explicit logind session object path. When nil the watcher tries, in order:
    /// env `PHOTOVAULT_SESSION_PATH`, env `XDG_SESSION_ID` (escaped locally),
    /// logind `GetSessionByPID(getpid())`, logind `GetSession("auto")`, and finally the fail-safe:
    /// a `Lock` on any session under /org/freedesktop/login1/session locks the vault.
    public var sessionPath: String?
    /// Take a logind "sleep" delay inhibitor so keys can be evicted before suspend.
    public var takeSleepInhibitor: Bool
    /// Environment used for session discovery (injectable for tests; the bus addresses with nil
    /// values are still read by sd-bus from the real process environment).
    public var environment: [String: String]

    public init(systemBusAddress: String? = nil,
                sessionBusAddress: String? = nil,
                sessionPath: String? = nil,
                takeSleepInhibitor: Bool = true,
                environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.systemBusAddress = systemBusAddress
        self.sessionBusAddress = sessionBusAddress
        self.sessionPath = sessionPath
        self.takeSleepInhibitor = takeSleepInhibitor
        self.environment = environment
    }
}
