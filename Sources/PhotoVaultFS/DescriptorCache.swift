import Glibc
import Synchronization

/// The PV_O_PATH descriptors of the backing files the kernel remembers, at most `capacity`
/// of them open at once whatever the library's size.
///
/// A file manager showing a folder of 50,000 photos makes the kernel remember 50,000 nodes;
/// holding a descriptor for each ran into the open-file limit (EMFILE at about 20,000 files
/// with this machine's hard limit, which even root could not raise). Here a node keeps its
/// descriptor while it is among the most recently used; the others are closed and reopened
/// on their next use from their parent's descriptor and their backing (encrypted) name, as
/// last looked up or renamed through the mount. A reopened entry must still be the same
/// backing file (st_dev, st_ino): one renamed or replaced underneath meanwhile (a sync
/// engine, another process) is ESTALE, on which the kernel looks the path up again.
///
/// Pinned nodes (an open file or directory handle) are never closed: a file unlinked while
/// open has no name left to reopen it by.
///
/// Closing is deferred: a request may still use a descriptor it read just before another
/// request evicted it. Evicted descriptors are *retired*, and closed only after every
/// request in flight at that moment has ended (`closeRetired`, behind the filesystem's
/// request gate), so a descriptor number is never reused under a request that holds it.
///
/// Fields of `Inode` guarded here: `cachedFD`, `lastUse`, `slot`, `pins`, `backingParent`,
/// `backingName`. Lock order: the table's mutex, then this one (never the other way).
final class DescriptorCache: @unchecked Sendable {
    let capacity: Int
    private let mutex = PMutex()
    /// Nodes holding a descriptor (pinned ones too), each at its `slot`.
    private var cached: [Inode] = []
    private var tick: UInt64 = 0
    private var retired: [Int32] = []
    private let retiredCount = Atomic<Int>(0)
    /// Held by the thread closing a batch.
    private let closer = PMutex()

    init(capacity: Int) {
        self.capacity = max(capacity, 8)
    }

