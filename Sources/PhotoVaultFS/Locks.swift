import Glibc
import Synchronization

/// A heap-allocated pthread mutex: libfuse worker threads share the filesystem's tables,
/// and a heap allocation keeps the mutex's address stable (Swift may move inline storage).
final class PMutex: @unchecked Sendable {
    private let m: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        m = .allocate(capacity: 1)
        m.initialize(to: pthread_mutex_t())
        pthread_mutex_init(m, nil)
    }

    deinit {
        pthread_mutex_destroy(m)
        m.deallocate()
    }

    @inline(__always)
    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(m)
        defer { pthread_mutex_unlock(m) }
        return try body()
    }

    /// `body` under the lock if it is free now (`wait` false) or once it is (`wait` true);
    /// nil without running `body` if `wait` is false and another thread holds it.
    func withLock<R>(waiting wait: Bool, _ body: () throws -> R) rethrows -> R? {
        if wait { pthread_mutex_lock(m) } else if pthread_mutex_trylock(m) != 0 { return nil }
        defer { pthread_mutex_unlock(m) }
        return try body()
    }
}

/// A lock stored inside its owner, with no allocation of its own: each inode has one, and a
/// library of 100,000 photos makes the kernel remember 100,000 inodes (a `PMutex`, an
/// object plus a heap pthread mutex, took 80 bytes of the daemon's memory for each). A
/// futex word (`Synchronization.Mutex`) that never moves while its owner lives.
struct InlineLock: ~Copyable, @unchecked Sendable {
    private let m = Mutex<Void>(())

    init() {}

    @inline(__always)
    borrowing func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        try m.withLock { (_: inout Void) throws(E) -> R in try body() }
    }
}

/// A heap-allocated pthread read-write lock: many concurrent readers of one file's
/// content, one writer at a time (a write may rewrite a whole chunk).
final class PRWLock: @unchecked Sendable {
    private let l: UnsafeMutablePointer<pthread_rwlock_t>

    /// `preferWriters`: a waiting writer stops new readers from entering (glibc's default
    /// lets a steady stream of readers starve it). Only for locks no thread takes twice for
    /// reading: a second read lock behind a waiting writer would deadlock.
    init(preferWriters: Bool = false) {
        l = .allocate(capacity: 1)
        l.initialize(to: pthread_rwlock_t())
        var attr = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attr)
        if preferWriters {
            pthread_rwlockattr_setkind_np(&attr, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        }
        pthread_rwlock_init(l, &attr)
        pthread_rwlockattr_destroy(&attr)
    }

    deinit {
        pthread_rwlock_destroy(l)
        l.deallocate()
    }

    @inline(__always)
    func withReadLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_rwlock_rdlock(l)
        defer { pthread_rwlock_unlock(l) }
        return try body()
    }

    @inline(__always)
    func withWriteLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_rwlock_wrlock(l)
        defer { pthread_rwlock_unlock(l) }
        return try body()
    }
}
