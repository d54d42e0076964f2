import Glibc

/// Secret-capable request payload (e.g. the password of `photovault unlock`). The bytes live in
/// one heap allocation that is zeroed by `wipe()` and again on deinit; the control server wipes
/// it as soon as the handler returns, so a handler must copy what it keeps (into SecureBytes).
public final class ControlPayload: @unchecked Sendable {
    private var storage: UnsafeMutableRawBufferPointer

    public init() {
        storage = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    }

    /// Copies `bytes`; the caller remains responsible for wiping its own copy.
    public init(copying bytes: UnsafeRawBufferPointer) {
        storage = SecretBuffer.allocate(bytes.count)
        if bytes.count > 0 { storage.copyMemory(from: bytes) }
    }

    deinit {
        if storage.baseAddress != nil { SecretBuffer.release(storage) }
    }

    public var count: Int { storage.count }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(storage))
    }

    /// Zeroes the bytes with explicit_bzero, which the compiler may not elide.
    public func wipe() {
        if let base = storage.baseAddress { explicit_bzero(base, storage.count) }
    }

    /// True when every byte is zero (after `wipe()`), or the payload is empty.
    public var isZeroed: Bool { storage.allSatisfy { $0 == 0 } }
}

/// A command word ("lock", "unlock", "status", ...) plus an optional binary payload.
public struct ControlRequest: Sendable {
    public let command: String
    public let payload: ControlPayload

    public init(command: String, payload: ControlPayload = ControlPayload()) {
        self.command = command
        self.payload = payload
    }
}

/// Success flag plus a human-readable message (shown by the CLI), and for a failure the exit
/// status the CLI gives it: 1 unless the daemon knows a more telling one (30 when the keys of
/// an unlock found no locked memory).
public struct ControlReply: Sendable, Equatable {
    public var ok: Bool
    public var message: String
    /// 0 for success; from 1 to 255 for a failure.
    public var status: UInt8

    public init(ok: Bool, message: String, status: UInt8 = 1) {
        self.ok = ok
        self.message = message
        self.status = ok ? 0 : max(status, 1)
    }

    public static func success(_ message: String = "ok") -> ControlReply { ControlReply(ok: true, message: message) }
    public static func failure(_ message: String, status: UInt8 = 1) -> ControlReply {
        ControlReply(ok: false, message: message, status: status)
    }
}

/// Wire format, both directions: a 4-byte big-endian body length, then the body.
///   request body: u8 command length, command (UTF-8), payload bytes
///   reply body:   u8 status (0 = ok, else an error: its exit status, 1 unless the daemon
///                 knows a better one), message (UTF-8)
/// Bodies are capped so a client cannot make the daemon allocate much.
enum ControlWire {
    static let maxBody = 64 * 1024

    /// Builds a request frame into a fresh allocation the caller must `SecretBuffer.release`.
    static func encode(_ request: ControlRequest) throws -> UnsafeMutableRawBufferPointer {
        let command = Array(request.command.utf8)
        guard !command.isEmpty, command.count <= 255 else { throw LockError.protocolError("bad command word") }
        let body = 1 + command.count + request.payload.count
        guard body <= maxBody else { throw LockError.protocolError("request too large") }
        let frame = SecretBuffer.allocate(4 + body)
        frame.storeBytes(of: UInt32(body).bigEndian, toByteOffset: 0, as: UInt32.self)
        frame[4] = UInt8(command.count)
        frame.baseAddress!.advanced(by: 5).copyMemory(from: command, byteCount: command.count)
        request.payload.withUnsafeBytes { payload in
            if payload.count > 0 {
                frame.baseAddress!.advanced(by: 5 + command.count).copyMemory(from: payload.baseAddress!, byteCount: payload.count)
            }
        }
        return frame
    }

    /// Parses a request body; the payload is copied, the caller wipes `body`.
    static func decodeRequest(_ body: UnsafeRawBufferPointer) throws -> ControlRequest {
        guard body.count >= 1 else { throw LockError.protocolError("empty request") }
        let length = Int(body[0])
        guard length > 0, body.count >= 1 + length,
              let command = String(validating: body[1..<(1 + length)], as: UTF8.self) else {
            throw LockError.protocolError("bad command word")
        }
        let payload = ControlPayload(copying: UnsafeRawBufferPointer(rebasing: body[(1 + length)...]))
        return ControlRequest(command: command, payload: payload)
    }

    static func encode(_ reply: ControlReply) -> [UInt8] {
        let message = Array(reply.message.utf8.prefix(maxBody - 1))
        var frame = withUnsafeBytes(of: UInt32(1 + message.count).bigEndian) { Array($0) }
        frame.append(reply.status)
        frame.append(contentsOf: message)
        return frame
    }

    static func decodeReply(_ body: UnsafeRawBufferPointer) throws -> ControlReply {
        guard body.count >= 1 else { throw LockError.protocolError("bad reply") }
        return ControlReply(ok: body[0] == 0, message: String(decoding: body[1...], as: UTF8.self), status: body[0])
    }
}
