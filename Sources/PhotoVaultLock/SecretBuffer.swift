import Glibc
import Synchronization

/// Heap buffers for control-socket bytes that may carry a secret (the master key of
/// `photovault unlock`): locked against swapping while they live (mlock; best effort, as an
/// unprivileged RLIMIT_MEMLOCK may refuse), zeroed and unlocked before they are freed.
/// In a process whose whole memory is locked (`noteWholeProcessLocked`) they are not locked
/// or unlocked one by one: munlock would unlock the heap pages around them as well.
public enum SecretBuffer {
    private static let wholeProcessLocked = Atomic<Bool>(false)

    /// Called by a process after mlockall(MCL_FUTURE) succeeded (the mount daemon).
    public static func noteWholeProcessLocked() { wholeProcessLocked.store(true, ordering: .releasing) }

    private static var lockEach: Bool { !wholeProcessLocked.load(ordering: .acquiring) }

    static func allocate(_ count: Int) -> UnsafeMutableRawBufferPointer {
        let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: 16)
        if lockEach { _ = mlock(b.baseAddress!, b.count) }
        return UnsafeMutableRawBufferPointer(rebasing: b[0..<count])
    }

    /// Zeroes, unlocks and frees a buffer from `allocate` (its full allocation).
    static func release(_ b: UnsafeMutableRawBufferPointer) {
        guard let base = b.baseAddress else { return }
        let n = max(b.count, 1)
        explicit_bzero(base, n)
        if lockEach { _ = munlock(base, n) }
        b.deallocate()
    }
}
