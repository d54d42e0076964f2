import Glibc
import CLinux
import PhotoVaultCrypto

/// One file the kernel knows about, identified by its backing (st_dev, st_ino): a store's
/// tree may span file systems (a disk or tmpfs mounted, or a directory bind-mounted, inside
/// it), and two of them can number different files alike. Its node ID — also the st_ino
/// and d_ino users see, which tar, cp, du and find use to recognise hard links — is
/// `InodeTable.nodeID(dev:ino:)`. Its PV_O_PATH descriptor (`fd`) comes from the table's
/// `DescriptorCache`, which keeps only the recently used ones open and reopens the others
/// from `backingParent` and `backingName`.
final class Inode: @unchecked Sendable {
    // The daemon holds one of these for every file the kernel remembers (100,000 after an
    // `ls -lR` of such a library): fields of 4 bytes or less are declared in pairs, since a
    // class keeps its fields in declaration order, padding each to its alignment.
    let nodeID: UInt64
    let backingIno: UInt64
    let dev: UInt64
    let fileType: mode_t
    // Guarded by the descriptor cache's mutex.
    var cachedFD: Int32 = -1
    private let descriptors: DescriptorCache
    var lastUse: UInt64 = 0
    var slot: Int32 = -1
    /// Open handles (a file or directory): the descriptor stays while there are any.
    var pins: Int32 = 0
    /// The directory and encrypted name the backing entry was last seen under (looked up,
    /// created or renamed through the mount); nil for the root. A strong reference: a
    /// directory the kernel forgot still leads to its children.
    var backingParent: Inode?
    var backingName: [UInt8] = []

    /// The backing file's PV_O_PATH descriptor, valid until the request using it ends (the
    /// cache closes evicted ones only between requests). ESTALE when the entry was moved or
    /// replaced underneath since the mount last saw it.
    var fd: Int32 {
        get throws { try descriptors.descriptor(of: self) }
    }

    // Guarded by the table's mutex.
    var lookups: UInt64 = 0
    /// Best-effort plaintext location, for log lines and the class of a header-less file.
    /// `name` stays empty when the table keeps no names (`InodeTable.keepsNames`).
    var parentID: UInt64 = 0
    var name: [UInt8] = []

    // Guarded by `stateLock`.
    let stateLock = InlineLock()
    /// Whether a `.pvdir` that could not be read was logged for this directory (once).
    var namingFailureLogged = false
    /// Whether an extended attribute name that fails authentication was logged for this inode (once).
    var xattrNameFailureLogged = false
    var naming: DirectoryNaming?
    var content: ContentState?

    init(nodeID: UInt64, st: stat, descriptors: DescriptorCache) {
        self.nodeID = nodeID
        self.descriptors = descriptors
        backingIno = UInt64(st.st_ino)
        dev = UInt64(st.st_dev)
        fileType = st.st_mode & S_IFMT
    }

    /// The st_ino users see: the node ID, except for the root, whose node ID FUSE fixes at 1
    /// and which shows its backing number (no other node can have it: see `nodeID`).
    var shownIno: UInt64 { nodeID == UInt64(FUSE_ROOT_ID_VALUE) ? backingIno : nodeID }

    var isDirectory: Bool { fileType == S_IFDIR }
    var isRegular: Bool { fileType == S_IFREG }
    var isSymlink: Bool { fileType == S_IFLNK }
}

