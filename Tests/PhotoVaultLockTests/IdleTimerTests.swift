import Foundation
import PhotoVaultLock
import XCTest

final class IdleTimerTests: XCTestCase {
    private final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var n = 0
        private var at: [Date] = []
        func hit() { lock.withLock { n += 1; at.append(Date()) } }
        var count: Int { lock.withLock { n } }
        var first: Date? { lock.withLock { at.first } }
    }

    func testFiresOnceAfterTimeoutWithoutTouch() {
        let counter = Counter()
        let timer = IdleTimer(timeout: 0.3, onIdle: { counter.hit() })
        let t0 = Date()
        timer.start()
        defer { timer.stop() }
        XCTAssertTrue(waitUntil { counter.count == 1 })
        let elapsed = counter.first!.timeIntervalSince(t0)
        print("idle fired after \(String(format: "%.3f", elapsed)) s (timeout 0.3 s)")
        XCTAssertGreaterThanOrEqual(elapsed, 0.3)
        // Stays idle: it does not fire again until touched.
        usleep(500_000)
        XCTAssertEqual(counter.count, 1)
    }

    func testDoesNotFireWhileTouchedAndRearmsAfterTouch() {
        let counter = Counter()
        let timer = IdleTimer(timeout: 0.4, onIdle: { counter.hit() })
        timer.start()
        defer { timer.stop() }
        let busyUntil = Date().addingTimeInterval(1.2)   // three timeouts of steady activity
        while Date() < busyUntil {
            timer.touch()
            usleep(20_000)
        }
        XCTAssertEqual(counter.count, 0, "fired while touched")
        XCTAssertTrue(waitUntil { counter.count == 1 }, "did not fire after activity stopped")
        timer.touch()
        XCTAssertTrue(waitUntil { counter.count == 2 }, "did not re-arm after a touch")
    }

    func testStopPreventsFiring() {
        let counter = Counter()
        let timer = IdleTimer(timeout: 0.2, onIdle: { counter.hit() })
        timer.start()
        timer.stop()
        usleep(600_000)
        XCTAssertEqual(counter.count, 0)
    }

    func testTouchIsCheap() {
        let counter = Counter()
        let timer = IdleTimer(timeout: 60, onIdle: { counter.hit() })
        timer.start()
        defer { timer.stop() }
        let n = 1_000_000
        let t0 = DispatchTime.now()
        for _ in 0..<n { timer.touch() }
        let ns = Double(DispatchTime.now().uptimeNanoseconds - t0.uptimeNanoseconds) / Double(n)
        print("IdleTimer.touch(): \(String(format: "%.1f", ns)) ns per call (debug build)")
        // A relaxed atomic store; a lock or syscall per call would be far slower than this bound.
        XCTAssertLessThan(ns, 1_000)
        XCTAssertEqual(counter.count, 0)
    }

    /// Stands for the clock the timer reads; `suspend(for:)` moves it on without any real time
    /// passing, as CLOCK_BOOTTIME moves on across a suspend while CLOCK_MONOTONIC (and every
    /// dispatch timer) stands still.
    private final class SuspendableClock: @unchecked Sendable {
        private let lock = NSLock()
        private var slept: UInt64 = 0
        func suspend(for seconds: Double) { lock.withLock { slept += UInt64(seconds * 1e9) } }
        func now() -> UInt64 {
            var ts = timespec()
            clock_gettime(CLOCK_MONOTONIC, &ts)
            return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec) + lock.withLock { slept }
        }
    }

    /// Time asleep is idle time: a mount idle for a moment before a 10-minute suspend, with
    /// --idle 60s, locks at the first tick after the resume, not 60 s of use-free uptime later.
    func testTimeSpentSuspendedCountsAsIdle() {
        let counter = Counter()
        let clock = SuspendableClock()
        let timer = IdleTimer(timeout: 60, clock: { clock.now() }, onIdle: { counter.hit() })
        timer.start()
        defer { timer.stop() }
        timer.touch()
        usleep(1_200_000)   // one tick (1 s for a 60 s timeout) takes the touch
        XCTAssertEqual(counter.count, 0)
        clock.suspend(for: 600)
        XCTAssertTrue(waitUntil(timeout: 2.5) { counter.count == 1 }, "10 minutes asleep did not count as idle")
        // Activity after the resume re-arms it as usual.
        timer.touch()
        usleep(1_200_000)
        XCTAssertEqual(counter.count, 1)
        clock.suspend(for: 30)
        usleep(1_200_000)
        XCTAssertEqual(counter.count, 1, "fired after 30 s asleep with a 60 s timeout")
    }
}
