import Glibc
import CLinux
import PhotoVaultCrypto

/// Random-access plaintext I/O on one encrypted file (FORMAT.md, "File contents").
///
/// One instance per open file (the FUSE layer shares it between handles of an inode), with
/// its own read-write lock: reads run in parallel, writes and truncates are exclusive because
/// a partial chunk is read, modified and resealed. Each request costs one `pread` and/or one
/// `pwrite` of the whole sealed range, whatever the number of chunks.
/// Holes (FORMAT.md section 5): a gap of at least `minimumHole` chunks left by a write past
/// the end or a truncate up, and every chunk a punch or zero range covers, is a hole: nothing
/// is written there, and the file's `HoleMap` (a sealed companion in the tree's root) says
/// so. A chunk whose slot is all zeros reads as zeros only where that map names it; anywhere
/// else it fails authentication, so ciphertext zeroed or punched underneath reads as EIO,
/// never as zeros. Smaller gaps are sealed zeros, as in files of format version 1.
public final class ContentFile: @unchecked Sendable {
    public let fd: Int32
    public let layout: ChunkLayout
    let keyring: UserKeyring
    let classForNewHeader: ProtectionClass
    var rw = pthread_rwlock_t()
    private(set) public var header: FileHeader?
    var chunks: ChunkCipher?
    var fileKey: SecureBytes?
    /// Set when the file key was wiped by a lock: every later access fails with `.locked`.
    private(set) public var keyForgotten = false
    /// Best-effort plaintext path, for error messages and logs.
    public var displayPath: String
    /// Whether rewriting chunks in place can need free space here (copy-on-write
    /// filesystems): such rewrites are reserved first (`InPlaceOverwrite`). Asked on the
    /// first write (under the write lock), not on every open.
    private lazy var overwritesMayNeedSpace = InPlaceOverwrite.mayNeedSpace(fd)
    /// Where the hole map lives; nil: this file gets no holes (gaps are sealed zeros) and a
    /// version-2 file's zero chunks read as EIO.
    let holeStore: HoleMapStore?
    /// The file's holes, exact in memory.
    var holes = HoleMap()
    /// The companion still names chunks written since (removals are saved at sync, close
    /// and lock, not on every write that fills a hole).
    var holesUnsaved = false
    /// The companion on disk says "may name written chunks" (state 0): set before the first
    /// write into a hole after a save, so that a crash before the next save never leaves a
    /// map that calls data a hole (a reader then drops the chunks that hold data).
    var diskMapDirty = false
    /// The smallest gap past the end that becomes a hole rather than sealed zeros: a map
    /// change costs a durable companion write, and fsx-style small gaps are cheaper written.
    public static let minimumHole: UInt64 = 16

