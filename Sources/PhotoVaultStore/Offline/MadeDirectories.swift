import Glibc
import CLinux
import Synchronization

/// The directories one offline import made and has not finished, outermost first: DEST's
/// missing parents, then the source directories the walk is inside. A directory the import
/// finished (all its entries copied; an empty source directory too) leaves the list: it is
/// complete and stays, as a complete file does. A directory that was there before the
/// import, or that an earlier, interrupted run made, is never in it.
///
/// When the import fails (`removeEmpty`) or a signal ends it (`PartialFile`'s handler), each
/// listed directory that holds nothing but its `.pvdir` is removed, deepest first, with its
/// long-name companion; one that holds anything stays, and so do the directories above it.
/// The exclusive tree lock keeps every other writer out meanwhile.
///
/// The handler can neither allocate nor take a lock, so the list is mirrored into `Records`.
/// One import at a time in a process has its list mirrored (the command runs one).
final class MadeDirectories {
    private(set) var entries: [VaultEntry] = []
    private let mirrored: Bool

    init() { mirrored = Records.claim() }

    deinit {
        if mirrored { Records.release() }
    }

    /// This import has just made `entry`.
    func add(_ entry: VaultEntry) {
        entries.append(entry)
        if mirrored { Records.push(entry) }
    }

    /// `entry` is complete (its entries copied): it stays, whatever happens next.
    func finished(_ entry: VaultEntry) {
        guard let last = entries.last, last.parent === entry.parent, last.encoded == entry.encoded else { return }
        dropLast()
    }

    /// The import succeeded: every listed directory stays.
    func keepAll() {
        while !entries.isEmpty { dropLast() }
    }

    /// After a failure: removes the listed directories that hold nothing, deepest first. The
    /// first one that holds something stays, with the directories above it, which hold it.
    func removeEmpty() {
        let scratch = UnsafeMutableRawPointer.allocate(byteCount: MadeDirectories.scratchSize, alignment: 8)
        defer { scratch.deallocate() }
        while let last = entries.last {
            // One step for a signal (DeferredSignals): never a directory left without its .pvdir,
            // and never one gone but still listed, where the handler, run when the step ends,
            // would stop at it (ENOENT) and leave every empty directory above it.
            let removed = DeferredSignals.during { () -> Bool in
                let gone = last.encoded.entry.withCString { name in
                    (last.encoded.companion ?? "").withCString { companion in
                        MadeDirectories.removeIfEmpty(last.parent.fd, name, companion, scratch: scratch)
                    }
                }
                if gone { dropLast() }
                return gone
            }
            guard removed else { break }
        }
        keepAll()
    }

    private func dropLast() {
        if mirrored { Records.pop() }
        entries.removeLast()
    }

    /// Bytes of the getdents64 buffer `removeIfEmpty` lists a directory with.
    static let scratchSize = 16384

    /// `.pvdir` as a C string, made before any handler can run (no allocation there).
    static let infoName: UnsafeMutablePointer<CChar> = {
        let bytes = Array(DirectoryInfo.fileName.utf8CString)
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
        p.initialize(from: bytes, count: bytes.count)
        return p
    }()

