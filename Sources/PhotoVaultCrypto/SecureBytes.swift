import CSodium

/// A fixed-size secret held in libsodium's guarded, locked memory (`sodium_malloc`:
/// mlock'ed, checked to be locked, guard pages, never swapped). Zeroed and freed by `wipe()` or on deinit.
/// Secrets of up to 4 KiB take a slot of a locked slab (`SecureSlots`) instead of a
/// `sodium_malloc` of their own: files are opened far too often for ten syscalls each.
///
/// Reading after `wipe()` is a programming error and traps: callers that may race a
/// lock must check `isWiped` under their own lock.
public final class SecureBytes: @unchecked Sendable {
    private var pointer: UnsafeMutableRawPointer?
    public let count: Int

    private init(taking p: UnsafeMutableRawPointer, count: Int) {
        pointer = p
        self.count = count
    }

    /// Zero-filled locked memory for `count` bytes: a slot, or a `sodium_malloc` of its own.
    private static func lockedZeroed(_ count: Int) throws -> UnsafeMutableRawPointer {
        Sodium.ensureInitialised()
        precondition(count > 0)
        if let slot = try SecureSlots.allocate(count) { return slot }   // zero-filled
        let p = try SecureSlots.lockedAllocation(count)
        sodium_memzero(p, count)
        return p
    }

    /// Zero-filled secret of `count` bytes, or `CryptoError.memoryNotLocked` when no memory
    /// locked in RAM can be had for it (RLIMIT_MEMLOCK). Paths that open files use this one,
    /// so that the file fails to open rather than the process.
    public convenience init(lockedCount count: Int) throws {
        self.init(taking: try SecureBytes.lockedZeroed(count), count: count)
    }

    /// Zero-filled secret of `count` bytes. When it cannot be locked in RAM, calls
    /// `lockFailureHandler` (a trap by default): for keys taken before any file is opened,
    /// which fails only under a limit below one slab (the mount daemon checks it first,
    /// `reserveLockedMemory`).
    public convenience init(count: Int) {
        let p: UnsafeMutableRawPointer
        do { p = try SecureBytes.lockedZeroed(count) } catch {
            if let handler = SecureBytes.lockFailureHandler { handler() }
            fatalError("\(error)")
        }
        self.init(taking: p, count: count)
    }

    /// Ends the process when `init(count:)` finds no locked memory. The photovault command
    /// sets it (at start, before any thread) to say so in one line and exit with its code.
    nonisolated(unsafe) public static var lockFailureHandler: (() -> Never)?

    /// Random secret of `count` bytes.
    public convenience init(randomCount count: Int) {
        self.init(count: count)
        randombytes_buf(pointer!, count)
    }

    /// Random secret of `count` bytes; throws as `init(lockedCount:)`.
    public convenience init(lockedRandomCount count: Int) throws {
        try self.init(lockedCount: count)
        randombytes_buf(pointer!, count)
    }

    /// Locks the memory a process that opens files needs at the least (a slab for every
    /// slot size) now: throws `CryptoError.memoryNotLocked` when the locked-memory limit
    /// does not allow it. The mount daemon calls it before it takes any key.
    public static func reserveLockedMemory() throws {
        Sodium.ensureInitialised()
        try SecureSlots.reserveOneSlabPerClass()
    }

    /// Copies `bytes` in. The caller should wipe its own copy.
    public convenience init(copying bytes: UnsafeRawBufferPointer) {
        self.init(count: bytes.count)
        pointer!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
    }

    /// Copies `bytes` in; throws as `init(lockedCount:)`. The caller should wipe its own copy.
    public convenience init(lockedCopying bytes: UnsafeRawBufferPointer) throws {
        try self.init(lockedCount: bytes.count)
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
