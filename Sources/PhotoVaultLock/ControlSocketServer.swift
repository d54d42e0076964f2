import Foundation
import Glibc

/// Unix stream socket for `photovault lock|unlock|status`. The socket is mode 0600 inside a
/// directory that must be ours with mode 0700 (created if missing), and every peer is checked
/// with SO_PEERCRED: a uid other than `allowedUID` gets an error reply and a log line.
/// Each connection is served on a thread of its own (at most `maxConnections` at once; past
/// that, accepting waits for one to end), with a 2 s deadline to read the request and another
/// 2 s, counted once the handler has returned, to send the reply. Served one at a time, a
/// client that connected and sent nothing (a hung `photovault status` in a panel script)
/// held off every `photovault lock` for 2 s, queued ones for 2 s each, past their timeout;
/// and a reply after a slow handler (`status` counting a large vault on a slow disk) was
/// never sent, the deadline having passed while the handler ran.
public final class ControlSocketServer: @unchecked Sendable {
    public let path: String
    public let allowedUID: uid_t
    private let handler: @Sendable (ControlRequest) -> ControlReply
    private let log: @Sendable (String) -> Void
    private let lock = NSLock()
    private var listenFD: Int32 = -1
    private var stopPipe: WakePipe?
    private let finished = DispatchSemaphore(value: 0)
    static let ioTimeoutMicroseconds: UInt64 = 2_000_000
    static let maxConnections = 8
    /// Connections being served; `stop()` waits for them.
    private let inFlight = DispatchGroup()

    public init(path: String, allowedUID: uid_t = geteuid(),
                handler: @escaping @Sendable (ControlRequest) -> ControlReply,
                log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.path = path
        self.allowedUID = allowedUID
        self.handler = handler
        self.log = log
    }

    deinit { stop() }

    public func start() throws {
        lock.lock()
        defer { lock.unlock() }
        guard listenFD < 0 else { return }
        try prepareDirectory()
        var addr = try UnixSocketIO.address(for: path)
        try removeStaleSocket()
        let fd = try UnixSocketIO.newSocket()
        let bound = UnixSocketIO.withSockaddr(&addr) { bind(fd, $0, $1) }
        guard bound == 0 else {
            let e = errno
            close(fd)
            if e == EADDRINUSE { throw LockError.socketInUse(path) }
            throw LockError.system(call: "bind(\(path))", errno: e)
        }
        // The 0700 directory already keeps others out; 0600 on the socket is the second fence.
        guard chmod(path, 0o600) == 0, listen(fd, 8) == 0 else {
            let e = errno
            close(fd)
            unlink(path)
            throw LockError.system(call: "listen(\(path))", errno: e)
        }
        listenFD = fd
        let stopper = WakePipe()
        stopPipe = stopper
        let t = Thread { [self] in
            defer { finished.signal() }
            acceptLoop(fd, stopper)
        }
        t.name = "photovault-control"
        t.start()
    }

    public func stop() {
        lock.lock()
        defer { lock.unlock() }
        guard listenFD >= 0, let stopper = stopPipe else { return }
        stopper.wake()
        finished.wait()
        // Each ends within its deadlines once its handler returns.
        inFlight.wait()
        close(listenFD)
        listenFD = -1
        stopPipe = nil
        unlink(path)
    }

    private func prepareDirectory() throws {
        let dir = (path as NSString).deletingLastPathComponent
        if mkdir(dir, 0o700) != 0 && errno != EEXIST {
            throw LockError.system(call: "mkdir(\(dir))", errno: errno)
        }
        var st = stat()
        guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == geteuid(),
              (st.st_mode & 0o077) == 0 else {
            throw LockError.insecureDirectory(dir)
        }
    }

    /// A socket file left by a crashed daemon is removed; a live one means we are a second daemon.
    private func removeStaleSocket() throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        guard (st.st_mode & S_IFMT) == S_IFSOCK else { throw LockError.socketInUse(path) }
        let probe = try UnixSocketIO.newSocket()
        defer { close(probe) }
        var addr = try UnixSocketIO.address(for: path)
        if UnixSocketIO.withSockaddr(&addr, { connect(probe, $0, $1) }) == 0 {
            throw LockError.socketInUse(path)
        }
        unlink(path)
    }

    private func acceptLoop(_ fd: Int32, _ stopper: WakePipe) {
        let slots = DispatchSemaphore(value: Self.maxConnections)
        while true {
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: stopper.readFD, events: Int16(POLLIN), revents: 0)]
            if poll(&fds, 2, -1) < 0 {
                if errno == EINTR { continue }
                log("control socket poll failed: \(errnoText(errno))")
                return
            }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            let client = accept(fd, nil, nil)
            if client < 0 { continue }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            slots.wait()
            inFlight.enter()
            let t = Thread { [self] in
                serve(client)
                close(client)
                slots.signal()
                inFlight.leave()
            }
            t.name = "photovault-control-client"
            t.start()
        }
    }

    private func serve(_ client: Int32) {
        let deadline = monotonicMicroseconds() + Self.ioTimeoutMicroseconds
        do {
            let uid = try UnixSocketIO.peerUID(client)
            guard uid == allowedUID else {
                log("control socket: refused a connection from uid \(uid) (only uid \(allowedUID) may connect)")
                try reply(.failure("permission denied"), to: client, deadline: deadline)
                discardInput(client)
                return
            }
            let body = try UnixSocketIO.readFrame(client, deadline: deadline)
            let decoded = Result { try ControlWire.decodeRequest(UnsafeRawBufferPointer(body)) }
            SecretBuffer.release(body)
            let request = try decoded.get()
            let answer = handler(request)
            request.payload.wipe()
            try reply(answer, to: client, deadline: monotonicMicroseconds() + Self.ioTimeoutMicroseconds)
        } catch {
            log("control socket: \(error)")
            try? reply(.failure("\(error)"), to: client, deadline: monotonicMicroseconds() + Self.ioTimeoutMicroseconds)
        }
    }

    /// Closing a unix socket with unread data resets the peer, which could hide our reply from
    /// it; so a refused client's request is read and dropped (briefly) before we close.
    private func discardInput(_ client: Int32) {
        shutdown(client, Int32(SHUT_WR))
        let deadline = monotonicMicroseconds() + 200_000
        var scratch = [UInt8](repeating: 0, count: 4096)
        var total = 0
        while total < ControlWire.maxBody + 4, (try? UnixSocketIO.wait(client, events: Int16(POLLIN), deadline: deadline)) != nil {
            let n = recv(client, &scratch, scratch.count, 0)
            if n <= 0 { break }
            total += n
        }
        explicit_bzero(&scratch, scratch.count)
    }

    private func reply(_ answer: ControlReply, to client: Int32, deadline: UInt64) throws {
        let frame = ControlWire.encode(answer)
        try frame.withUnsafeBytes { try UnixSocketIO.writeAll(client, $0, deadline: deadline) }
    }
}
