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
final class LogindHandler: BusSignalHandler {
    let busName = "system"
    private let configuration: LockWatcherConfiguration
    private let onLock: @Sendable (LockReason) -> Void
    private let log: @Sendable (String) -> Void
    private let inhibitor: SleepInhibitor
    private let resolved: ResolvedPathBox
    /// Set when logind answered "no such name": then we stop calling it (one log line, not five).
    private var logindMissing = false
    private var sessionPath: String?

    init(configuration: LockWatcherConfiguration, inhibitor: SleepInhibitor, resolved: ResolvedPathBox,
         onLock: @escaping @Sendable (LockReason) -> Void, log: @escaping @Sendable (String) -> Void) {
        self.configuration = configuration
        self.inhibitor = inhibitor
        self.resolved = resolved
        self.onLock = onLock
        self.log = log
    }

    func install(on bus: SDBus, callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer) throws {
        sessionPath = resolveSessionPath(bus)
        resolved.path = sessionPath
        let sender = "type='signal',sender='\(Logind.name)'"
        try bus.addMatch("\(sender),path='\(Logind.managerPath)',interface='\(Logind.managerInterface)'",
                         callback: callback, userdata: userdata)
        if let path = sessionPath {
            try bus.addMatch("\(sender),path='\(path)',interface='\(Logind.sessionInterface)',member='Lock'",
                             callback: callback, userdata: userdata)
            try bus.addMatch("\(sender),path='\(path)',interface='\(Logind.propertiesInterface)',member='PropertiesChanged',arg0='\(Logind.sessionInterface)'",
                             callback: callback, userdata: userdata)
        } else {
            // Fail-safe: without our own path, a Lock for any session locks us.
            log("logind session not found; any session's Lock will lock the vault")
            try bus.addMatch("\(sender),path_namespace='\(logindSessionPathPrefix)',interface='\(Logind.sessionInterface)',member='Lock'",
                             callback: callback, userdata: userdata)
        }
        // Matches are active; now read the state that may predate them.
        if sessionPath != nil, !logindMissing, readLockedHint(bus) == true {
            onLock(.lockedHint)
        }
        if configuration.takeSleepInhibitor { takeInhibitor(bus) }
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
                onLock(.sessionLock)
            case (Logind.propertiesInterface, "PropertiesChanged"):
                let change = try message.readPropertiesChanged(boolProperty: "LockedHint")
                guard change.interface == Logind.sessionInterface else { return }
                if change.value == true || (change.value == nil && change.invalidated && readLockedHint(bus) == true) {
                    onLock(.lockedHint)
                }
            case (Logind.managerInterface, "PrepareForSleep"):
                if try message.readBool() {
                    onLock(.prepareForSleep)
                } else if configuration.takeSleepInhibitor && !inhibitor.isHeld {
                    takeInhibitor(bus)   // resumed: arm again for the next suspend
                }
            case (Logind.managerInterface, "PrepareForShutdown"):
                if try message.readBool() { onLock(.shutdown) }
            case (Logind.managerInterface, "SessionRemoved"):
                _ = try message.readString()
                let path = try message.readString(type: BusType.objectPath)
                if path == sessionPath { onLock(.shutdown) }
            default:
                break
            }
        } catch {
            log("ignored malformed \(interface).\(member): \(error)")
        }
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
        log("logind is not running on the system bus: no sleep inhibitor, no session lookup")
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

    private func takeInhibitor(_ bus: SDBus) {
        guard !logindMissing, !inhibitor.isHeld else { return }
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
