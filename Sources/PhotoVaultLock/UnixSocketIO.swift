import Glibc

/// Blocking-with-deadline helpers for the control socket (both ends).
enum UnixSocketIO {
    static func address(for path: String) throws -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else { throw LockError.pathTooLong(path) }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return addr
    }

    static func newSocket() throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LockError.system(call: "socket", errno: errno) }
        return fd
    }

    static func withSockaddr<R>(_ addr: inout sockaddr_un, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Waits until `fd` is ready for `events` or the deadline (monotonic µs) passes.
    static func wait(_ fd: Int32, events: Int16, deadline: UInt64) throws {
        while true {
            let now = monotonicMicroseconds()
            guard now < deadline else { throw LockError.timedOut }
            var p = pollfd(fd: fd, events: events, revents: 0)
            let r = poll(&p, 1, Int32(min((deadline - now + 999) / 1000, 60_000)))
            if r > 0 { return }
            if r < 0 && errno != EINTR { throw LockError.system(call: "poll", errno: errno) }
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, deadline: UInt64) throws {
        var offset = 0
        while offset < bytes.count {
            try wait(fd, events: Int16(POLLOUT), deadline: deadline)
            let n = send(fd, bytes.baseAddress!.advanced(by: offset), bytes.count - offset, Int32(MSG_NOSIGNAL))
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw LockError.system(call: "send", errno: errno)
            }
            offset += n
        }
    }

    static func readExactly(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, deadline: UInt64) throws {
        var offset = 0
        while offset < buffer.count {
            try wait(fd, events: Int16(POLLIN), deadline: deadline)
            let n = recv(fd, buffer.baseAddress!.advanced(by: offset), buffer.count - offset, 0)
            if n == 0 { throw LockError.peerClosed }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw LockError.system(call: "recv", errno: errno)
            }
            offset += n
        }
    }

    /// Reads one length-prefixed frame body into a fresh allocation (caller `SecretBuffer.release`s it).
    static func readFrame(_ fd: Int32, deadline: UInt64) throws -> UnsafeMutableRawBufferPointer {
        var lengthBE: UInt32 = 0
        try withUnsafeMutableBytes(of: &lengthBE) { try readExactly(fd, into: $0, deadline: deadline) }
        let length = Int(UInt32(bigEndian: lengthBE))
        guard length >= 1, length <= ControlWire.maxBody else { throw LockError.protocolError("bad frame length \(length)") }
        let body = SecretBuffer.allocate(length)
        do {
            try readExactly(fd, into: body, deadline: deadline)
        } catch {
            SecretBuffer.release(body)
            throw error
        }
        return body
    }

    /// The peer's uid from SO_PEERCRED (struct ucred is pid, uid, gid; Swift's Glibc lacks it).
    static func peerUID(_ fd: Int32) throws -> uid_t {
        var cred: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: cred))
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) == 0 else {
            throw LockError.system(call: "getsockopt(SO_PEERCRED)", errno: errno)
        }
        return cred.1
    }
}
