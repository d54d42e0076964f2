import CSystemd

/// Session-bus side: screen savers announcing that they became active.
final class ScreenSaverHandler: BusSignalHandler {
    let busName = "session"
    private let onLock: @Sendable (LockReason) -> Void

    /// Interfaces whose ActiveChanged(b) we follow. KDE emits org.freedesktop.ScreenSaver on two
    /// paths, so we match on interface and member only (no path, no sender): a spoofed signal
    /// can only lock early, while a too strict match could miss a real lock.
    static let activeChangedInterfaces = ["org.freedesktop.ScreenSaver", "org.gnome.ScreenSaver", "org.xfce.ScreenSaver"]
    /// KDE announces an imminent lock with AboutToLock (it has no ActiveChanged of its own).
    static let kdeInterface = "org.kde.screensaver"

    private let log: @Sendable (String) -> Void

    init(onLock: @escaping @Sendable (LockReason) -> Void, log: @escaping @Sendable (String) -> Void) {
        self.onLock = onLock
        self.log = log
    }

    func install(on bus: SDBus, callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer) throws {
        for interface in Self.activeChangedInterfaces {
            try bus.addMatch("type='signal',interface='\(interface)',member='ActiveChanged'", callback: callback, userdata: userdata)
        }
        try bus.addMatch("type='signal',interface='\(Self.kdeInterface)',member='AboutToLock'", callback: callback, userdata: userdata)
        // Matches are active; now the state that may predate them. A screen that locked while
        // the vault was being mounted (during the key derivation of `photovault mount`, or
        // before this watcher was up) sent its ActiveChanged to nobody: without this the vault
        // came up unlocked behind the locked screen and stayed so until the next lock.
        for interface in Self.activeChangedInterfaces where isActive(interface, on: bus) {
            onLock(.screenSaver(interface))
        }
    }

    /// GetActive of the screen saver owning `interface` (service name = interface, object path
    /// = "/" + the name with dots as slashes). A name nobody owns is not started and is no
    /// screen saver; other failures cost one log line.
    private func isActive(_ interface: String, on bus: SDBus) -> Bool {
        let path = "/" + String(interface.map { $0 == "." ? "/" : $0 })
        do {
            let reply = try bus.call(destination: interface, path: path, interface: interface, member: "GetActive",
                                     arguments: [], timeoutMicroseconds: 1_000_000, autoStart: false)
            return try reply.readBool()
        } catch LockError.busCall(_, let name, _) where Self.absent.contains(name) {
            return false
        } catch {
            log("cannot ask \(interface) whether the screen is locked: \(error)")
            return false
        }
    }

    private static let absent: Set<String> = ["org.freedesktop.DBus.Error.NameHasNoOwner", "org.freedesktop.DBus.Error.ServiceUnknown"]

    func handle(_ message: BusMessage, on bus: SDBus) {
        guard let interface = message.interface, let member = message.member else { return }
        if member == "ActiveChanged", Self.activeChangedInterfaces.contains(interface) {
            if (try? message.readBool()) == true { onLock(.screenSaver(interface)) }
        } else if member == "AboutToLock", interface == Self.kdeInterface {
            onLock(.screenSaver(interface))
        }
    }
}
