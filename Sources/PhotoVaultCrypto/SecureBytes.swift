import CSodium

/// A fixed-size secret held in libsodium's guarded, locked memory (`sodium_malloc`:
/// mlock'ed, guard pages, never swapped). Zeroed and freed by `wipe()` or on deinit.
/// Secrets of up to 4 KiB take a slot of a locked slab (`SecureSlots`) instead of a
/// `sodium_malloc` of their own: files are opened far too often for ten syscalls each.
///
/// Reading after `wipe()` is a programming error and traps: callers that may race a
/// lock must check `isWiped` under their own lock.
public final class SecureBytes: @unchecked Sendable {
    private var pointer: UnsafeMutableRawPointer?
    public let count: Int

    /// Zero-filled secret of `count` bytes.
    public init(count: Int) {
        Sodium.ensureInitialised()
        precondition(count > 0)
        if let slot = SecureSlots.allocate(count) {
            pointer = slot   // zero-filled
        } else {
            guard let p = sodium_malloc(count) else { fatalError("sodium_malloc failed (RLIMIT_MEMLOCK?)") }
            sodium_memzero(p, count)
            pointer = p
        }
        self.count = count
    }

    /// Random secret of `count` bytes.
    public convenience init(randomCount count: Int) {
        self.init(count: count)
        randombytes_buf(pointer!, count)
    }

    /// Copies `bytes` in. The caller should wipe its own copy.
    public convenience init(copying bytes: UnsafeRawBufferPointer) {
        self.init(count: bytes.count)
        pointer!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
    }

    public convenience init(copying bytes: [UInt8]) {
        self.init(count: bytes.count)
        bytes.withUnsafeBytes { pointer!.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
    }

    /// Moves `bytes` in and zeroes the source array.
    public convenience init(consuming bytes: inout [UInt8]) {
        self.init(copying: bytes)
        secureZero(&bytes)
    }

    public var isWiped: Bool { pointer == nil }

    /// Zeroes and frees the secret now. Idempotent.
    public func wipe() {
        if let p = pointer {
            if SecureSlots.sizeClass(count) != nil {
                SecureSlots.release(p, count: count)   // zeroes the whole slot
            } else {
                sodium_memzero(p, count)
                sodium_free(p)
            }
            pointer = nil
        }
    }

    deinit { wipe() }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        guard let p = pointer else { preconditionFailure("use of a wiped secret") }
        return try body(UnsafeRawBufferPointer(start: p, count: count))
    }

    public func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        guard let p = pointer else { preconditionFailure("use of a wiped secret") }
        return try body(UnsafeMutableRawBufferPointer(start: p, count: count))
    }

    /// Raw pointer for hot paths; valid until `wipe()`.
    public var unsafePointer: UnsafePointer<UInt8> {
        guard let p = pointer else { preconditionFailure("use of a wiped secret") }
        return UnsafePointer(p.assumingMemoryBound(to: UInt8.self))
    }

    public func copy() -> SecureBytes { withUnsafeBytes { SecureBytes(copying: $0) } }
}
