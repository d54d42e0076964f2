import Glibc

/// The client side of the control socket (used by `photovault lock|unlock|status`).
public enum ControlClient {
    /// Sends one request and waits for the reply. The request frame, which may hold a password,
    /// is zeroed before this returns. Throws `LockError.system(call: "connect…", errno:)` with
    /// ENOENT / ECONNREFUSED when no daemon listens, and `.untrustedPeer` (before a byte is
    /// sent) when the process listening is not this user's: a socket planted by another user
    /// must neither receive an unlock key nor fake a "locked" reply.
    public static func send(path: String, request: ControlRequest, timeout: Double) throws -> ControlReply {
        let deadline = monotonicMicroseconds() + UInt64(max(timeout, 0.001) * 1_000_000)
        let fd = try UnixSocketIO.newSocket()
        defer { close(fd) }
        var addr = try UnixSocketIO.address(for: path)
        guard UnixSocketIO.withSockaddr(&addr, { connect(fd, $0, $1) }) == 0 else {
            throw LockError.system(call: "connect(\(path))", errno: errno)
        }
        let peer = try UnixSocketIO.peerUID(fd)
        guard peer == geteuid() else { throw LockError.untrustedPeer(path: path, uid: peer) }
        let frame = try ControlWire.encode(request)
        defer { SecretBuffer.release(frame) }
        do {
            try UnixSocketIO.writeAll(fd, UnsafeRawBufferPointer(frame), deadline: deadline)
        } catch LockError.system(_, let e) where e == EPIPE || e == ECONNRESET {
            // The server may refuse (wrong uid) before reading: its reply is still readable.
        }
        let body = try UnixSocketIO.readFrame(fd, deadline: deadline)
        defer { SecretBuffer.release(body) }
        return try ControlWire.decodeReply(UnsafeRawBufferPointer(body))
    }
}