/// The node table: node ID -> inode, with the kernel's lookup counts.
final class InodeTable: @unchecked Sendable {
    private let mutex = PMutex()
    private var nodes: [UInt64: Inode] = [:]
    let root: Inode
    /// The backing root's descriptor, open for the mount's lifetime.
    let rootFD: Int32
    let descriptors: DescriptorCache
    /// Whether nodes keep their plaintext name, which only log lines use (`path(of:)`): a
    /// background daemon never logs names (`MountOptions.logsPlaintextPaths`), and an array
    /// per remembered file was 48 bytes of its memory each (5 MiB at 100,000 files).
    let keepsNames: Bool
    /// Node ID ranges of backing inode numbers that are not passed through (see `nodeID`),
    /// by (st_dev, st_ino >> 48), kept for the mount's lifetime so that a file's number does
    /// not change between lookups. Guarded by `mutex`.
    private struct Range: Hashable { let dev: UInt64; let high: UInt64 }
    private var ranges: [Range: UInt64] = [:]
    private var rangesTaken: Set<UInt64> = []
    static let rangeBits = 48
    static let mappedFlag: UInt64 = 1 << 63
    /// 15 bits of range number beside the flag and the 48 low bits.
    static let maxRanges: UInt64 = 1 << 15 - 1

    init(rootFD: Int32, rootStat: stat, descriptorCapacity: Int = DescriptorCache.defaultCapacity(),
         keepsNames: Bool = true) {
        self.rootFD = rootFD
        self.keepsNames = keepsNames
        descriptors = DescriptorCache(capacity: descriptorCapacity)
        root = Inode(nodeID: UInt64(FUSE_ROOT_ID_VALUE), st: rootStat, descriptors: descriptors)
        root.lookups = 1   // never forgotten
        descriptors.pin(root)   // never closed by the cache
        descriptors.adopt(rootFD, for: root)
        nodes[root.nodeID] = root
    }

    func get(_ id: UInt64) -> Inode? {
        mutex.withLock { nodes[id] }
    }

    func require(_ id: UInt64) throws -> Inode {
        guard let n = get(id) else { throw FSError.notFound }
        return n
    }

