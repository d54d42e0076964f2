import Foundation

/// Watches the system bus (logind) and the session bus (screen savers) for lock events and
/// calls `onLock`, on the bus thread that saw the event. One thread per bus; sd-bus objects never
/// leave their thread. Events may repeat (KDE sends ActiveChanged twice, LockSessions locks every
/// session): the owner deduplicates. Unlock events are never reported.
public final class BusLockWatcher: @unchecked Sendable {
    private let configuration: LockWatcherConfiguration
    private let onLock: @Sendable (LockReason) -> Void
    private let log: @Sendable (String) -> Void
    private let inhibitor = SleepInhibitor()
    private let resolved = ResolvedPathBox()
    private let lock = NSLock()
    private var workers: [BusWorker] = []

    public init(configuration: LockWatcherConfiguration = LockWatcherConfiguration(),
                onLock: @escaping @Sendable (LockReason) -> Void,
                log: @escaping @Sendable (String) -> Void) {
        self.configuration = configuration
        self.onLock = onLock
        self.log = log
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
                                                      resolved: resolved, onLock: onLock, log: log),
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
    /// `.prepareForSleep`. A new one is taken after PrepareForSleep(false).
    public func releaseSleepInhibitor() {
        if inhibitor.release() { log("released the sleep inhibitor") }
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
