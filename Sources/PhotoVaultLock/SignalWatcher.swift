import Foundation
import Glibc

/// Turns SIGUSR1 into `.userSignal` and SIGTERM/SIGINT/SIGHUP/SIGQUIT, and the other signals
/// whose default is to end the process without a core (SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
/// SIGPWR, SIGIO, SIGSTKFLT), into `.terminate(sig)`. (SIGQUIT, Ctrl-\ in a foreground mount,
/// and a stray `kill -USR2` or `kill -PWR` used to kill the daemon and leave a dead mount.)
///
/// We install a sigaction handler that writes the signal number into a self-pipe, and a thread
/// reads the pipe. Unlike signalfd (or DispatchSource signal sources), this does not depend on
/// the signal being blocked in every thread of the process, which cannot be guaranteed once
/// libraries have started their own threads. Only one SignalWatcher may be active at a time.
public final class SignalWatcher: @unchecked Sendable {
    public static let watchedSignals: [Int32] = [SIGUSR1, SIGTERM, SIGINT, SIGHUP, SIGQUIT,
                                                  SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGPWR, SIGIO, SIGSTKFLT]

    private let handler: @Sendable (LockReason) -> Void
    private let lock = NSLock()
    private var pipe: WakePipe?
    private var stopPipe: WakePipe?
    private var previous: [Int32: sigaction] = [:]
    private let finished = DispatchSemaphore(value: 0)
    private let settled = DispatchSemaphore(value: 0)

    public init(handler: @escaping @Sendable (LockReason) -> Void) {
        self.handler = handler
    }

    deinit { stop() }

    public func start() {
        lock.lock()
        defer { lock.unlock() }
        guard pipe == nil else { return }
        let signals = WakePipe()
        let stopper = WakePipe()
        pipe = signals
        stopPipe = stopper
        signalPipeWriteFD = signals.writeFD
        for sig in Self.watchedSignals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = forwardSignalToPipe
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            var old = sigaction()
            sigaction(sig, &action, &old)
            previous[sig] = old
        }
        let t = Thread { [handler, finished, settled] in
            defer { finished.signal() }
            while true {
                var fds = [pollfd(fd: signals.readFD, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: stopper.readFD, events: Int16(POLLIN), revents: 0)]
                if poll(&fds, 2, -1) < 0 && errno != EINTR { return }
                for sig in signals.drain() {
                    if sig == 0 { settled.signal(); continue }   // settle()'s marker
                    handler(Int32(sig) == SIGUSR1 ? .userSignal : .terminate(Int32(sig)))
                }
                if fds[1].revents != 0 { return }
            }
        }
        t.name = "photovault-signals"
        t.start()
    }

    /// Returns once every signal that came before the call (to this thread, or handled by
    /// now) has been handed to the handler: a marker byte 0, which no signal has, follows them
    /// through the pipe. Waits at most `timeout` seconds.
    public func settle(timeout: Double = 2) {
        lock.lock()
        let signals = pipe
        lock.unlock()
        guard let signals else { return }
        signals.wake(0)
        _ = settled.wait(timeout: .now() + timeout)
    }

    /// Restores the previous dispositions and stops the reader thread.
    public func stop() {
        lock.lock()
        defer { lock.unlock() }
        guard let stopper = stopPipe else { return }
        for (sig, var old) in previous { sigaction(sig, &old, nil) }
        previous = [:]
        signalPipeWriteFD = -1
        stopper.wake()
        finished.wait()
        pipe = nil
        stopPipe = nil
    }
}

/// Written before handlers are installed; read in the handler. A constant-initialised global,
/// so the handler does not run a lazy initialiser.
nonisolated(unsafe) private var signalPipeWriteFD: Int32 = -1

/// Async-signal-safe: one write(2) of the signal number, errno preserved.
private let forwardSignalToPipe: @convention(c) (Int32) -> Void = { sig in
    let saved = errno
    var byte = UInt8(truncatingIfNeeded: sig)
    _ = write(signalPipeWriteFD, &byte, 1)
    errno = saved
}