    /// Registers one more kernel reference to the file open at `fd` (stat `st`), named
    /// `name` in `parent` (`backing` underneath). Takes ownership of `fd` (the node keeps it
    /// in the descriptor cache, or it is closed if the node has one already). Closes `fd` if
    /// it throws (EOVERFLOW: more backing file systems than node IDs can tell apart, see
    /// `nodeID`).
    /// `listing`: looked up by readdirplus (`DescriptorCache.adopt`'s `evicting: false`).
    /// `fd` -1: a listing's entry looked up without a descriptor (the cache was full); the
    /// node's is opened from `parent` and `backing` when first used.
    func insert(fd: Int32, st: stat, parent: Inode, backing: [UInt8], name: [UInt8], listing: Bool = false) throws -> Inode {
        let node: Inode? = mutex.withLock {
            guard let id = lockedNodeID(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino), allocate: true) else { return nil }
            if let n = nodes[id] {
                n.lookups += 1
                n.parentID = parent.nodeID
                if keepsNames { n.name = name }
                return n
            }
            let n = Inode(nodeID: id, st: st, descriptors: descriptors)
            n.lookups = 1
            n.parentID = parent.nodeID
            if keepsNames { n.name = name }
            nodes[id] = n
            return n
        }
        guard let node else { if fd >= 0 { close(fd) }; throw FSError.posix(EOVERFLOW) }
        // A hard link's node is reopened by the name it was last looked up by.
        if node !== root { descriptors.located(node, in: parent, as: backing) }
        if fd >= 0 && !descriptors.adopt(fd, for: node, evicting: !listing) { close(fd) }
        return node
    }

    /// The entry with backing stat `st` is now `name` in `parent` (`backing` underneath; a
    /// rename): logs then name the file where it is, also while it stays open, and a closed
    /// descriptor is reopened there. Nodes the table does not hold are left alone.
    func renamed(_ st: stat, parent: Inode, backing: [UInt8], name: [UInt8]) {
        let moved: Inode? = mutex.withLock {
            guard let id = lockedNodeID(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino), allocate: false),
                  let n = nodes[id], n !== root else { return nil }
            n.parentID = parent.nodeID
            if keepsNames { n.name = name }
            return n
        }
        if let moved { descriptors.located(moved, in: parent, as: backing) }
    }

    /// The directory `node` was last looked up, created or renamed in (a hard-linked file
    /// may have others); nil if the kernel forgot it.
    func parent(of node: Inode) -> Inode? {
        mutex.withLock { nodes[node.parentID] }
    }

    /// One more reference to a node already in the table (link, readdirplus of a known node).
    func addLookup(_ node: Inode) {
        mutex.withLock { node.lookups += 1 }
    }

    /// The node ID of backing inode (`dev`, `ino`), one per backing file for the mount's
    /// lifetime. A file on the root's file system keeps its backing inode number (stable
    /// across lookups and remounts, as tar's incremental dumps and rsync expect), except that
    /// the backing root is FUSE's root (1). Anything else — a file on another file system
    /// mounted inside the tree, a backing number 1 that is not the root (possible on some
    /// file systems, it would take the root's ID), or one of 2^48 or more — gets the top bit,
    /// a range number for (dev, ino >> 48) and the low 48 bits of its number: unique, and
    /// stable while the vault stays mounted. The range number is derived from (dev, ino >>
    /// 48), so it is the same after a remount while the device keeps its number, unless two
    /// ranges collide (the one met second takes the next free number). nil only when all
    /// 2^15 - 1 range numbers are taken.
    func nodeID(dev: UInt64, ino: UInt64) -> UInt64? {
        mutex.withLock { lockedNodeID(dev: dev, ino: ino, allocate: true) }
    }

    /// The st_ino users see for backing inode (`dev`, `ino`) (`Inode.shownIno`), e.g. as the
    /// d_ino of a listing; its backing number if no node ID can be given.
    func shownIno(dev: UInt64, ino: UInt64) -> UInt64 {
        guard let id = nodeID(dev: dev, ino: ino) else { return ino }
        return id == root.nodeID ? root.backingIno : id
    }

    /// 1...maxRanges from (dev, high): splitmix64, the same in every process (Swift's
    /// `Hasher` is seeded per process).
    static func preferredRange(_ dev: UInt64, _ high: UInt64) -> UInt64 {
        var z = dev &* 0x9E37_79B9_7F4A_7C15 ^ high &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return z % maxRanges + 1
    }

    /// Caller holds `mutex`. Without `allocate`, nil for a range not met yet (no node has it).
    private func lockedNodeID(dev: UInt64, ino: UInt64, allocate: Bool) -> UInt64? {
        if dev == root.dev {
            if ino == root.backingIno { return root.nodeID }
            if ino != root.nodeID && ino >> Self.rangeBits == 0 { return ino }
        }
        let key = Range(dev: dev, high: ino >> Self.rangeBits)
        let range: UInt64
        if key == Range(dev: root.dev, high: 0) {
            range = 0   // the root file system's backing number 1: 1 | 1 << 63, as it always was
        } else if let r = ranges[key] {
            range = r
        } else {
            guard allocate, UInt64(ranges.count) < Self.maxRanges else { return nil }
            var r = Self.preferredRange(key.dev, key.high)
            while rangesTaken.contains(r) { r = r % Self.maxRanges + 1 }
            range = r
            ranges[key] = r
            rangesTaken.insert(r)
        }
        return Self.mappedFlag | range << UInt64(Self.rangeBits) | ino & (1 << UInt64(Self.rangeBits) - 1)
    }

    /// The kernel dropped `n` references; the node goes away at zero.
    func forget(_ id: UInt64, _ n: UInt64) {
        let gone: Inode? = mutex.withLock {
            guard let node = nodes[id], node !== root else { return nil }
            node.lookups = node.lookups > n ? node.lookups - n : 0
            if node.lookups == 0 {
                nodes[id] = nil
                lockedShrinkIfSparse()
                return node
            }
            return nil
        }
        // An open handle keeps its own backing fd; the PV_O_PATH fd is only for names.
        if let g = gone { descriptors.drop(g) }
    }

    /// Caller holds `mutex`. A dictionary never gives back the room it grew to: after the
    /// kernel forgot most of a large library (drop_caches, memory pressure), the table is
    /// rebuilt at its present size so that its memory follows what the kernel remembers.
    private func lockedShrinkIfSparse() {
        if nodes.capacity > 4096 && nodes.count < nodes.capacity / 8 {
            var fresh = [UInt64: Inode](minimumCapacity: nodes.count * 2)
            for (id, n) in nodes { fresh[id] = n }
            nodes = fresh
        }
    }


    /// Nodes the kernel remembers now (the root included), for tests and status.
    var count: Int { mutex.withLock { nodes.count } }

    /// "/dir/sub/name" of a node as far as the table knows it (for logs): at most the last
    /// `pathDepthLimit` names, and "…/" in front of the rest when the path is cut there (or
    /// reaches a node the table no longer holds), so that a log line never shows a partial
    /// path as if it were whole.
    func path(of id: UInt64) -> String {
        mutex.withLock {
            var parts: [String] = []
            var cur = id
            while cur != root.nodeID, let n = nodes[cur], parts.count < Self.pathDepthLimit {
                parts.append(String(decoding: n.name, as: UTF8.self))
                cur = n.parentID
            }
            return (cur == root.nodeID ? "/" : "…/") + parts.reversed().joined(separator: "/")
        }
    }

    static let pathDepthLimit = 256

    func regularFileIDs() -> [UInt64] {
        mutex.withLock { nodes.values.filter { $0.isRegular }.map { $0.nodeID } }
    }

    /// Every node with open content, by node ID (for lock and status).
    func openFiles() -> [(id: UInt64, content: ContentState)] {
        let all = mutex.withLock { Array(nodes.values) }
        return all.compactMap { n in n.stateLock.withLock { n.content.map { (n.nodeID, $0) } } }
    }

    /// Open contents with their handle counts, read under each node's stateLock.
    func openCounts() -> [(content: ContentState, opens: Int, writers: Int)] {
        let all = mutex.withLock { Array(nodes.values) }
        return all.compactMap { n in n.stateLock.withLock { n.content.map { ($0, $0.opens, $0.writers) } } }
    }

    /// Unmount: every descriptor but the root's.
    func closeAll() {
        mutex.withLock {
            nodes.removeAll()
            nodes[root.nodeID] = root
        }
        descriptors.closeAll(except: root)
    }
}

