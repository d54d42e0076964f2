import CSystemd
import Foundation
import Glibc

/// A stand-in for systemd-logind on a private "system" bus, written with sd-bus on its own
/// thread: it owns org.freedesktop.login1 (so strict sender matches work), answers
/// GetSessionByPID / GetSession / Properties.Get(LockedHint) / Inhibit, notices when an
/// inhibitor fd is closed, and emits the logind signals on request.
final class FakeLogind: @unchecked Sendable {
    enum Signal {
        case lock, unlock
        /// Session.Lock for another session's object.
        case lockSession(String)
        case lockedHint(Bool)
        case prepareForSleep(Bool)
        case prepareForShutdown(Bool)
        case sessionRemoved(id: String, path: String)
    }

    let sessionPath: String
    let answerGetSessionByPID: Bool
    /// The bus name owned: logind's, or a screen saver's to stand for one (`screenSaver`).
    let name: String
    private let screenSaverActive: Bool
    private let address: String
    private let lock = NSLock()
    private var lockedHint: Bool
    private var pending: [Signal] = []
    private var calls: [String] = []
    private var released = 0
    private var lastEmit: DispatchTime?
    private var inhibitFDs: [Int32] = []          // read ends; EOF means the client let go
    private let wake = FakeWakePipe()
    private let ready = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private var startError: String?
    private var bus: OpaquePointer?                // fake thread only

    init(address: String, sessionPath: String, lockedHint: Bool = false, answerGetSessionByPID: Bool = true,
         name: String = "org.freedesktop.login1", screenSaverActive: Bool = false) {
        self.address = address
        self.name = name
        self.screenSaverActive = screenSaverActive
        self.sessionPath = sessionPath
        self.lockedHint = lockedHint
        self.answerGetSessionByPID = answerGetSessionByPID
    }

    func start() throws {
        let t = Thread { [self] in run() }
        t.start()
        ready.wait()
        if let startError { throw TestSetupError.fakeLogindFailed(startError) }
    }

    func stop() {
        lock.withLock { pending.removeAll() }
        wake.wake(quit: true)
        finished.wait()
        finished.signal()
    }

    /// Queues a signal; returns the time just before the fake thread sends it (for latency).
    func emit(_ signal: Signal) {
        lock.withLock { pending.append(signal) }
        wake.wake(quit: false)
    }

    var lastEmitTime: DispatchTime? { lock.withLock { lastEmit } }
    var methodCalls: [String] { lock.withLock { calls } }
    var inhibitorsReleased: Int { lock.withLock { released } }

    // MARK: - fake thread