    /// Removes the directory `name` in `parentfd` if it holds nothing but its `.pvdir`, and
    /// then its long-name companion `companion` (empty for a short name), and syncs
    /// `parentfd`. Async-signal-safe:
    /// system calls only, `scratch` (`scratchSize` bytes) for the listing, no allocation.
    static func removeIfEmpty(_ parentfd: Int32, _ name: UnsafePointer<CChar>, _ companion: UnsafePointer<CChar>,
                              scratch: UnsafeMutableRawPointer) -> Bool {
        let fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return false }
        let empty = holdsOnlyInfo(fd, scratch: scratch)
        if empty { _ = unlinkat(fd, infoName, 0) }
        close(fd)
        guard empty, unlinkat(parentfd, name, AT_REMOVEDIR) == 0 else { return false }
        if companion[0] != 0 { _ = unlinkat(parentfd, companion, 0) }
        // Made durable like the mkdir it undoes (which synced this parent): otherwise a crash
        // could bring back the empty directory, or its companion without it.
        _ = fsync(parentfd)
        return true
    }

    /// Whether the open directory `fd` lists nothing but `.`, `..` and `.pvdir` (false when
    /// it cannot be listed). struct linux_dirent64: d_reclen at byte 16, d_name at 19.
    static func holdsOnlyInfo(_ fd: Int32, scratch: UnsafeMutableRawPointer) -> Bool {
        while true {
            let n = pv_getdents64(fd, scratch, UInt(scratchSize))
            if n == 0 { return true }
            guard n > 0 else { return false }
            var offset = 0
            while offset < n {
                let name = (scratch + offset + 19).assumingMemoryBound(to: CChar.self)
                guard isDotOrInfo(name) else { return false }
                offset += Int(scratch.loadUnaligned(fromByteOffset: offset + 16, as: UInt16.self))
            }
        }
    }

    /// `.`, `..` or `.pvdir`, compared byte by byte (a Swift string literal may allocate).
    static func isDotOrInfo(_ name: UnsafePointer<CChar>) -> Bool {
        let dot = CChar(UInt8(ascii: "."))
        if name[0] == dot && (name[1] == 0 || (name[1] == dot && name[2] == 0)) { return true }
        var i = 0
        while name[i] == infoName[i] {
            if name[i] == 0 { return true }
            i += 1
        }
        return false
    }

    /// The list as the signal handler reads it: fixed-size records (the parent's descriptor,
    /// the entry's name, its companion's name or an empty string) in a buffer whose address
    /// and record count are atomics. A record is written before the count that covers it is
    /// published; a buffer outgrown is kept, not freed (a handler on another thread may still
    /// be reading it). The parent's descriptor belongs to the listed `VaultEntry`, open for
    /// as long as the record is counted.
    enum Records {
        static let nameOffset = 4, companionOffset = 4 + 256, stride = 4 + 256 + 64
        static let owned = Atomic<Bool>(false)
        static let count = Atomic<Int>(0)
        static let base = Atomic<Int>(0)
        nonisolated(unsafe) static var capacity = 0
        nonisolated(unsafe) static var outgrown: [UnsafeMutableRawPointer] = []
        /// The handler's listing buffer.
        static let scratch = UnsafeMutableRawPointer.allocate(byteCount: scratchSize, alignment: 8)

        /// Initialises every static the handler reads, before a handler can run (lazy
        /// initialisation may allocate or lock).
        static func prepare() {
            _ = scratch
            _ = infoName
            _ = count.load(ordering: .relaxed)
            _ = base.load(ordering: .relaxed)
        }

        /// Makes the caller the one import mirrored; false if another one is.
        static func claim() -> Bool {
            prepare()
            return owned.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        }

        static func release() {
            count.store(0, ordering: .releasing)
            owned.store(false, ordering: .releasing)
        }

        static func push(_ entry: VaultEntry) {
            let i = count.load(ordering: .relaxed)
            if i == capacity { grow(keeping: i) }
            let record = UnsafeMutableRawPointer(bitPattern: base.load(ordering: .relaxed))! + i * stride
            record.storeBytes(of: entry.parent.fd, as: Int32.self)
            copy(entry.encoded.entry, to: record + nameOffset, capacity: companionOffset - nameOffset)
            copy(entry.encoded.companion ?? "", to: record + companionOffset, capacity: stride - companionOffset)
            count.store(i + 1, ordering: .releasing)
        }

        static func pop() {
            count.store(count.load(ordering: .relaxed) - 1, ordering: .releasing)
        }

        private static func copy(_ name: String, to p: UnsafeMutableRawPointer, capacity: Int) {
            let bytes = Array(name.utf8CString)
            precondition(bytes.count <= capacity, "store entry name too long")
            bytes.withUnsafeBytes { p.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        }

        private static func grow(keeping n: Int) {
            let bigger = max(16, capacity * 2)
            let new = UnsafeMutableRawPointer.allocate(byteCount: bigger * stride, alignment: 8)
            if let old = UnsafeMutableRawPointer(bitPattern: base.load(ordering: .relaxed)) {
                new.copyMemory(from: old, byteCount: n * stride)
                outgrown.append(old)
            }
            base.store(Int(bitPattern: new), ordering: .releasing)
            capacity = bigger
        }

        /// For the signal handler: removes the listed directories that hold nothing, deepest
        /// first, as `removeEmpty`; async-signal-safe. The list is emptied first, so that a
        /// second run of the handler does nothing.
        static func removeEmptyOnSignal() {
            let n = count.exchange(0, ordering: .acquiring)
            guard n > 0, let records = UnsafeMutableRawPointer(bitPattern: base.load(ordering: .acquiring)) else { return }
            var i = n
            while i > 0 {
                i -= 1
                let record = records + i * stride
                let name = (record + nameOffset).assumingMemoryBound(to: CChar.self)
                let companion = (record + companionOffset).assumingMemoryBound(to: CChar.self)
                guard removeIfEmpty(record.load(as: Int32.self), name, companion, scratch: scratch) else { return }
            }
        }
    }
}