let FUSE_ROOT_ID_VALUE: UInt64 = 1

/// The plaintext content of one open file, shared by all its open handles (two handles
/// must see each other's writes), refcounted by them.
final class ContentState: @unchecked Sendable {
    let fd: Int32
    let file: FileContent
    /// Whether `fd` is open O_RDWR. Guarded by the inode's stateLock.
    private(set) var writable: Bool
    /// Writers first: a lock's `wipeKey` (and a write) must not wait behind a reader that
    /// keeps reads in flight (a player or a copy with read-ahead) for as long as it reads.
    /// No code path takes it for reading twice (each method below takes it once and calls
    /// only `FileContent`), which writer preference requires.
    let rw = PRWLock(preferWriters: true)
    private var cls: ProtectionClass?
    var protectionClass: ProtectionClass? { rw.withReadLock { cls } }
    // Guarded by the inode's stateLock.
    var opens = 0
    var writers = 0
    // Guarded by `rw` (written under the write lock).
    private var keyWiped = false
    private var closed = false
    var isKeyWiped: Bool { rw.withReadLock { keyWiped } }

    init(fd: Int32, file: FileContent, writable: Bool) {
        self.fd = fd
        self.file = file
        self.writable = writable
        cls = file.protectionClass
    }

    /// Puts the read-write descriptor `rw` in place of the read-only `fd` (same number, so the
    /// content keeps using it; reads in flight finish on either). Caller holds stateLock.
    func becomeWritable(_ rwFD: Int32) throws {
        let rc = rw.withWriteLock { pv_dup3_cloexec(rwFD, fd) }
        let e = errno
        Glibc.close(rwFD)
        guard rc >= 0 else { throw FSError.posix(e) }
        writable = true
    }