    private func run() {
        defer { finished.signal() }
        var b: OpaquePointer?
        var r = sd_bus_new(&b)
        if r >= 0 { r = sd_bus_set_address(b, address) }
        if r >= 0 { r = sd_bus_set_bus_client(b, 1) }
        if r >= 0 { r = sd_bus_start(b) }
        if r >= 0 { r = sd_bus_add_filter(b, nil, fakeLogindFilter, Unmanaged.passUnretained(self).toOpaque()) }
        if r >= 0 { r = sd_bus_request_name(b, name, 0) }
        guard r >= 0, let bus = b else {
            startError = "sd-bus setup failed: \(String(cString: strerror(-r)))"
            if let b { sd_bus_unref(b) }
            ready.signal()
            return
        }
        self.bus = bus
        ready.signal()
        loop: while true {
            while sd_bus_process(bus, nil) > 0 {}
            sd_bus_flush(bus)
            let inhibit = lock.withLock { inhibitFDs }
            var fds = [pollfd(fd: sd_bus_get_fd(bus), events: Int16(truncatingIfNeeded: sd_bus_get_events(bus)), revents: 0),
                       pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)]
            fds += inhibit.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&fds, nfds_t(fds.count), 100)
            for p in fds.dropFirst(2) where p.revents != 0 {
                close(p.fd)
                lock.withLock {
                    inhibitFDs.removeAll { $0 == p.fd }
                    released += 1
                }
            }
            if fds[1].revents != 0 {
                if wake.drainSawQuit() { break loop }
            }
            let toSend: [Signal] = lock.withLock {
                let s = pending
                pending.removeAll()
                return s
            }
            for signal in toSend { send(signal, on: bus) }
        }
        for fd in lock.withLock({ inhibitFDs }) { close(fd) }
        sd_bus_flush_close_unref(bus)
        self.bus = nil
    }

    fileprivate func handleMethodCall(_ m: OpaquePointer) -> Int32 {
        let member = sd_bus_message_get_member(m).map { String(cString: $0) } ?? ""
        let manager = "org.freedesktop.login1.Manager"
        if sd_bus_message_is_method_call(m, name, "GetActive") > 0 {
            record("GetActive(\(String(cString: sd_bus_message_get_path(m))))")
            var reply: OpaquePointer?
            guard sd_bus_message_new_method_return(m, &reply) >= 0, let reply else { return -EIO }
            var value: Int32 = screenSaverActive ? 1 : 0
            _ = sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "b")), &value)
            _ = sd_bus_send(nil, reply, nil)
            sd_bus_message_unref(reply)
            return 1
        }
        if sd_bus_message_is_method_call(m, manager, "GetSessionByPID") > 0 {
            var pid: UInt32 = 0
            _ = sd_bus_message_read_basic(m, CChar(UInt8(ascii: "u")), &pid)
            record("GetSessionByPID(\(pid))")
            if answerGetSessionByPID { return replyObjectPath(m, sessionPath) }
            return replyError(m, "org.freedesktop.login1.NoSessionForPID", "PID \(pid) does not belong to any known session")
        }
        if sd_bus_message_is_method_call(m, manager, "GetSession") > 0 {
            var id: UnsafePointer<CChar>?
            _ = sd_bus_message_read_basic(m, CChar(UInt8(ascii: "s")), &id)
            record("GetSession(\(id.map { String(cString: $0) } ?? ""))")
            return replyObjectPath(m, sessionPath)
        }
        if sd_bus_message_is_method_call(m, manager, "Inhibit") > 0 {
            var parts: [String] = []
            for _ in 0..<4 {
                var s: UnsafePointer<CChar>?
                _ = sd_bus_message_read_basic(m, CChar(UInt8(ascii: "s")), &s)
                parts.append(s.map { String(cString: $0) } ?? "")
            }
            record("Inhibit(\(parts.joined(separator: ",")))")
            var p: [Int32] = [-1, -1]
            guard pipe(&p) == 0 else { return -errno }
            _ = fcntl(p[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(p[1], F_SETFD, FD_CLOEXEC)
            lock.withLock { inhibitFDs.append(p[0]) }
            var reply: OpaquePointer?
            guard sd_bus_message_new_method_return(m, &reply) >= 0, let reply else { return -EIO }
            var writeEnd = p[1]
            _ = sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "h")), &writeEnd)   // sd-bus dups it
            close(p[1])
            _ = sd_bus_send(nil, reply, nil)
            sd_bus_message_unref(reply)
            return 1
        }
        if sd_bus_message_is_method_call(m, "org.freedesktop.DBus.Properties", "Get") > 0,
           let path = sd_bus_message_get_path(m), String(cString: path) == sessionPath {
            record("Get(LockedHint)")
            var reply: OpaquePointer?
            guard sd_bus_message_new_method_return(m, &reply) >= 0, let reply else { return -EIO }
            var value: Int32 = lock.withLock { lockedHint } ? 1 : 0
            _ = sd_bus_message_open_container(reply, CChar(UInt8(ascii: "v")), "b")
            _ = sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "b")), &value)
            _ = sd_bus_message_close_container(reply)
            _ = sd_bus_send(nil, reply, nil)
            sd_bus_message_unref(reply)
            return 1
        }
        _ = member
        return 0
    }

    private func record(_ call: String) { lock.withLock { calls.append(call) } }

    private func replyObjectPath(_ call: OpaquePointer, _ path: String) -> Int32 {
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_return(call, &reply) >= 0, let reply else { return -EIO }
        _ = path.withCString { sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "o")), $0) }
        _ = sd_bus_send(nil, reply, nil)
        sd_bus_message_unref(reply)
        return 1
    }

    private func replyError(_ call: OpaquePointer, _ name: String, _ message: String) -> Int32 {
        var error = sd_bus_error()
        _ = sd_bus_error_set(&error, name, message)
        _ = sd_bus_reply_method_error(call, &error)
        sd_bus_error_free(&error)
        return 1
    }

    private func send(_ signal: Signal, on bus: OpaquePointer) {
        let manager = "/org/freedesktop/login1"
        let b = CChar(UInt8(ascii: "b"))
        var m: OpaquePointer?
        switch signal {
        case .lock, .unlock:
            var member = "Unlock"
            if case .lock = signal { member = "Lock" }
            sd_bus_message_new_signal(bus, &m, sessionPath, "org.freedesktop.login1.Session", member)
        case .lockSession(let path):
            sd_bus_message_new_signal(bus, &m, path, "org.freedesktop.login1.Session", "Lock")
        case .prepareForSleep(let on), .prepareForShutdown(let on):
            let member: String
            if case .prepareForSleep = signal { member = "PrepareForSleep" } else { member = "PrepareForShutdown" }
            sd_bus_message_new_signal(bus, &m, manager, "org.freedesktop.login1.Manager", member)
            var v: Int32 = on ? 1 : 0
            if let m { sd_bus_message_append_basic(m, b, &v) }
        case .sessionRemoved(let id, let path):
            sd_bus_message_new_signal(bus, &m, manager, "org.freedesktop.login1.Manager", "SessionRemoved")
            if let m {
                _ = id.withCString { sd_bus_message_append_basic(m, CChar(UInt8(ascii: "s")), $0) }
                _ = path.withCString { sd_bus_message_append_basic(m, CChar(UInt8(ascii: "o")), $0) }
            }
        case .lockedHint(let on):
            lock.withLock { lockedHint = on }
            // The wire format logind uses: PropertiesChanged(s, a{sv}, as) with the new value.
            sd_bus_message_new_signal(bus, &m, sessionPath, "org.freedesktop.DBus.Properties", "PropertiesChanged")
            if let m {
                var v: Int32 = on ? 1 : 0
                _ = "org.freedesktop.login1.Session".withCString { sd_bus_message_append_basic(m, CChar(UInt8(ascii: "s")), $0) }
                sd_bus_message_open_container(m, CChar(UInt8(ascii: "a")), "{sv}")
                sd_bus_message_open_container(m, CChar(UInt8(ascii: "e")), "sv")
                _ = "LockedHint".withCString { sd_bus_message_append_basic(m, CChar(UInt8(ascii: "s")), $0) }
                sd_bus_message_open_container(m, CChar(UInt8(ascii: "v")), "b")
                sd_bus_message_append_basic(m, b, &v)
                sd_bus_message_close_container(m)
                sd_bus_message_close_container(m)
                sd_bus_message_close_container(m)
                sd_bus_message_open_container(m, CChar(UInt8(ascii: "a")), "s")
                sd_bus_message_close_container(m)
            }
        }
        guard let m else { return }
        lock.withLock { lastEmit = .now() }
        sd_bus_send(bus, m, nil)
        sd_bus_message_unref(m)
        sd_bus_flush(bus)
    }
}

private let fakeLogindFilter: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    var type: UInt8 = 0
    guard sd_bus_message_get_type(message, &type) >= 0, type == UInt8(SD_BUS_MESSAGE_METHOD_CALL) else { return 0 }
    return Unmanaged<FakeLogind>.fromOpaque(userdata).takeUnretainedValue().handleMethodCall(message)
}

/// Self-pipe for the fake's thread: byte 1 = new signal queued, byte 2 = quit.
private final class FakeWakePipe {
    let readFD: Int32
    let writeFD: Int32
    init() {
        var p: [Int32] = [-1, -1]
        _ = pipe(&p)
        for fd in p { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        readFD = p[0]
        writeFD = p[1]
    }
    deinit { close(readFD); close(writeFD) }
    func wake(quit: Bool) {
        var byte: UInt8 = quit ? 2 : 1
        _ = write(writeFD, &byte, 1)
    }
    func drainSawQuit() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64)
        var quit = false
        while true {
            let n = read(readFD, &buffer, buffer.count)
            if n <= 0 { break }
            if buffer[0..<n].contains(2) { quit = true }
        }
        return quit
    }
}
