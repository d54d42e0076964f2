import Dispatch
import Foundation
import Glibc
import Synchronization

/// Fires `onIdle` once when `touch()` was not called for `timeout` seconds; re-arms on the next
/// touch. `touch()` runs on every FUSE request, so it is a single relaxed atomic store: no lock,
/// no syscall. A timer samples the flag a few times per timeout, so idleness is detected within
/// `timeout + tick` (tick = timeout/10, clamped to 50 ms ... 1 s).
///
/// Idle time is measured on CLOCK_BOOTTIME, which keeps counting while the machine is
/// suspended: a laptop closed after 9 of `--idle 10m` and opened hours later is locked at the
/// first tick after the resume. (On CLOCK_MONOTONIC, which DispatchTime uses and which stops
/// during suspend, it stayed unlocked for the remaining minute; without D-Bus, where no
/// PrepareForSleep locks the vault, `--idle` is the only lock a suspend meets.)
public final class IdleTimer: @unchecked Sendable {
    public let timeout: Double
    private let onIdle: @Sendable () -> Void
    private let clock: @Sendable () -> UInt64
    private let touched = Atomic<Bool>(false)
    private let queue = DispatchQueue(label: "photovault.idle")
    private let lock = NSLock()
    private var timer: DispatchSourceTimer?
    // Touched only on `queue`.
    private var lastActivity: UInt64 = 0
    private var fired = false

    /// `clock` returns nanoseconds; the default is CLOCK_BOOTTIME (tests pass their own to
    /// stand for a suspend).
    public init(timeout: Double, clock: @escaping @Sendable () -> UInt64 = IdleTimer.bootTimeNanoseconds,
                onIdle: @escaping @Sendable () -> Void) {
        self.timeout = timeout
        self.clock = clock
        self.onIdle = onIdle
    }

    /// CLOCK_BOOTTIME in nanoseconds: monotonic, and counting time spent suspended.
    @Sendable
    public static func bootTimeNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
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
            lastActivity = clock()
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
        let now = clock()
        if touched.exchange(false, ordering: .relaxed) {
            lastActivity = now
            fired = false
            return
        }
        let idle = Double(now > lastActivity ? now - lastActivity : 0) / 1e9
        if !fired && idle >= timeout {
            fired = true
            onIdle()
        }
    }
}