    /// After the backend rewrapped the key (caller holds no lock on `rw`).
    func protectionClassChanged(to c: ProtectionClass) {
        rw.withWriteLock { cls = c }
    }

    func read(into buf: UnsafeMutableRawPointer, count: Int, offset: Int64) throws -> Int {
        try rw.withReadLock {
            if keyWiped { throw FSError.locked }
            return try file.read(into: buf, count: count, offset: offset)
        }
    }

    func write(from buf: UnsafeRawPointer, count: Int, offset: Int64) throws -> Int {
        try rw.withWriteLock {
            if keyWiped { throw FSError.locked }
            return try file.write(from: buf, count: count, offset: offset)
        }
    }

    func truncate(to size: Int64) throws {
        try rw.withWriteLock {
            if keyWiped { throw FSError.locked }
            try file.truncate(to: size)
        }
    }

    func allocate(offset: Int64, length: Int64, keepSize: Bool) throws {
        try rw.withWriteLock {
            if keyWiped { throw FSError.locked }
            try file.allocate(offset: offset, length: length, keepSize: keepSize)
        }
    }

    func zeroRange(offset: Int64, length: Int64, keepSize: Bool) throws {
        try rw.withWriteLock {
            if keyWiped { throw FSError.locked }
            try file.zeroRange(offset: offset, length: length, keepSize: keepSize)
        }
    }

    /// SEEK_DATA (`data`) or SEEK_HOLE: needs no key (the map is in memory).
    func seek(from offset: Int64, data: Bool) throws -> Int64 {
        try rw.withReadLock {
            if closed { throw FSError.posix(EBADF) }
            return try file.seek(from: offset, data: data)
        }
    }

    /// Throws once the content is closed: its descriptor number may already belong to another
    /// file (a stat racing the last release must then use the backing file's size).
    func size() throws -> Int64 {
        try rw.withReadLock {
            if closed { throw FSError.posix(EBADF) }
            return try file.size()
        }
    }

    /// Also after the key was wiped: what was written before the lock is in the backing
    /// file already, and syncing it needs no key and shows nothing (refusing it with EACCES
    /// told an app its save failed and left the data unsynced).
    func sync(dataOnly: Bool) throws {
        try rw.withWriteLock {
            try file.sync(dataOnly: dataOnly)
        }
    }

    /// Device lock for a `complete` file: waits for requests in flight, then forgets the key.
    func wipeKey() {
        rw.withWriteLock {
            keyWiped = true
            file.wipeKey()
        }
    }

    /// Last handle gone: the content closes its backing fd and wipes its key.
    func close() {
        rw.withWriteLock {
            closed = true
            try? file.close()
        }
    }
}

/// `fuse_file_info.fh` of an open regular file.
final class OpenFile {
    let inode: Inode
    let content: ContentState
    let writes: Bool
    init(inode: Inode, content: ContentState, writes: Bool) {
        self.inode = inode
        self.content = content
        self.writes = writes
    }
}

/// `fuse_file_info.fh` of an open directory: the listing taken at opendir, so offsets
/// are indexes and stay valid while entries come and go.
final class OpenDirectory {
    struct Entry {
        let name: [UInt8]      // plaintext, NUL-terminated for libfuse
        let backing: [UInt8]
        let ino: UInt64
        let type: UInt8
    }
    let inode: Inode
    private let lock = PMutex()
    private var snapshot: [Entry]
    private var served = false
    init(inode: Inode, entries: [Entry]) {
        self.inode = inode
        self.snapshot = entries
    }

    /// The entries a readdir at `offset` reads. Offset 0 after entries were served is a
    /// rewinddir: POSIX wants the directory as it is now, so `refresh` makes a new snapshot.
    func entries(at offset: Int, refresh: () throws -> [Entry]) rethrows -> [Entry] {
        try lock.withLock {
            if offset == 0 && served { snapshot = try refresh() }
            served = true
            return snapshot
        }
    }
}
