import Foundation

/// Watches the system bus (logind) and the session bus (screen savers) for lock events and
/// calls `onLock`, on the bus thread that saw the event. One thread per bus; sd-bus objects never
/// leave their thread. Events may repeat (KDE sends ActiveChanged twice, LockSessions locks every
/// session): the owner deduplicates. Unlock events are never reported.
public final class BusLockWatcher: @unchecked Sendable {
    private let configuration: LockWatcherConfiguration
    private let onLock: @Sendable (LockReason) -> Void
    private let log: @Sendable (String) -> Void
    private let wantsSleepInhibitor: @Sendable () -> Bool
    private let inhibitor = SleepInhibitor()
    private let resolved = ResolvedPathBox()
    private let lock = NSLock()
    private var workers: [BusWorker] = []

    /// `wantsSleepInhibitor` says whether a sleep inhibitor is wanted now (the owner's vault is
    /// unlocked); it is asked on the system-bus thread before each one is taken.
    public init(configuration: LockWatcherConfiguration = LockWatcherConfiguration(),
                onLock: @escaping @Sendable (LockReason) -> Void,
                log: @escaping @Sendable (String) -> Void,
                wantsSleepInhibitor: @escaping @Sendable () -> Bool = { true }) {
        self.configuration = configuration
        self.onLock = onLock
        self.log = log
        self.wantsSleepInhibitor = wantsSleepInhibitor
    }

    deinit { stop() }

    /// Connects both buses and returns once their matches are installed (AddMatch is synchronous,
    /// so events emitted after this returns are seen). An unreachable bus costs one log line.
    public func start() {
        lock.lock()
        defer { lock.unlock() }
        guard workers.isEmpty else { return }
        let system = BusWorker(address: configuration.systemBusAddress, system: true,
                               handler: LogindHandler(configuration: configuration, inhibitor: inhibitor,
                                                      resolved: resolved, wantsSleepInhibitor: wantsSleepInhibitor,
                                                      onLock: onLock, log: log),
                               onLock: onLock, log: log)
        let session = BusWorker(address: configuration.sessionBusAddress, system: false,
                                handler: ScreenSaverHandler(onLock: onLock, log: log), onLock: onLock, log: log)
        workers = [system, session]
        // Both connect in parallel; start() returns when both are ready.
        let group = DispatchGroup()
        for worker in workers {
            DispatchQueue.global().async(group: group) { worker.startAndWaitUntilReady() }
        }
        group.wait()
    }

    /// Stops both threads, closes the connections and drops the sleep inhibitor.
    public func stop() {
        let current: [BusWorker] = lock.withLock {
            let w = workers
            workers = []
            return w
        }
        for worker in current { worker.stop() }
        inhibitor.release()
    }

    /// Closes the delay-inhibitor fd so logind may suspend. Call after keys are evicted on
    /// `.prepareForSleep`. A new one is taken after PrepareForSleep(false), when logind
    /// (re)appears on the bus, or on `takeSleepInhibitor()`, each time only if
    /// `wantsSleepInhibitor()`.
    public func releaseSleepInhibitor() {
        if inhibitor.release() { log("released the sleep inhibitor") }
    }

    /// Asks the system-bus thread to take a sleep inhibitor if none is held, logind is there
    /// and `wantsSleepInhibitor()` (call when that becomes true: the vault was unlocked).
    /// Returns at once; the inhibitor is taken on that thread.
    public func takeSleepInhibitor() {
        let system = lock.withLock { workers.first { $0.busName == "system" } }
        system?.requestRearm()
    }

    /// The buses ("system", "session") that could not be reached at `start()` and are not
    /// watched. Empty when both are watched.
    public var unreachableBuses: [String] {
        lock.withLock { workers.filter { !$0.connectedAtStart }.map(\.busName) }
    }

    /// Whether a sleep inhibitor is currently held.
    public var holdsSleepInhibitor: Bool { inhibitor.isHeld }

    /// The logind session path being watched; nil when unresolved (then any session's Lock counts).
    public var resolvedSessionPath: String? { resolved.path }
}
