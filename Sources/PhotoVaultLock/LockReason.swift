/// Why the vault must lock. Every case means "forget keys now"; unlock events never produce one
/// (a spoofed signal may only lock early, never unlock: README pitfall 11).
public enum LockReason: Sendable, Equatable, CustomStringConvertible {
    /// logind `Session.Lock` for our session (a lock *request*, e.g. `loginctl lock-session`).
    case sessionLock
    /// logind `LockedHint` became true (or was already true at start): the desktop is locked.
    case lockedHint
    /// `ActiveChanged(true)` (or KDE `AboutToLock`); the associated value is the D-Bus interface.
    case screenSaver(String)
    /// `Manager.PrepareForSleep(true)`; the owner releases the sleep inhibitor after evicting keys.
    case prepareForSleep
    /// `Manager.PrepareForShutdown(true)` or `SessionRemoved` for our session.
    case shutdown
    /// A bus connection dropped; the session bus dies at logout. The value names bus and error.
    case busLost(String)
    /// No FUSE request for the configured idle time.
    case idle
    /// SIGUSR1.
    case userSignal
    /// `photovault lock` through the control socket.
    case controlSocket
    /// SIGTERM, SIGINT or SIGHUP: lock and unmount cleanly, then exit.
    case terminate(Int32)

    public var description: String {
        switch self {
        case .sessionLock: return "session lock (logind Lock)"
        case .lockedHint: return "session locked (logind LockedHint)"
        case .screenSaver(let name): return "screen saver active (\(name))"
        case .prepareForSleep: return "system going to sleep"
        case .shutdown: return "system shutdown or session ended"
        case .busLost(let what): return "bus connection lost (\(what))"
        case .idle: return "idle timeout"
        case .userSignal: return "SIGUSR1"
        case .controlSocket: return "lock command"
        case .terminate(let sig): return "terminated by signal \(sig)"
        }
    }
}
