import Glibc

/// Heap buffers for control-socket bytes that may carry a secret (the master key of
/// `photovault unlock`): locked against swapping while they live (mlock; best effort, as an
/// unprivileged RLIMIT_MEMLOCK may refuse), zeroed and unlocked before they are freed.
enum SecretBuffer {
    static func allocate(_ count: Int) -> UnsafeMutableRawBufferPointer {
        let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: 16)
        _ = mlock(b.baseAddress!, b.count)
        return UnsafeMutableRawBufferPointer(rebasing: b[0..<count])
    }

    /// Zeroes, unlocks and frees a buffer from `allocate` (its full allocation).
    static func release(_ b: UnsafeMutableRawBufferPointer) {
        guard let base = b.baseAddress else { return }
        let n = max(b.count, 1)
        explicit_bzero(base, n)
        _ = munlock(base, n)
        b.deallocate()
    }
}
