import CSodium
import Glibc

/// Small secrets (a file key, an AES key schedule or expanded GCM key) come and go with every file a mount
/// opens. A `sodium_malloc` each costs about ten system calls (mmap, four mprotect, mlock,
/// and on free munlock, munmap), and the mprotect/munmap calls flush the TLB of every core:
/// measured, 20 such calls per photo opened, a third of the time a thumbnailer waits.
///
/// So secrets of up to `maxSlot` bytes live in fixed-size slots carved out of slabs that are
/// themselves `sodium_malloc`'d: locked in RAM (never swapped), not in core dumps
/// (`MADV_DONTDUMP`), with guard pages around each slab. A slot is zeroed when it is
/// released, before it can be handed out again; slabs are kept for the life of the process
/// (a few KiB each, all zero when unused). What is given up: guard pages between two
/// secrets of the same slab; an overflow from one secret could reach its neighbour.
/// Larger secrets keep a `sodium_malloc` of their own.
enum SecureSlots {
    /// Slot sizes: powers of two from 64 to 4,096 bytes (a libsodium AES-256-GCM state is
    /// 512, ipsec-mb's expanded key 1,008, libcrypto's GCM context about 1 KiB).
    static let minSlot = 64
    static let maxSlot = 4096
    /// Every slab is this many bytes, a multiple of the page size (so slots are aligned).
    static let slabBytes = 16 * 1024

    private static let lock: UnsafeMutablePointer<pthread_mutex_t> = {
        let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(m, nil)
        return m
    }()
    /// Free slots per size class, guarded by `lock`.
    nonisolated(unsafe) private static var free: [[UnsafeMutableRawPointer]] = Array(repeating: [], count: classCount)
    nonisolated(unsafe) private static var slabs = 0
    private static let classCount = 7   // 64, 128, ..., 4096

    /// The size class index for `count` bytes, or nil if too large for a slot.
    static func sizeClass(_ count: Int) -> Int? {
        guard count <= maxSlot else { return nil }
        var size = minSlot, c = 0
        while size < count { size <<= 1; c += 1 }
        return c
    }

    static func slotSize(ofClass c: Int) -> Int { minSlot << c }

    /// A zero-filled slot of at least `count` bytes (16-byte aligned), or nil if `count` is
    /// too large for a slot. Throws `CryptoError.memoryNotLocked` when a new slab is needed
    /// and cannot be locked in RAM (see `lockedAllocation`).
    static func allocate(_ count: Int) throws -> UnsafeMutableRawPointer? {
        guard let c = sizeClass(count) else { return nil }
        pthread_mutex_lock(lock); defer { pthread_mutex_unlock(lock) }
        if free[c].isEmpty { try addSlabLocked(ofClass: c) }
        return free[c].removeLast()
    }

    /// Caller holds `lock`.
    private static func addSlabLocked(ofClass c: Int) throws {
        let slab = try lockedAllocation(slabBytes)
        sodium_memzero(slab, slabBytes)
        slabs += 1
        let size = slotSize(ofClass: c)
        free[c].reserveCapacity(free[c].count + slabBytes / size)
        for i in stride(from: slabBytes - size, through: 0, by: -size) { free[c].append(slab + i) }
    }

    /// `sodium_malloc(count)`, checked to be locked in RAM. libsodium (1.0.18) ignores the
    /// result of its own mlock: past RLIMIT_MEMLOCK (a process without CAP_IPC_LOCK) it
    /// hands out memory that can be swapped, silently. Locking the region again is free when
    /// it is locked already, and fails exactly when it is not; such memory is given back and
    /// the caller fails (a file cannot be opened) rather than keep a key where it can reach
    /// swap.
    static func lockedAllocation(_ count: Int) throws -> UnsafeMutableRawPointer {
        Sodium.ensureInitialised()
        guard let p = sodium_malloc(count) else { throw CryptoError.memoryNotLocked }
        guard sodium_mlock(p, count) == 0 else {
            sodium_free(p)
            throw CryptoError.memoryNotLocked
        }
        return p
    }

    /// Makes sure every slot size has a locked slab, allocating those missing: the least a
    /// process that opens files needs (its class keys, a file key, a key schedule). The mount
    /// daemon calls it before it takes any key, so that a locked-memory limit too small for
    /// it fails the mount with one clear message instead of the first file opened.
    static func reserveOneSlabPerClass() throws {
        pthread_mutex_lock(lock); defer { pthread_mutex_unlock(lock) }
        for c in 0..<classCount where free[c].isEmpty { try addSlabLocked(ofClass: c) }
    }

    /// Zeroes the slot and makes it available again. `count` must be the allocation's count.
    static func release(_ p: UnsafeMutableRawPointer, count: Int) {
        guard let c = sizeClass(count) else { preconditionFailure("not a slot") }
        sodium_memzero(p, slotSize(ofClass: c))
        pthread_mutex_lock(lock); defer { pthread_mutex_unlock(lock) }
        free[c].append(p)
    }

    /// Slabs allocated so far (tests, diagnostics).
    static var slabCount: Int {
        pthread_mutex_lock(lock); defer { pthread_mutex_unlock(lock) }
        return slabs
    }
}