    /// A quarter of what the open-file limit leaves after a reserve for open files' own
    /// descriptors, libfuse and the daemon, and never more than 512: with what is retired
    /// and pinned on top, the daemon stays within about a thousand descriptors.
    static func defaultCapacity() -> Int {
        var rl = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &rl) == 0 else { return 256 }
        let soft = Int(clamping: min(rl.rlim_cur, 1 << 20))
        return min(512, max(16, (soft - 64) / 4))
    }

    /// Descriptors open now (not counting retired ones), for tests and status.
    var openCount: Int { mutex.withLock { cached.count } }

    /// `node`'s descriptor: the cached one, or one reopened from its parent.
    func descriptor(of node: Inode) throws -> Int32 {
        let fd: Int32 = mutex.withLock {
            if node.cachedFD >= 0 {
                tick &+= 1
                node.lastUse = tick
            }
            return node.cachedFD
        }
        return fd >= 0 ? fd : try reopen(node)
    }

    /// Where `node`'s backing entry is now (a lookup, create or rename through the mount).
    func located(_ node: Inode, in parent: Inode, as backing: [UInt8]) {
        mutex.withLock {
            node.backingParent = parent
            node.backingName = backing
        }
    }

    /// Whether a listing's descriptor would be kept now (`adopt` with `evicting: false`).
    /// Read without a lasting guarantee: `adopt` decides again.
    var hasRoom: Bool { mutex.withLock { cached.count < capacity } }

    /// Gives `fd`, freshly opened for `node`, to the cache. Returns false when the cache did
    /// not take it (the caller closes `fd`): the node has one already, or the cache is full
    /// and `evicting` is false. A listing (readdirplus) looks up hundreds of entries in one
    /// request, and what it evicts is only closed after that request: it keeps descriptors
    /// only while there is room, and the entries it could not keep are reopened when used.
    @discardableResult
    func adopt(_ fd: Int32, for node: Inode, evicting: Bool = true) -> Bool {
        mutex.withLock {
            if !evicting && node.cachedFD < 0 && cached.count >= capacity { return false }
            return lockedInstall(fd, node) == fd
        }
    }

    /// An open handle: the node keeps its descriptor until `unpin`.
    func pin(_ node: Inode) {
        mutex.withLock { node.pins += 1 }
        _ = try? descriptor(of: node)   // reopened now if it was closed, while its name still leads to it
    }

    func unpin(_ node: Inode) {
        mutex.withLock { if node.pins > 0 { node.pins -= 1 } }
    }

    /// The kernel forgot `node`: its descriptor goes unless a handle still pins it.
    func drop(_ node: Inode) {
        mutex.withLock {
            guard node.pins == 0, node.cachedFD >= 0 else { return }
            lockedRemove(node)
        }
    }

    /// Enough retired descriptors to be worth a barrier. Closing after every request that
    /// retired one made `rm -rf` pay a barrier per unlinked file (each FORGET retires one):
    /// a batch keeps that to one per `closeBatch`, and at most that many wait to be closed.
    var hasRetired: Bool { retiredCount.load(ordering: .relaxed) >= closeBatch }
    var closeBatch: Int { max(8, capacity / 8) }

    /// More retired descriptors than this, and a request that finds them waits for the
    /// closing thread instead of going on (`closeRetired`).
    var backlogLimit: Int { closeBatch * 2 }

    /// Closes the retired descriptors once no request that may hold one is in flight:
    /// `barrier` returns only when every request that started before it has ended (the
    /// filesystem passes its request gate's write lock). One thread at a time. The others
    /// go on while fewer than `backlogLimit` wait to be closed, and wait for it past that:
    /// the last descriptor of a file unlinked through the mount is what deletes it on the
    /// backing file system when closed, which can take a millisecond each (ext4 freeing the
    /// blocks, with `discard` a disk command), and `rm -rf` of 10,000 files right after a
    /// `du` (each unlink looks up, caches, then forgets its file's descriptor) retired
    /// them faster than one thread closed them: 5,400 descriptors open, most of them
    /// unlinked files, and their deletions still going on seconds after `rm` had returned.
    /// Waiting keeps both bounded, and puts the deletions' time back into the requests
    /// that make them, as a local file system's unlink pays it.
    func closeRetired(barrier: () -> Void) {
        let backlog = retiredCount.load(ordering: .relaxed) >= backlogLimit
        _ = closer.withLock(waiting: backlog) {
            let batch: [Int32] = mutex.withLock {
                let b = retired
                retired.removeAll(keepingCapacity: true)
                retiredCount.store(0, ordering: .relaxed)
                return b
            }
            guard !batch.isEmpty else { return }
            barrier()
            for fd in batch { close(fd) }
        }
    }

    /// Unmount: every descriptor but the root's (which the filesystem closes).
    func closeAll(except root: Inode) {
        let fds: [Int32] = mutex.withLock {
            var out = retired
            retired.removeAll()
            retiredCount.store(0, ordering: .relaxed)
            for n in cached where n !== root {
                out.append(n.cachedFD)
                n.cachedFD = -1
                n.slot = -1
            }
            cached.removeAll()
            return out
        }
        for fd in fds { close(fd) }
    }

    // MARK: - Private

    private func reopen(_ node: Inode) throws -> Int32 {
        let (parent, name): (Inode?, [UInt8]) = mutex.withLock { (node.backingParent, node.backingName) }
        guard let parent, !name.isEmpty else { throw FSError.posix(ESTALE) }
        let dirFD = try descriptor(of: parent)
        let fd = Syscall.openat(dirFD, name, PV_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            // Gone from where the mount last saw it: moved or removed underneath.
            throw FSError.posix(errno == ENOENT ? ESTALE : errno)
        }
        var st = stat()
        guard fstatat(fd, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
            let e = errno
            close(fd)
            throw FSError.posix(e)
        }
        guard UInt64(st.st_ino) == node.backingIno, UInt64(st.st_dev) == node.dev else {
            // Another file took the name: never hand out the wrong file.
            close(fd)
            throw FSError.posix(ESTALE)
        }
        let kept = mutex.withLock { lockedInstall(fd, node) }
        if kept != fd { close(fd) }   // another request reopened it first; ours was never shared
        return kept
    }

    /// Caller holds `mutex`. The node's descriptor after installing `fd` (its own if it had one).
    private func lockedInstall(_ fd: Int32, _ node: Inode) -> Int32 {
        tick &+= 1
        node.lastUse = tick
        if node.cachedFD >= 0 { return node.cachedFD }
        node.cachedFD = fd
        node.slot = Int32(cached.count)
        cached.append(node)
        if cached.count > capacity { lockedEvict() }
        return fd
    }

    /// Caller holds `mutex`. Retires the least recently used unpinned descriptors down to
    /// three quarters of the capacity (a batch, so that sorting is paid once per many opens).
    private func lockedEvict() {
        let target = capacity * 3 / 4
        let candidates = cached.filter { $0.pins == 0 }.sorted { $0.lastUse < $1.lastUse }
        var excess = cached.count - target
        for n in candidates where excess > 0 {
            lockedRemove(n)
            excess -= 1
        }
    }

    /// Caller holds `mutex`. Takes `node`'s descriptor out of the cache and retires it.
    private func lockedRemove(_ node: Inode) {
        let i = Int(node.slot)
        let last = cached.removeLast()
        if last !== node {
            cached[i] = last
            last.slot = node.slot
        }
        retired.append(node.cachedFD)
        retiredCount.store(retired.count, ordering: .relaxed)
        node.cachedFD = -1
        node.slot = -1
    }
}
