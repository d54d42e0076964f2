import CSystemd
import Foundation
import Glibc

enum Logind {
    static let name = "org.freedesktop.login1"
    static let managerPath = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    static let sessionInterface = "org.freedesktop.login1.Session"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"
}

/// The bus itself, which announces names changing owner.
enum BusDriver {
    static let name = "org.freedesktop.DBus"
    static let path = "/org/freedesktop/DBus"
    static let interface = "org.freedesktop.DBus"
}

/// Thread-safe box for the session path the system-bus thread resolved.
final class ResolvedPathBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: String?
    var path: String? {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}

/// System-bus side: logind session Lock / LockedHint, Manager sleep/shutdown/session removal,
/// session discovery and the sleep delay inhibitor. Runs on the system-bus thread only.
///
/// logind may come after the watcher (a mount started early at boot) or restart under it
/// (its inhibitor fd dies with it): NameOwnerChanged for its name is watched, and when it
/// appears the session is looked up if it was not found, LockedHint read and the inhibitor
/// taken. The inhibitor is only taken while `wantsSleepInhibitor()` (the vault is unlocked:
/// after a lock it is given up on purpose); `rearm` takes it when that becomes true again.
final class LogindHandler: BusSignalHandler {
    let busName = "system"
    private let configuration: LockWatcherConfiguration
    private let onLock: @Sendable (LockReason) -> Void
    private let log: @Sendable (String) -> Void
    private let inhibitor: SleepInhibitor
    private let resolved: ResolvedPathBox
    private let wantsSleepInhibitor: @Sendable () -> Bool
    /// Set when logind answered "no such name" or left the bus: then we stop calling it (one
    /// log line, not five) until it appears.
    private var logindMissing = false
    private var sessionPath: String?
    /// Whether the fail-safe match (a Lock on any session) is installed on this connection.
    private var anySessionLockMatched = false
    /// The match callback of the current connection, for matches added after `install`.
    private var matchCallback: (callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer)?

    init(configuration: LockWatcherConfiguration, inhibitor: SleepInhibitor, resolved: ResolvedPathBox,
         wantsSleepInhibitor: @escaping @Sendable () -> Bool,
         onLock: @escaping @Sendable (LockReason) -> Void, log: @escaping @Sendable (String) -> Void) {
        self.configuration = configuration
        self.inhibitor = inhibitor
        self.resolved = resolved
        self.wantsSleepInhibitor = wantsSleepInhibitor
        self.onLock = onLock
        self.log = log
    }

    func install(on bus: SDBus, callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer) throws {
        matchCallback = (callback, userdata)
        anySessionLockMatched = false
        // First, so that a logind appearing while the calls below fail is not missed.
        try bus.addMatch("type='signal',sender='\(BusDriver.name)',path='\(BusDriver.path)',interface='\(BusDriver.interface)',member='NameOwnerChanged',arg0='\(Logind.name)'",
                         callback: callback, userdata: userdata)
        sessionPath = resolveSessionPath(bus)
        resolved.path = sessionPath
        try bus.addMatch("type='signal',sender='\(Logind.name)',path='\(Logind.managerPath)',interface='\(Logind.managerInterface)'",
                         callback: callback, userdata: userdata)
        try addSessionMatches(bus)
        // Matches are active; now read the state that may predate them.
        if readLockedHint(bus) == true { onLock(.lockedHint) }
        takeInhibitor(bus)
    }

    /// Lock and LockedHint of our session; without one, the fail-safe: a Lock for any session
    /// locks us (until the session is found, see `logindAppeared`).
    private func addSessionMatches(_ bus: SDBus) throws {
        guard let match = matchCallback else { return }
        let (callback, userdata) = match
        let sender = "type='signal',sender='\(Logind.name)'"
        if let path = sessionPath {
            if !anySessionLockMatched {
                try bus.addMatch("\(sender),path='\(path)',interface='\(Logind.sessionInterface)',member='Lock'",
                                 callback: callback, userdata: userdata)
            }
            try bus.addMatch("\(sender),path='\(path)',interface='\(Logind.propertiesInterface)',member='PropertiesChanged',arg0='\(Logind.sessionInterface)'",
                             callback: callback, userdata: userdata)
        } else {
            log("logind session not found; any session's Lock will lock the vault")
            try bus.addMatch("\(sender),path_namespace='\(logindSessionPathPrefix)',interface='\(Logind.sessionInterface)',member='Lock'",
                             callback: callback, userdata: userdata)
            anySessionLockMatched = true
        }
    }

    func rearm(on bus: SDBus) {
        takeInhibitor(bus)
    }

    /// The inhibitor was taken from the logind of the lost connection (which may have
    /// restarted): it is given up and taken again after the reconnect; the vault locks on
    /// the loss anyway.
    func connectionLost() {
        _ = inhibitor.release()
        logindMissing = false
    }

