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

    init(onLock: @escaping @Sendable (LockReason) -> Void) {
        self.onLock = onLock
    }

    func install(on bus: SDBus, callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer) throws {
        for interface in Self.activeChangedInterfaces {
            try bus.addMatch("type='signal',interface='\(interface)',member='ActiveChanged'", callback: callback, userdata: userdata)
        }
        try bus.addMatch("type='signal',interface='\(Self.kdeInterface)',member='AboutToLock'", callback: callback, userdata: userdata)
    }

    func handle(_ message: BusMessage, on bus: SDBus) {
        guard let interface = message.interface, let member = message.member else { return }
        if member == "ActiveChanged", Self.activeChangedInterfaces.contains(interface) {
            if (try? message.readBool()) == true { onLock(.screenSaver(interface)) }
        } else if member == "AboutToLock", interface == Self.kdeInterface {
            onLock(.screenSaver(interface))
        }
    }
}
