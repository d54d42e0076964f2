import Dispatch
import Foundation
import Synchronization

/// Fires `onIdle` once when `touch()` was not called for `timeout` seconds; re-arms on the next
/// touch. `touch()` runs on every FUSE request, so it is a single relaxed atomic store: no lock,
/// no syscall. A timer samples the flag a few times per timeout, so idleness is detected within
/// `timeout + tick` (tick = timeout/10, clamped to 50 ms ... 1 s).
public final class IdleTimer: @unchecked Sendable {
    public let timeout: Double
    private let onIdle: @Sendable () -> Void
    private let touched = Atomic<Bool>(false)
    private let queue = DispatchQueue(label: "photovault.idle")
    private let lock = NSLock()
    private var timer: DispatchSourceTimer?
    // Touched only on `queue`.
    private var lastActivity = DispatchTime.now()
    private var fired = false

    public init(timeout: Double, onIdle: @escaping @Sendable () -> Void) {
        self.timeout = timeout
        self.onIdle = onIdle
    }

    deinit { timer?.cancel() }

    /// Records activity. Cheap enough for the FUSE hot path.
    @inline(__always)
    public func touch() {
        touched.store(true, ordering: .relaxed)
    }

    public func start() {
        lock.lock()
        defer { lock.unlock() }
        guard timer == nil, timeout > 0 else { return }
        let tick = min(max(timeout / 10, 0.05), 1.0)
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + tick, repeating: tick, leeway: .milliseconds(Int(tick * 250)))
        queue.sync {
            lastActivity = .now()
            fired = false
        }
        source.setEventHandler { [weak self] in self?.sample() }
        source.resume()
        timer = source
    }

    public func stop() {
        lock.lock()
        defer { lock.unlock() }
        timer?.cancel()
        timer = nil
    }

    private func sample() {
        let now = DispatchTime.now()
        if touched.exchange(false, ordering: .relaxed) {
            lastActivity = now
            fired = false
            return
        }
        let idle = Double(now.uptimeNanoseconds - lastActivity.uptimeNanoseconds) / 1e9
        if !fired && idle >= timeout {
            fired = true
            onIdle()
        }
    }
}