    func handle(_ message: BusMessage, on bus: SDBus) {
        guard let interface = message.interface, let member = message.member else { return }
        do {
            switch (interface, member) {
            case (Logind.sessionInterface, "Lock"):
                // The fail-safe match stays once the session is found: other sessions' Locks are dropped here.
                if sessionPath == nil || message.path == sessionPath { onLock(.sessionLock) }
            case (Logind.propertiesInterface, "PropertiesChanged"):
                let change = try message.readPropertiesChanged(boolProperty: "LockedHint")
                guard change.interface == Logind.sessionInterface else { return }
                if change.value == true || (change.value == nil && change.invalidated && readLockedHint(bus) == true) {
                    onLock(.lockedHint)
                }
            case (Logind.managerInterface, "PrepareForSleep"):
                if try message.readBool() {
                    onLock(.prepareForSleep)
                } else {
                    takeInhibitor(bus)   // resumed: arm again for the next suspend
                }
            case (Logind.managerInterface, "PrepareForShutdown"):
                if try message.readBool() { onLock(.shutdown) }
            case (Logind.managerInterface, "SessionRemoved"):
                _ = try message.readString()
                let path = try message.readString(type: BusType.objectPath)
                if path == sessionPath { onLock(.shutdown) }
            case (BusDriver.interface, "NameOwnerChanged"):
                let name = try message.readString()
                let oldOwner = try message.readString()
                let newOwner = try message.readString()
                guard name == Logind.name else { return }
                if !oldOwner.isEmpty { logindLeft() }
                if !newOwner.isEmpty { logindAppeared(bus) }
            default:
                break
            }
        } catch {
            log("ignored malformed \(interface).\(member): \(error)")
        }
    }

    // MARK: - logind coming and going

    /// logind stopped (or crashed): the inhibitor fd it gave is dead, and nothing answers.
    private func logindLeft() {
        logindMissing = true
        let held = inhibitor.release()
        log("logind left the system bus" + (held ? "; its sleep inhibitor is gone" : ""))
    }

    /// logind started (late at boot, or again after a restart): what `install` could not do
    /// without it is done now.
    private func logindAppeared(_ bus: SDBus) {
        logindMissing = false
        log("logind appeared on the system bus")
        if sessionPath == nil, let path = resolveSessionPath(bus) {
            sessionPath = path
            resolved.path = path
            do {
                try addSessionMatches(bus)
                log("logind session found; only its Lock locks the vault now")
            } catch {
                log("cannot watch the logind session: \(error)")
            }
        }
        if readLockedHint(bus) == true { onLock(.lockedHint) }
        takeInhibitor(bus)
    }

    // MARK: - Session discovery

    private func resolveSessionPath(_ bus: SDBus) -> String? {
        if let explicit = configuration.sessionPath ?? nonEmpty(configuration.environment["PHOTOVAULT_SESSION_PATH"]) {
            if sd_bus_object_path_is_valid(explicit) > 0 { return explicit }
            log("ignoring invalid session path \(explicit)")
        }
        if let id = nonEmpty(configuration.environment["XDG_SESSION_ID"]) {
            return logindSessionPath(forID: id)
        }
        // A user service has no session of its own; GetSession("auto") then picks the user's
        // display session (README 1.3).
        let attempts: [(String, BusArgument)] = [("GetSessionByPID", .uint32(UInt32(getpid()))),
                                                 ("GetSession", .string("auto"))]
        var failures: [String] = []
        for (method, argument) in attempts where !logindMissing {
            do {
                let reply = try bus.call(destination: Logind.name, path: Logind.managerPath,
                                         interface: Logind.managerInterface, member: method, arguments: [argument])
                let path = try reply.readString(type: BusType.objectPath)
                if sd_bus_object_path_is_valid(path) > 0 { return path }
            } catch {
                noteFailure(error)
                failures.append("\(error)")
            }
        }
        if !failures.isEmpty && !logindMissing { log("logind session lookup failed: \(failures.joined(separator: "; "))") }
        return nil
    }

    private func nonEmpty(_ s: String?) -> String? {
        guard let s, !s.isEmpty else { return nil }
        return s
    }

    /// Remembers that nobody owns org.freedesktop.login1, logging it once.
    private func noteFailure(_ error: Error) {
        guard case LockError.busCall(_, let name, _) = error, !logindMissing,
              name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
        else { return }
        logindMissing = true
        log("logind is not running on the system bus: no sleep inhibitor, no session lookup until it starts")
    }

    private func readLockedHint(_ bus: SDBus) -> Bool? {
        guard let path = sessionPath, !logindMissing else { return nil }
        do {
            let reply = try bus.call(destination: Logind.name, path: path, interface: Logind.propertiesInterface,
                                     member: "Get", arguments: [.string(Logind.sessionInterface), .string("LockedHint")])
            return try reply.readVariantBool()
        } catch {
            noteFailure(error)
            if !logindMissing { log("cannot read LockedHint: \(error)") }
            return nil
        }
    }

    // MARK: - Sleep inhibitor

    /// Takes the delay inhibitor unless one is held, logind is missing or the owner does not
    /// want one now (the vault is locked).
    private func takeInhibitor(_ bus: SDBus) {
        guard configuration.takeSleepInhibitor, !logindMissing, !inhibitor.isHeld, wantsSleepInhibitor() else { return }
        do {
            let reply = try bus.call(destination: Logind.name, path: Logind.managerPath, interface: Logind.managerInterface,
                                     member: "Inhibit",
                                     arguments: [.string("sleep"), .string("photovault"),
                                                 .string("forget vault keys before sleep"), .string("delay")])
            inhibitor.hold(try reply.readDuplicatedFD())
        } catch {
            noteFailure(error)
            if !logindMissing { log("cannot take the sleep inhibitor: \(error)") }
        }
    }
}
