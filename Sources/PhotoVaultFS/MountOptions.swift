/// How the vault is mounted. `allowOther` also turns on `default_permissions` so the
/// kernel enforces file modes for the other users.
public struct MountOptions: Sendable {
    public var mountpoint: String
    public var readOnly: Bool
    public var allowOther: Bool
    /// Shown by `mount` and `df` as the source and the subtype (`fuse.photovault`).
    public var fsName: String
    public var debug: Bool
    /// Kernel writeback cache: gathers small writes into 1 MiB ones (one chunk rewrite
    /// instead of many). Measured on 2 cores, 64 KiB chunks: dd bs=4k 32 MiB 1.10 s -> 0.30 s,
    /// but cp of a 256 MiB file 0.71 s -> 1.76 s (FUSE's strict dirty-page throttling).
    /// Copying photos in is the common case, so it is off by default. Keeping write-only
    /// handles direct under it was tried too (PERFORMANCE.md, change 27): the kernel then keeps
    /// a stale mtime for files written through them, so the two exclude each other.
    public var writebackCache: Bool
    /// Entry and attribute cache lifetime in the kernel, seconds.
    public var cacheTimeout: Double
    /// Read-ahead window to ask for, KiB (0: keep the kernel's 128 KiB). Takes effect only
    /// when the daemon may write the mount's bdi attribute (root); see `ReadAhead`.
    public var readAheadKB: Int
    /// Largest READ request, bytes (`max_read`). 128 KiB: a read-ahead window arrives as
    /// several requests that the worker threads open in parallel, instead of one 1 MiB
    /// request on one thread (PERFORMANCE.md, change 11).
    public var maxRead: Int
    /// Write-only opens bypass the kernel's page cache (`FOPEN_DIRECT_IO`): the writer's
    /// data goes straight from its buffer into the WRITE request instead of first into fresh
    /// page-cache pages. 1 GiB `dd` 1.07 -> 0.74 s, 100 photos `cp` in 0.59 -> 0.45 s, same
    /// daemon CPU (PERFORMANCE.md, change 25). A write-only descriptor cannot be mapped, and
    /// the kernel drops other handles' cached pages of the range it writes, so readers stay
    /// coherent; that last part needs Linux 6.6 or later, so older kernels keep the page
    /// cache for write-only handles (`KernelRelease`). Ignored with the writeback cache.
    public var directWrites: Bool
    /// How many background requests (read-ahead READs, asynchronous RELEASEs) the kernel
    /// keeps in flight (`max_background`; the congestion threshold is three quarters of it).
    /// The kernel's 12, with 9 as threshold, is less than two windows of 128 KiB READs: a
    /// reader that asks for sequential access (`cp`, `cat`: `posix_fadvise`, which doubles the
    /// window to 1 MiB) found the connection congested and the kernel skipped the
    /// asynchronous part of its read-ahead, so the next `read` waited. 64: cold `cat` of a
    /// 512 MiB file 0.60 -> 0.30 s, `dd bs=1M` 0.41 -> 0.26 s, same daemon CPU
    /// (PERFORMANCE.md, change 26). 0 keeps the kernel's default.
    public var maxBackground: Int
    /// The threads that answer requests run under `SCHED_BATCH` (same priority, but a worker
    /// that wakes does not preempt the program it serves): a `cp` out of the mount shares two
    /// CPUs with the workers decrypting its read-ahead, and under the default policy each
    /// wake-up of a worker took `cp`'s CPU from it. 200 photos, 12 rounds: `cp`'s time
    /// waiting for a CPU 35 -> 5 ms, export 0.711 -> 0.681 s (PERFORMANCE.md, change 33).
    /// Off by default since (PERFORMANCE.md, "A life's library", runs L3–L5): on a machine
    /// whose CPUs other work keeps busy (a build), a worker that wakes for a request does not
    /// preempt that work either, so every synchronous round trip (a lookup, a create, an
    /// open) waits for a time slice: beside two CPU-bound loops, `tar -xf` of 2,000 files
    /// took 4.5 s under it against 2.4 s without, the thumbnailer's pattern 3.9 against 1.6 s.
    /// The lock watcher's threads keep the default policy in both cases.
    public var batchWorkers: Bool
    /// Whether log lines may name plaintext paths. True when the log is the terminal of a
    /// foreground mount; false for the background daemon, whose log (syslog, the journal)
    /// is kept on disk, where no plaintext name may go.
    public var logsPlaintextPaths: Bool = true

    public init(mountpoint: String, readOnly: Bool = false, allowOther: Bool = false,
                fsName: String = "photovault", debug: Bool = false,
                writebackCache: Bool = false, cacheTimeout: Double = 1.0, readAheadKB: Int = 512,
                maxRead: Int = 128 << 10, directWrites: Bool = true, maxBackground: Int = 64,
                batchWorkers: Bool = false) {
        self.mountpoint = mountpoint
        self.readOnly = readOnly
        self.allowOther = allowOther
        self.fsName = fsName
        self.debug = debug
        self.writebackCache = writebackCache
        self.cacheTimeout = cacheTimeout
        self.readAheadKB = readAheadKB
        self.maxRead = maxRead
        self.directWrites = directWrites
        self.maxBackground = maxBackground
        self.batchWorkers = batchWorkers
    }
}
