import CSystemd
import Foundation
import Glibc

/// What a bus thread does with its connection: install matches (and make initial calls), then
/// react to matched signals. Both run on the worker's thread only.
protocol BusSignalHandler: AnyObject {
    /// "system" or "session", used in log lines and in `LockReason.busLost`.
    var busName: String { get }
    func install(on bus: SDBus, callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer) throws
    func handle(_ message: BusMessage, on bus: SDBus)
    /// The connection dropped (before a reconnect, which calls `install` again).
    func connectionLost()
    /// The owner asked for `BusWorker.requestRearm()`: take again what a lock gave up.
    func rearm(on bus: SDBus)
}

extension BusSignalHandler {
    func connectionLost() {}
    func rearm(on bus: SDBus) {}
}

/// One thread owning one sd-bus connection: connect, install, then process/poll until stopped.
/// A bus unreachable at start is not watched (one log line). A connection that drops later
/// is reported (`LockReason.busLost`: the vault locks) and then reconnected, retrying after 1,
/// 2, 4 … 30 s, so that a mount kept with `--on-lock stay` and unlocked again still sees the
/// next screen lock. A self-pipe wakes the poll and the retry wait for shutdown.
final class BusWorker: @unchecked Sendable {
    private let address: String?
    private let system: Bool
    private let handler: BusSignalHandler
    private let onLock: @Sendable (LockReason) -> Void
    private let log: @Sendable (String) -> Void
    private let wake = WakePipe()
    /// Wakes the poll for `handler.rearm` (a separate pipe: a byte on `wake` means stop).
    private let rearmRequest = WakePipe()
    private let ready = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    /// Touched only on the worker thread.
    private var bus: SDBus?
    /// Whether the first connection succeeded (read after `startAndWaitUntilReady`).
    private(set) var connectedAtStart = false
    private var thread: pthread_t?
    private let threadLock = NSLock()

    init(address: String?, system: Bool, handler: BusSignalHandler,
         onLock: @escaping @Sendable (LockReason) -> Void, log: @escaping @Sendable (String) -> Void) {
        self.address = address
        self.system = system
        self.handler = handler
        self.onLock = onLock
        self.log = log
    }

    /// "system" or "session".
    var busName: String { handler.busName }

    /// Starts the thread and returns once matches are installed or the bus proved unreachable.
    func startAndWaitUntilReady() {
        let t = Thread { [self] in
            threadLock.withLock { thread = pthread_self() }
            run()
        }
        t.name = "photovault-\(handler.busName)-bus"
        t.start()
        ready.wait()
    }

    /// Wakes the thread and waits for it to close the bus. Safe to call from a lock callback
    /// (which runs on this thread): then it only requests the stop.
    func stop() {
        wake.wake()
        let onOwnThread = threadLock.withLock { thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
        if !onOwnThread { finished.wait(); finished.signal() }
    }

    /// Has the thread call `handler.rearm` with its connection (at once, or once reconnected).
    func requestRearm() {
        rearmRequest.wake()
    }

    fileprivate func dispatch(_ raw: OpaquePointer) {
        guard let bus else { return }
        handler.handle(BusMessage(borrowing: raw), on: bus)
    }

    private func run() {
        defer { finished.signal() }
        do {
            try connect()
        } catch {
            // A missing bus is expected (no desktop, no system bus in a container): one line.
            log("\(handler.busName) bus unavailable, not watching it: \(error)")
            ready.signal()
            return
        }
        connectedAtStart = true
        ready.signal()
        while loop() == .lost {
            bus = nil   // closes the connection on this thread
            handler.connectionLost()
            guard reconnect() else { return }
        }
        bus = nil
    }

    private func connect() throws {
        let connection = try SDBus(address: address, system: system)
        try handler.install(on: connection, callback: busSignalTrampoline,
                            userdata: Unmanaged.passUnretained(self).toOpaque())
        bus = connection
    }

    /// Retries with a growing delay until connected (true) or stopped (false).
    private func reconnect() -> Bool {
        var delay: Int32 = 1000
        while true {
            var fd = pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)
            if poll(&fd, 1, delay) > 0 { return false }
            if (try? connect()) != nil {
                log("reconnected to the \(handler.busName) bus")
                return true
            }
            delay = min(delay * 2, 30_000)
        }
    }

    private enum LoopEnd { case stopped, lost }

    private func loop() -> LoopEnd {
        guard let bus else { return .stopped }
        while true {
            var r: Int32
            repeat { r = sd_bus_process(bus.raw, nil) } while r > 0
            if r < 0 {
                let what = "\(handler.busName) bus: \(errnoText(-r))"
                log("lost the \(what); reconnecting")
                onLock(.busLost(what))
                return .lost
            }
            var fds = [pollfd(fd: sd_bus_get_fd(bus.raw), events: Int16(truncatingIfNeeded: sd_bus_get_events(bus.raw)), revents: 0),
                       pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: rearmRequest.readFD, events: Int16(POLLIN), revents: 0)]
            let p = poll(&fds, 3, pollTimeout(bus))
            if fds[1].revents != 0 { return .stopped }
            if fds[2].revents != 0 {
                _ = rearmRequest.drain()
                handler.rearm(on: bus)
            }
            if p < 0 && errno != EINTR {
                let what = "\(handler.busName) bus: poll failed: \(errnoText(errno))"
                log("lost the \(what); reconnecting")
                onLock(.busLost(what))
                return .lost
            }
        }
    }

    /// sd_bus_get_timeout is an absolute CLOCK_MONOTONIC deadline in µs; UInt64.max means none.
    private func pollTimeout(_ bus: SDBus) -> Int32 {
        var deadline: UInt64 = 0
        guard sd_bus_get_timeout(bus.raw, &deadline) >= 0, deadline != UInt64.max else { return -1 }
        let now = monotonicMicroseconds()
        if deadline <= now { return 0 }
        return Int32(min((deadline - now + 999) / 1000, 60_000))
    }
}

/// The single C callback for every match; userdata is the (unretained) worker, which outlives
/// its connection because the connection is closed on the worker thread before it exits.
private let busSignalTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    Unmanaged<BusWorker>.fromOpaque(userdata).takeUnretainedValue().dispatch(message)
    return 0
}