    /// Opens an existing file, unwrapping its key with the keyring. A 0-byte ciphertext file is
    /// an empty file whose header is written on the first write, with `classForNewHeader`.
    /// Takes ownership of `fd` (closed by `close()`); the fd must be open O_RDWR for writes.
    public init(fd: Int32, layout: ChunkLayout, keyring: UserKeyring, classForNewHeader: ProtectionClass = .default,
                displayPath: String = "", holeMaps: HoleMapStore? = nil) throws {
        self.fd = fd
        self.holeStore = holeMaps
        self.layout = layout
        self.keyring = keyring
        self.classForNewHeader = classForNewHeader
        self.displayPath = displayPath
        pthread_rwlock_init(&rw, nil)
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw StoreError.posix("fstat") }
        if st.st_size > 0 {
            var bytes = [UInt8](repeating: 0, count: FileHeader.size)
            let n = try bytes.withUnsafeMutableBytes { try FileIO.readFully(fd, $0.baseAddress!, FileHeader.size, offset: 0) }
            guard n == FileHeader.size else { throw StoreError.integrity(path: displayPath, detail: "header truncated") }
            do {
                let (h, key) = try FileHeader.decode(bytes, keyring: keyring)
                guard h.cipher == layout.cipher else { throw StoreError.integrity(path: displayPath, detail: "header cipher differs from the store's") }
                try install(h, key)
                if h.version >= FileHeader.sparseVersion { try loadHoles(cipherSize: UInt64(st.st_size)) }
            } catch StoreError.integrity(_, let d) {
                throw StoreError.integrity(path: displayPath, detail: d)
            } catch StoreError.unknownVersion(let f, let s) where !displayPath.isEmpty {
                throw StoreError.unknownVersionOf(path: displayPath, found: f, supported: s)
            }
        }
    }

    /// Creates the header of a new, empty file now (O_CREAT path).
    public static func create(fd: Int32, layout: ChunkLayout, keyring: UserKeyring, protectionClass: ProtectionClass,
                              displayPath: String = "", holeMaps: HoleMapStore? = nil) throws -> ContentFile {
        let f = try ContentFile(fd: fd, layout: layout, keyring: keyring, classForNewHeader: protectionClass,
                                displayPath: displayPath, holeMaps: holeMaps)
        f.lockWrite(); defer { f.unlock() }
        if f.header == nil { try f.writeNewHeader(protectionClass) }
        return f
    }

    deinit {
        fileKey?.wipe()
        chunks?.wipe()
        pthread_rwlock_destroy(&rw)
    }

    /// A header rewritten in place (`ensureSparseVersion`).
    func replaceHeader(_ h: FileHeader) { header = h }

    private func install(_ h: FileHeader, _ key: SecureBytes) throws {
        let c: ChunkCipher
        do { c = try ChunkCipher(cipher: h.cipher, key: key, fileID: h.fileID) } catch {
            key.wipe()
            throw StoreError.keyMemoryNotLocked
        }
        header = h
        fileKey = key
        chunks = c
    }

    func writeNewHeader(_ c: ProtectionClass) throws {
        let h = FileHeader(protectionClass: c, cipher: layout.cipher)
        let key: SecureBytes
        do { key = try SecureBytes(lockedRandomCount: 32) } catch { throw StoreError.keyMemoryNotLocked }
        let bytes: [UInt8]
        do { bytes = try h.encode(fileKey: key, keyring: keyring) } catch {
            key.wipe()
            throw error as? StoreError == .keyMemoryNotLocked ? StoreError.keyMemoryNotLocked : StoreError.locked
        }
        do { try FileIO.writeAll(fd, bytes, offset: 0) } catch { key.wipe(); throw error }
        try install(h, key)
    }

    @inline(__always) func lockRead() { pthread_rwlock_rdlock(&rw) }
    @inline(__always) func lockWrite() { pthread_rwlock_wrlock(&rw) }
    @inline(__always) func unlock() { pthread_rwlock_unlock(&rw) }

    public var protectionClass: ProtectionClass { header?.protectionClass ?? classForNewHeader }

    /// Closes the fd and wipes the key (the hole map's pending removals saved first).
    public func close() {
        lockWrite(); defer { unlock() }
        try? flushHolesLocked(closing: true)
        forgetKeyLocked()
        _ = Glibc.close(fd)
    }

    /// Device lock for this file's class: the key is zeroed and every later read or write
    /// fails with `.locked` (EACCES), open handles included.
    public func forgetKey() {
        lockWrite(); defer { unlock() }
        try? flushHolesLocked()
        forgetKeyLocked()
        keyForgotten = true
    }

    private func forgetKeyLocked() {
        chunks?.wipe()
        fileKey?.wipe()
        chunks = nil
        fileKey = nil
    }

    func ciphertextSize() throws -> UInt64 {
        UInt64(try statLocked().st_size)
    }

    func statLocked() throws -> stat {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw StoreError.posix("fstat") }
        return st
    }

    public func size() throws -> UInt64 {
        lockRead(); defer { unlock() }
        return try plaintextSizeLocked()
    }

    func plaintextSizeLocked() throws -> UInt64 {
        try plaintextSize(of: statLocked())
    }

    func plaintextSize(of st: stat) throws -> UInt64 {
        do { return try layout.plaintextSize(ciphertextSize: UInt64(st.st_size)) }
        catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: displayPath, detail: d) }
    }

    func cipherForUse() throws -> ChunkCipher {
        guard !keyForgotten, let c = chunks else { throw StoreError.locked }
        return c
    }

    // MARK: read

    /// Reads up to `count` bytes at `offset`; returns fewer only at end of file.
    public func read(into out: UnsafeMutableRawPointer, count: Int, offset: UInt64) throws -> Int {
        lockRead(); defer { unlock() }
        let size = try plaintextSizeLocked()
        if offset >= size || count == 0 { return 0 }
        if header == nil { return 0 }
        let cipher = try cipherForUse()
        let end = min(size, offset + UInt64(count))
        let cs = UInt64(layout.chunkSize)
        let first = offset / cs
        let last = (end - 1) / cs
        let sealedStart = layout.sealedOffset(ofChunk: first)
        let lastLen = Int(min(cs, size - last * cs))
        let sealedLen = Int(last - first) * layout.sealedChunkSize + lastLen + layout.overhead
        let buf = UnsafeMutableRawPointer.allocate(byteCount: sealedLen, alignment: 16)
        defer { buf.deallocate() }
        let got = try FileIO.readFully(fd, buf, sealedLen, offset: Int64(sealedStart))
        guard got == sealedLen else { throw StoreError.integrity(path: displayPath, detail: "file shorter than its size") }
        var scratch: UnsafeMutableRawPointer? = nil
        defer { if let s = scratch { secureZero(UnsafeMutableRawBufferPointer(start: s, count: layout.chunkSize)); s.deallocate() } }
        // Edge chunks (partly requested) go through a scratch buffer; whole chunks are opened
        // straight into the caller's buffer. One thread per request: the kernel keeps several
        // requests in flight, and splitting one across cores measured slower (more CPU, less
        // throughput: hand-off costs more than 4 KiB of AES-GCM).
        var wholeFirst = first, wholeLast = last
        var failed: UInt64? = nil
        func outOffset(_ i: UInt64) -> Int { Int(max(offset, i * cs) - offset) }
        for k in 0..<(first == last ? 1 : 2) {   // the edge chunks, with no array per request
            let i = k == 0 ? first : last
            let chunkStart = i * cs
            let plainLen = Int(min(cs, size - chunkStart))
            let from = max(offset, chunkStart)
            let to = min(end, chunkStart + UInt64(plainLen))
            guard from != chunkStart || to != chunkStart + UInt64(plainLen) else { continue }
            if scratch == nil { scratch = UnsafeMutableRawPointer.allocate(byteCount: layout.chunkSize, alignment: 16) }
            guard openChunk(cipher, i, buf + Int(i - first) * layout.sealedChunkSize, plainLen + layout.overhead, into: scratch!)
            else { failed = i; break }
            (out + outOffset(i)).copyMemory(from: scratch! + Int(from - chunkStart), byteCount: Int(to - from))
            if i == first { wholeFirst = first + 1 }
            if i == last { wholeLast = last &- 1 }
        }
        if failed == nil && wholeFirst <= wholeLast && wholeLast != UInt64.max {
            for i in wholeFirst...wholeLast {
                let plainLen = Int(min(cs, size - i * cs))
                guard openChunk(cipher, i, buf + Int(i - first) * layout.sealedChunkSize, plainLen + layout.overhead,
                                into: out + outOffset(i)) else { failed = i; break }
            }
        }
        let produced = Int(end - offset)
        if let i = failed {
            secureZero(UnsafeMutableRawBufferPointer(start: out, count: produced))
            throw StoreError.integrity(path: displayPath, detail: "chunk \(i) failed authentication")
        }
        return produced
    }

    /// How many chunks from `first` on lie wholly inside a hole of the ciphertext file, found
    /// with `lseek(SEEK_DATA)` instead of reading them. Nothing was ever written there, so
    /// they read as zeros, and zeros never authenticate: each of them is damaged. 0 when
    /// `first` is not in a hole, or when the file system cannot tell (it then calls the whole
    /// file data). fsck skips them this way, so a sparse ciphertext of terabytes of holes
    /// (a valid header and a `truncate -s 10T`) is checked at once, not read. Chunks the
    /// hole map names are not counted (`chunksInMappedHole`).
    public func chunksInHole(from first: UInt64) -> UInt64 {
        lockRead(); defer { unlock() }
        if holes.contains(first) { return 0 }
        let beforeMapped = holes.firstHole(startingAtOrAfter: first).map { $0.lowerBound - first } ?? UInt64.max
        guard let cipherSize = try? ciphertextSize(), let size = try? plaintextSizeLocked() else { return 0 }
        let cs = UInt64(layout.chunkSize)
        let total = (size + cs - 1) / cs
        guard first < total else { return 0 }
        let start = layout.sealedOffset(ofChunk: first)
        let data = lseek(fd, off_t(start), SEEK_DATA_VALUE)
        let holeEnd: UInt64
        if data >= 0 { holeEnd = UInt64(data) }
        else if errno == ENXIO { holeEnd = cipherSize }   // no data from `start` to the end
        else { return 0 }
        guard holeEnd > start else { return 0 }
        // Every chunk but the last is sealedChunkSize long; the last ends at the file's end.
        if holeEnd >= cipherSize { return min(total - first, beforeMapped) }
        return min((holeEnd - start) / UInt64(layout.sealedChunkSize), total - first, beforeMapped)
    }

    // MARK: write

    /// Writes `count` bytes at `offset`. Writing past the end fills the gap with sealed zeros.
    /// Returns fewer than `count` when a failure (ENOSPC) came after the first bytes were
    /// written whole, as write(2) does: the caller's next write gets the error.
    /// `dropsSetID`: the caller lacks CAP_FSETID, so the file's setuid/setgid bits go as on a
    /// local file system (`SetIDBits`; the kernel says so in the request, FUSE_HANDLE_KILLPRIV_V2).
    public func write(from data: UnsafeRawPointer, count: Int, offset: UInt64, dropsSetID: Bool = false) throws -> Int {
        if count == 0 { return 0 }
        guard offset <= ChunkLayout.maximumPlaintextSize, UInt64(count) <= ChunkLayout.maximumPlaintextSize - offset else {
            throw tooLarge()
        }
        lockWrite(); defer { unlock() }
        let before = try headerlessBefore()
        if before != nil { try writeNewHeader(classForNewHeader) }
        var through = offset
        do { try writeLocked(data: data, count: count, offset: offset, dropsSetID: dropsSetID, holesAllowed: true, through: &through) }
        catch where through > offset { return Int(min(through - offset, UInt64(count))) }
        catch { undoNewHeader(before); throw error }
        return count
    }

    /// fallocate(2) up to plaintext byte `end`. Every byte below the size is stored already
    /// (holes are sealed zeros), so only a range past the end does anything: it extends the
    /// file with sealed zeros as a truncate up does, or with `keepSize` reserves the space its
    /// ciphertext would take underneath (FALLOC_FL_KEEP_SIZE) and leaves the size alone.
    public func allocate(upTo end: UInt64, keepSize: Bool) throws {
        guard end <= ChunkLayout.maximumPlaintextSize else { throw tooLarge() }
        lockWrite(); defer { unlock() }
        let st = try statLocked()
        let size = try plaintextSize(of: st)
        guard end > size else { return }
        if !keepSize {
            let before = try headerlessBefore()
            if before != nil { try writeNewHeader(classForNewHeader) }
            var through = size
            do { return try writeLocked(data: nil, count: 0, offset: end, through: &through) }
            catch { undoNewHeader(before); throw error }
        }
        let from = header == nil ? 0 : layout.ciphertextSize(plaintextSize: size)
        let to = layout.ciphertextSize(plaintextSize: end)
        guard pv_reserve(fd, Int64(from), Int64(to - from)) == 0 else {
            let e = errno
            // A reservation that ran out of space may have kept the blocks it got (ext4):
            // they are given back, so a failed fallocate costs the store nothing.
            if e == ENOSPC || e == EDQUOT { cutBack(to: UInt64(st.st_size), times: st) }
            throw reservationError(e)
        }
    }

    /// Truncates or extends to `newSize` plaintext bytes. `dropsSetID` as for `write`.
    public func truncate(to newSize: UInt64, dropsSetID: Bool = false) throws {
        guard newSize <= ChunkLayout.maximumPlaintextSize else { throw tooLarge() }
        lockWrite(); defer { unlock() }
        if dropsSetID { try SetIDBits.drop(on: fd, try statLocked()) }
        let before = try headerlessBefore()
        if before != nil {
            if newSize == 0 { return try touchModified() }
            try writeNewHeader(classForNewHeader)
        }
        let size = try plaintextSizeLocked()
        if newSize == size { return try touchModified() }
        if newSize > size {
            var through = size
            do { try writeLocked(data: nil, count: 0, offset: newSize, holesAllowed: true, through: &through) }
            catch { undoNewHeader(before); throw error }
            return
        }
        let cs = UInt64(layout.chunkSize)
        let rem = newSize % cs
        // The map loses the chunks cut off, and the chunk resealed shorter (now data), saved
        // at once: a later growth must not find them still named holes after a crash.
        // Only once the cut is made: a truncate that failed keeps its holes.
        var cut = false
        defer { if cut, holes.cut(toChunks: newSize / cs) { try? saveHoles() } }
        if rem == 0 {
            guard ftruncate(fd, Int(layout.ciphertextSize(plaintextSize: newSize))) == 0 else { throw StoreError.posix("ftruncate") }
            cut = true
            return
        }
        // Reseal the chunk that becomes the last one shorter in place, then cut to the final
        // length. A crash between those two leaves the chunk failing authentication (EIO),
        // never wrong bytes: contents are not crash-atomic (FORMAT.md section 9). A failure
        // (a full copy-on-write filesystem) leaves the file as it was: nothing is cut before
        // the chunk is written, and the chunk's old bytes are put back if the cut fails.
        let cipher = try cipherForUse()
        let idx = newSize / cs
        let oldLen = Int(min(cs, size - idx * cs))
        let sealed = UnsafeMutableRawPointer.allocate(byteCount: layout.sealedChunkSize, alignment: 16)
        let plain = UnsafeMutableRawPointer.allocate(byteCount: layout.chunkSize, alignment: 16)
        defer { secureZero(UnsafeMutableRawBufferPointer(start: plain, count: layout.chunkSize)); plain.deallocate(); sealed.deallocate() }
        let n = try FileIO.readFully(fd, sealed, oldLen + layout.overhead, offset: Int64(layout.sealedOffset(ofChunk: idx)))
        guard n == oldLen + layout.overhead else { throw StoreError.integrity(path: displayPath, detail: "file shorter than its size") }
        guard openChunk(cipher, idx, sealed, n, into: plain) else {
            throw StoreError.integrity(path: displayPath, detail: "chunk \(idx) failed authentication")
        }
        let nonces = NonceSequence(cipher: layout.cipher)
        withUnsafeTemporaryAllocation(byteCount: 32, alignment: 8) { nb in
            nonces.nonce(0, into: nb.baseAddress!)
            cipher.seal(index: idx, plaintext: plain, count: Int(rem), nonce: nb.baseAddress!, into: sealed)
        }
        try writeInPlace(sealed, Int(rem) + layout.overhead, firstChunk: idx, oldCipherSize: layout.ciphertextSize(plaintextSize: size),
                         keepOld: true) {
            guard ftruncate(fd, Int(layout.ciphertextSize(plaintextSize: newSize))) == 0 else { throw StoreError.posix("ftruncate") }
        }
        cut = true
    }

    /// Writes sealed chunks from `firstChunk` on. The part over bytes the file holds (below
    /// `oldCipherSize`) is reserved first where that needs space (`InPlaceOverwrite`), and
    /// its old bytes are kept and put back if the write, or `then`, fails; `keepOld` keeps
    /// them on other filesystems too.
    private func writeInPlace(_ buf: UnsafeRawPointer, _ count: Int, firstChunk: UInt64, oldCipherSize: UInt64,
                              keepOld: Bool = false, then: () throws -> Void = {}) throws {
        let at = layout.sealedOffset(ofChunk: firstChunk)
        var kept: SealedBytesBackup? = nil
        if at < oldCipherSize && (overwritesMayNeedSpace || keepOld) {
            kept = try InPlaceOverwrite.keep(fd, firstChunk: firstChunk, offset: at, count: Int(min(UInt64(count), oldCipherSize - at)),
                                             reserve: overwritesMayNeedSpace, path: displayPath)
        }
        defer { kept?.deallocate() }
        do {
            try FileIO.writeAll(fd, buf, count, offset: Int64(at))
            try then()
        } catch {
            try? kept?.restore(to: fd)
            throw error
        }
    }

    /// A truncate that keeps the size still marks the file modified, as on Linux (`: > f` on an
    /// empty file is how make rules touch their stamps).
    private func touchModified() throws {
        let times = [timespec(tv_sec: 0, tv_nsec: Int(UTIME_OMIT_VALUE)), timespec(tv_sec: 0, tv_nsec: Int(UTIME_NOW_VALUE))]
        guard futimens(fd, times) == 0 else { throw StoreError.posix("futimens") }
    }

    /// EFBIG, before anything is written: the ciphertext of a larger file would not fit an off_t.
    func tooLarge() -> StoreError {
        .io(errno: EFBIG, context: "\(displayPath): larger than \(ChunkLayout.maximumPlaintextSize) bytes, the largest file size")
    }

    /// The error of a reservation (`pv_reserve`) that failed with `e`.
    func reservationError(_ e: Int32) -> StoreError {
        if e == EFBIG {
            return .io(errno: EFBIG, context: "\(displayPath): larger than the store's file system holds in one file")
        }
        return e == ENOSPC || e == EDQUOT ? .noSpace : .io(errno: e, context: "\(displayPath): fallocate")
    }

    /// Reserves the ciphertext bytes `[from, to)` that a growth is about to write, so that a
    /// size the store's file system cannot hold fails at once, before a byte is written:
    /// fallocate(2) compares the new end with the file system's own largest file size
    /// (`s_maxbytes`: 16 TiB on ext4 with 4 KiB blocks, 8 EiB on tmpfs) before anything else,
    /// on file systems without fallocate too (EFBIG), and reserves the space or fails with
    /// ENOSPC (tmpfs, ext4, xfs, btrfs). The file is left as it was (`cutBack` gives back
    /// what a reservation that ran out of space kept). Where nothing can be reserved
    /// (EOPNOTSUPP: ext2/3, FAT) the growth goes ahead, and a failure is undone by the caller.
    /// `end`: the ciphertext's size now (`from`, unless the range starts past a hole); a
    /// failure cuts back to it, giving back what an earlier reservation of the same growth kept.
    private func reserveGrowth(from: UInt64, to: UInt64, times st: stat, end: UInt64? = nil) throws {
        guard to > from, pv_reserve(fd, Int64(from), Int64(to - from)) != 0 else { return }
        let e = errno
        switch e {
        case EFBIG:
            if let end { cutBack(to: end, times: st) }
            throw reservationError(e)
        case ENOSPC, EDQUOT:
            cutBack(to: end ?? from, times: st)
            throw reservationError(e)
        default:
            return
        }
    }

    /// Cuts the ciphertext back to `cipherSize` (its size before a growth that failed; blocks
    /// reserved past it go too) and puts back the modification and access times `st` held:
    /// a failed size change leaves the file as it was, times included (only the change time
    /// moves). Best effort: the operation's own error is the one reported.
    private func cutBack(to cipherSize: UInt64, times st: stat) {
        _ = ftruncate(fd, Int(cipherSize))
        restoreTimes(st)
    }

    func restoreTimes(_ st: stat) {
        _ = futimens(fd, [st.st_atim, st.st_mtim])
    }

    /// For an operation that writes a header first (the file has none yet): the file's state
    /// before it, so that `undoNewHeader` can put it back; nil when the file has a header.
    func headerlessBefore() throws -> stat? {
        header == nil && !keyForgotten ? try statLocked() : nil
    }

    /// A size change that wrote the file's header (`headerlessBefore`) and then failed as a
    /// whole takes the header back too: the file is again the 0-byte one it was, whose class
    /// is still decided by its first write.
    func undoNewHeader(_ before: stat?) {
        guard let before, header != nil else { return }
        cutBack(to: 0, times: before)
        forgetKeyLocked()
        header = nil
    }

    /// Maximum chunks sealed per pwrite when filling large holes (bounds memory use).
    private static let batchChunks: UInt64 = 64

    /// Core write: the new plaintext range [offset, offset+count) (`data` may be nil with
    /// count 0 to extend with zeros), plus zeros for any gap after the current end.
    /// `through`: the plaintext end of the batches written whole, when it fails.
    /// `holesAllowed`: a gap of `minimumHole` chunks or more past the old end becomes a hole
    /// (a write past the end, a truncate up; not fallocate, which promises the space).
    func writeLocked(data: UnsafeRawPointer?, count: Int, offset: UInt64, dropsSetID: Bool = false,
                             holesAllowed: Bool = false, through: inout UInt64) throws {
        let cipher = try cipherForUse()
        let st = try statLocked()
        if dropsSetID { try SetIDBits.drop(on: fd, st) }   // before the data, as Linux does
        let size = try plaintextSize(of: st)
        let cs = UInt64(layout.chunkSize)
        let start = min(offset, size)                 // first byte whose chunk changes
        let writeEnd = offset + UInt64(count)
        let newSize = max(size, writeEnd)
        let end = max(writeEnd, min(size, writeEnd))  // last byte (exclusive) whose chunk changes
        if end <= start { return }
        let first = start / cs
        let last = (end - 1) / cs
        // A write that grows the file can meet a full disk halfway. Three guards keep what
        // was there: (1) when it rewrites the old partial last chunk in place, the growth is
        // reserved first, so ENOSPC comes before any old byte is overwritten; (2) a failure
        // cuts the file back to the end of the last batch written whole (a chunk boundary),
        // never leaving a half-written chunk at the end; (3) where (1) cannot reserve (no
        // fallocate: ext2/3, NFS, FUSE stores) and the pwrite stops short, the old last
        // chunk, kept as it was on disk, is written back after the cut.
        let oldCipherSize = layout.ciphertextSize(plaintextSize: size)
        let newCipherSize = layout.ciphertextSize(plaintextSize: newSize)
        let growsPartialLast = newCipherSize > oldCipherSize && size % cs != 0
        // The chunks of a gap past the old end that become a hole: nothing is written there.
        let gap = holesAllowed ? holeGap(size: size, offset: offset, newSize: newSize, extendsOnly: data == nil) : nil
        // A growth that writes zeros (a truncate up, fallocate, a write past the end) or
        // rewrites the partial last chunk is reserved first (`reserveGrowth`): EFBIG or
        // ENOSPC at once, nothing written. A plain append of the caller's data is not (one
        // fallocate per sequential write would cost ext4 its delayed allocation); the kernel
        // stops it at the file system's limit, and what failed is undone below. A hole is
        // never reserved (that would allocate it): only the chunks written around it are, and
        // a truncate that ends in a hole meets the file system's limit at its ftruncate.
        if newCipherSize > oldCipherSize && (growsPartialLast || data == nil || offset > size) {
            if let gap {
                // The far end first: EFBIG before anything is reserved (a reservation moves
                // the modification time on ext4).
                if gap.upperBound <= last {
                    try reserveGrowth(from: layout.sealedOffset(ofChunk: gap.upperBound), to: newCipherSize, times: st,
                                      end: oldCipherSize)
                }
                try reserveGrowth(from: oldCipherSize, to: layout.sealedOffset(ofChunk: gap.lowerBound), times: st,
                                  end: oldCipherSize)
            } else {
                try reserveGrowth(from: oldCipherSize, to: newCipherSize, times: st)
            }
        }
        // The map before this write, put back if it fails. A gap's holes are saved before
        // the write (they must be known before the file has them); chunks this write fills
        // leave the map in memory, the companion first marked as possibly stale.
        let holesBefore = holes
        let fills = !holes.isEmpty && holes.overlaps(first..<(last + 1))
        if let gap {
            try addHoles(gap, fillingOthers: fills)
        } else if fills {
            try markFillingHoles()
        }
        var backup = growsPartialLast
            ? SealedBytesBackup(index: size / cs, offset: layout.sealedOffset(ofChunk: size / cs),
                              count: Int(size % cs) + layout.overhead)
            : nil
        defer { backup?.deallocate() }
        var keptSize = oldCipherSize
        do {
            if let gap {
                // The old partial last chunk (now whole), then the chunks after the gap.
                if first < gap.lowerBound {
                    try writeBatches(cipher: cipher, data: data, count: count, offset: offset, size: size, newSize: newSize,
                                     first: first, last: gap.lowerBound - 1, backup: &backup, keptSize: &keptSize, through: &through)
                }
                if gap.upperBound <= last {
                    try writeBatches(cipher: cipher, data: data, count: count, offset: offset, size: size, newSize: newSize,
                                     first: gap.upperBound, last: last, backup: &backup, keptSize: &keptSize, through: &through)
                } else {
                    guard ftruncate(fd, Int(newCipherSize)) == 0 else {
                        let e = errno
                        throw e == EFBIG ? reservationError(e) : StoreError.posix("ftruncate")
                    }
                }
                if fills {
                    let a = holes.remove(first..<gap.lowerBound), b = holes.remove(gap.upperBound..<(last + 1))
                    if a || b { holesUnsaved = true }
                }
            } else {
                try writeBatches(cipher: cipher, data: data, count: count, offset: offset, size: size, newSize: newSize,
                                 first: first, last: last, backup: &backup, keptSize: &keptSize, through: &through)
                if holes.remove(first..<(last + 1)) { holesUnsaved = true }
            }
        } catch {
            if data != nil && through > offset {
                // The chunks written whole before the failure hold data now (not the new gap).
                let written = (gap?.upperBound ?? first)..<((through + cs - 1) / cs)
                let a = gap.map { holes.remove(first..<$0.lowerBound) } ?? false
                if holes.remove(written) || a { holesUnsaved = true }
            } else if holes != holesBefore {
                holes = holesBefore
                try? saveHoles()
            }
            // A write that stored some of the caller's bytes whole returns that much (`write`),
            // as write(2) does, and keeps it. Anything else that failed (a truncate up,
            // fallocate, a write that got no further than the zeros before its data) is undone
            // whole: the file is cut back to its old end and its old last chunk put back, so
            // it keeps its size, contents and times. If putting the chunk back fails too, the
            // operation's own error is still the one to report (ENOSPC); fsck then names the
            // damaged chunk.
            let keepsPart = data != nil && through > offset
            if newCipherSize > oldCipherSize { _ = ftruncate(fd, Int(keepsPart ? keptSize : oldCipherSize)) }
            if !keepsPart || keptSize == oldCipherSize { try? backup?.restore(to: fd) }
            if !keepsPart { restoreTimes(st) }
            throw error
        }
    }

    /// The sealed chunks `firstChunk...last`, up to `batchChunks` per pwrite. `keptSize` and
    /// `through`: the ciphertext and plaintext ends of the last batch written whole. `backup`, when set, is loaded with the
    /// old partial last chunk before the batch that overwrites it (from the read the chunk
    /// needs anyway when the write covers it in part: no extra syscall then).
    private func writeBatches(cipher: ChunkCipher, data: UnsafeRawPointer?, count: Int, offset: UInt64, size: UInt64,
                              newSize: UInt64, first firstChunk: UInt64, last: UInt64, backup: inout SealedBytesBackup?,
                              keptSize: inout UInt64, through: inout UInt64) throws {
        let cs = UInt64(layout.chunkSize)
        let writeEnd = offset + UInt64(count)
        var first = firstChunk
        let plain = UnsafeMutableRawPointer.allocate(byteCount: layout.chunkSize, alignment: 16)
        defer { secureZero(UnsafeMutableRawBufferPointer(start: plain, count: layout.chunkSize)); plain.deallocate() }
        let oldSealed = UnsafeMutableRawPointer.allocate(byteCount: layout.sealedChunkSize, alignment: 16)
        defer { oldSealed.deallocate() }
        while first <= last {
            let batchLast = min(last, first + ContentFile.batchChunks - 1)
            let nChunks = Int(batchLast - first + 1)
            let lastPlain = Int(min(cs, newSize - batchLast * cs))
            let outLen = (nChunks - 1) * layout.sealedChunkSize + lastPlain + layout.overhead
            let out = UnsafeMutableRawPointer.allocate(byteCount: outLen, alignment: 16)
            defer { out.deallocate() }
            let nonces = NonceSequence(cipher: layout.cipher)
            var direct: [UInt64] = []
            var i = first
            try withUnsafeTemporaryAllocation(byteCount: 32, alignment: 8) { nb in
                while i <= batchLast {
                    let cStart = i * cs
                    let cNewLen = Int(min(cs, newSize - cStart))
                    let cOldLen = size > cStart ? Int(min(cs, size - cStart)) : 0
                    // The part of this chunk covered by the caller's data.
                    let dFrom = max(offset, cStart)
                    let dTo = min(writeEnd, cStart + UInt64(cNewLen))
                    let covered = dTo > dFrom ? Int(dTo - dFrom) : 0
                    let fullyCovered = covered == cNewLen
                    let src: UnsafeRawPointer
                    if fullyCovered, let d = data {
                        src = UnsafeRawPointer(d + Int(dFrom - offset))
                    } else {
                        // Start from the old contents (if any), zero the rest, lay the new data over.
                        if cOldLen > 0 {
                            let sealed: UnsafeMutableRawPointer, n: Int
                            if backup?.index == i {
                                guard try backup!.load(from: fd) else { throw StoreError.integrity(path: displayPath, detail: "file shorter than its size") }
                                (sealed, n) = (backup!.bytes, backup!.count)
                            } else {
                                (sealed, n) = (oldSealed, try FileIO.readFully(fd, oldSealed, cOldLen + layout.overhead, offset: Int64(layout.sealedOffset(ofChunk: i))))
                            }
                            guard n == cOldLen + layout.overhead else { throw StoreError.integrity(path: displayPath, detail: "file shorter than its size") }
                            guard openChunk(cipher, i, sealed, n, into: plain) else {
                                throw StoreError.integrity(path: displayPath, detail: "chunk \(i) failed authentication")
                            }
                        }
                        if cNewLen > cOldLen { (plain + cOldLen).initializeMemory(as: UInt8.self, repeating: 0, count: cNewLen - cOldLen) }
                        if covered > 0, let d = data {
                            (plain + Int(dFrom - cStart)).copyMemory(from: d + Int(dFrom - offset), byteCount: covered)
                        }
                        src = UnsafeRawPointer(plain)
                    }
                    if src == UnsafeRawPointer(plain) {
                        // Sealed now: `plain` is reused by the next partial chunk.
                        nonces.nonce(Int(i - first), into: nb.baseAddress!)
                        cipher.seal(index: i, plaintext: src, count: cNewLen, nonce: nb.baseAddress!,
                                    into: out + Int(i - first) * layout.sealedChunkSize)
                    } else {
                        direct.append(i)
                    }
                    i += 1
                }
            }
            // Chunks wholly covered by the caller's data are sealed straight from it.
            if let d = data {
                withUnsafeTemporaryAllocation(byteCount: 32, alignment: 8) { nb in
                    for i in direct {
                        let cStart = i * cs
                        nonces.nonce(Int(i - first), into: nb.baseAddress!)
                        cipher.seal(index: i, plaintext: UnsafeRawPointer(d + Int(cStart - offset)),
                                    count: Int(min(cs, newSize - cStart)), nonce: nb.baseAddress!,
                                    into: out + Int(i - first) * layout.sealedChunkSize)
                    }
                }
            }
            if let b = backup, (first...batchLast).contains(b.index), !(try backup!.load(from: fd)) {
                throw StoreError.integrity(path: displayPath, detail: "file shorter than its size")
            }
            try writeInPlace(out, outLen, firstChunk: first, oldCipherSize: layout.ciphertextSize(plaintextSize: size))
            keptSize = max(keptSize, layout.sealedOffset(ofChunk: first) + UInt64(outLen))
            through = min(newSize, (batchLast + 1) * cs)
            first = batchLast + 1
        }
    }

    // MARK: protection class

    /// Rewraps the file key under another class (no content is re-encrypted) and rewrites the
    /// header in place with one 128-byte write at offset 0 followed by fsync (FORMAT.md,
    /// "Crash safety"). A failed fsync (EIO, ENOSPC) is thrown, for a file without a header
    /// yet too: the class change is then not known to be durable, but the header written is
    /// the one kept in memory, so the class reported matches what the file holds.
    public func setProtectionClass(_ c: ProtectionClass) throws {
        lockWrite(); defer { unlock() }
        guard !keyForgotten else { throw StoreError.locked }
        guard var h = header, let key = fileKey else {
            // Header not written yet: write it now with the requested class.
            try writeNewHeader(c)
            guard fsync(fd) == 0 else { throw StoreError.posix("fsync") }
            return
        }
        if h.protectionClass == c { return }
        h.protectionClass = c
        let bytes = try h.encode(fileKey: key, keyring: keyring)
        try FileIO.writeAll(fd, bytes, offset: 0)
        // The new header is in the file once the write returned: a failed fsync only means
        // it is not known to be durable. Keep memory as the file says (a later read of the
        // header, offline or after a remount, sees the new class), then report the failure.
        header = h
        guard fsync(fd) == 0 else { throw StoreError.posix("fsync") }
    }

    /// fsync, after saving the hole map's pending removals (an fsync promises the file as
    /// it is, holes included).
    public func sync() throws {
        lockWrite(); defer { unlock() }
        try flushHolesLocked()
        guard fsync(fd) == 0 else { throw StoreError.posix("fsync") }
    }
}
