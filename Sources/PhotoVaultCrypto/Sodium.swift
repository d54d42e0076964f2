import CSodium

/// Initialises libsodium exactly once. Every entry point of this module calls it,
/// so library users (and tests, which never run `main.swift`) need not.
public enum Sodium {
    private static let initialised: Bool = {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        return true
    }()

    @inline(__always) public static func ensureInitialised() { _ = initialised }

    /// Marks the process not dumpable (no core dumps, no ptrace by other users,
    /// /proc/PID/mem closed to them). Call before any key is loaded.
    @discardableResult
    public static func makeProcessNotDumpable() -> Bool { pv_set_not_dumpable() == 0 }

    public static var processIsDumpable: Bool { pv_is_dumpable() != 0 }

    /// Locks all of the process's memory against swapping, now and for every later mapping,
    /// each page as it is first touched. For the mount daemon: plaintext passes through
    /// buffers that are not `sodium_malloc`'d (libfuse's request buffers, read replies,
    /// decrypted names), and none of it may reach a swap device. Returns 0 or the errno
    /// (ENOMEM or EPERM when RLIMIT_MEMLOCK is below the process's size and it lacks
    /// CAP_IPC_LOCK, as for most unprivileged users).
    public static func lockAllMemory() -> Int32 { pv_lock_all_memory() }
}

/// Cryptographically secure random bytes.
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        Sodium.ensureInitialised()
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return out
    }

    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        Sodium.ensureInitialised()
        if buffer.count > 0 { randombytes_buf(buffer.baseAddress!, buffer.count) }
    }
}

/// Constant-time comparison.
public func constantTimeEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    guard a.count == b.count else { return false }
    if a.count == 0 { return true }
    return sodium_memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
}

public func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in constantTimeEqual(pa, pb) } }
}

/// Zeroes a buffer in a way the optimiser cannot remove.
public func secureZero(_ buffer: UnsafeMutableRawBufferPointer) {
    if buffer.count > 0 { sodium_memzero(buffer.baseAddress!, buffer.count) }
}

public func secureZero(_ array: inout [UInt8]) {
    array.withUnsafeMutableBytes { secureZero($0) }
}
