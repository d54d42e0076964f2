import Glibc
import CLinux
import PhotoVaultCrypto

/// Holes in an encrypted file (FORMAT.md section 5, "Holes"): the map's upkeep, punching and
/// zeroing ranges, and `lseek`'s data and hole searches. Every method here runs under the
/// file's lock, as its caller in `ContentFile` holds it, unless it takes the lock itself.
extension ContentFile {
    // MARK: the map

    /// The file's holes as this instance knows them (exact).
    public var holeMap: HoleMap {
        lockRead(); defer { unlock() }
        return holes
    }

    /// Opens a version-2 file's map. A missing companion is an empty map (its zero chunks
    /// then fail as damaged); one that fails authentication fails the open (EIO). A map
    /// saved as possibly stale (a crash while holes were being filled) loses every chunk
    /// whose slot holds anything but zeros, found with SEEK_DATA without reading real holes.
    func loadHoles(cipherSize: UInt64) throws {
        guard let store = holeStore, let h = header, let key = fileKey else { return }
        guard let (map, clean) = try HoleMapFile.read(rootFD: store.rootFD, fileID: h.fileID, fileKey: key) else { return }
        holes = map
        let size = try layout.plaintextSize(ciphertextSize: cipherSize)
        let cs = UInt64(layout.chunkSize)
        holes.cut(toChunks: (size + cs - 1) / cs)
        if !clean {
            pruneWrittenChunks(cipherSize: cipherSize)
            diskMapDirty = true
            holesUnsaved = true
        }
    }

    /// Drops from the map the chunks whose slots hold data (see `loadHoles`).
    private func pruneWrittenChunks(cipherSize: UInt64) {
        let slot = UnsafeMutableRawPointer.allocate(byteCount: layout.sealedChunkSize, alignment: 16)
        defer { slot.deallocate() }
        for r in holes.ranges {
            var c = r.lowerBound
            while c < r.upperBound {
                let at = layout.sealedOffset(ofChunk: c)
                guard at < cipherSize else { break }
                let data = lseek(fd, off_t(at), SEEK_DATA_VALUE)
                guard data >= 0 else { break }   // ENXIO: nothing but hole up to the end
                let d = UInt64(data)
                // Data further on: skip to the chunk whose slot holds it (a slot that holds
                // data only after its start is read as it is).
                let dc = (d - UInt64(ChunkLayout.headerSize)) / UInt64(layout.sealedChunkSize)
                if dc > c { c = dc; continue }
                let n = Int(min(UInt64(layout.sealedChunkSize), cipherSize - at))
                if let got = try? FileIO.readFully(fd, slot, n, offset: Int64(at)), got == n, !Self.isAllZero(slot, n) {
                    holes.remove(c..<(c + 1))
                }
                c += 1
            }
        }
    }

    /// Writes the map as it is in memory, exact ("clean"); an empty map removes the companion.
    func saveHoles() throws {
        guard let store = holeStore, let h = header, let key = fileKey else { return }
        store.noteSaved()
        try HoleMapFile.write(holes, clean: true, rootFD: store.rootFD, fileID: h.fileID, fileKey: key)
        diskMapDirty = false
        holesUnsaved = false
    }

    /// Before the first write into a hole since the last save: the companion is rewritten
    /// as possibly stale, so that a crash before the next save makes a reader check it.
    func markFillingHoles() throws {
        guard !diskMapDirty, let store = holeStore, let h = header, let key = fileKey else { return }
        try HoleMapFile.write(holes, clean: false, rootFD: store.rootFD, fileID: h.fileID, fileKey: key)
        diskMapDirty = true
    }

    /// Saves pending removals (sync, close, lock). A file with no link left has its
    /// companion removed instead (its holes are still known here, for open handles); at
    /// `closing`, also when nothing is pending (a hole made after the unlink saved one).
    func flushHolesLocked(closing: Bool = false) throws {
        guard let store = holeStore, let h = header, h.version >= FileHeader.sparseVersion,
              holesUnsaved || diskMapDirty || closing else { return }
        var st = stat()
        if fstat(fd, &st) == 0 && st.st_nlink == 0 {
            HoleMapFile.remove(rootFD: store.rootFD, fileID: h.fileID)
            holesUnsaved = false
            diskMapDirty = false
            return
        }
        guard holesUnsaved || diskMapDirty, !keyForgotten else { return }
        try saveHoles()
    }

    /// Adds holes, saved before anything makes them: the header becomes version 2 first
    /// (synced), then the companion is replaced (temp file, fsync, rename, directory fsync).
    /// `fillingOthers`: the same write is about to fill holes already mapped, so the map is
    /// saved marked possibly stale (`markFillingHoles`).
    func addHoles(_ r: Range<UInt64>, fillingOthers: Bool = false) throws {
        guard let store = holeStore, !r.isEmpty, let key = fileKey else { return }
        try ensureSparseVersion()
        guard let h = header else { return }
        let before = holes
        holes.insert(r)
        do {
            store.noteSaved()
            try HoleMapFile.write(holes, clean: !fillingOthers, rootFD: store.rootFD, fileID: h.fileID, fileKey: key)
        } catch { holes = before; throw error }
        diskMapDirty = fillingOthers
        holesUnsaved = false
    }

    /// Rewrites the header as version 2 (the same key, rewrapped: the version is part of
    /// what the key slot authenticates), synced before any hole relies on it.
    private func ensureSparseVersion() throws {
        guard var h = header, h.version < FileHeader.sparseVersion, let key = fileKey else { return }
        h.version = FileHeader.sparseVersion
        let bytes = try h.encode(fileKey: key, keyring: keyring)
        try FileIO.writeAll(fd, bytes, offset: 0)
        guard fsync(fd) == 0 else { throw StoreError.posix("fsync") }
        replaceHeader(h)
    }

    /// The chunks of the gap between the old end (`size`) and a write at `offset` (or, for
    /// a truncate up, `newSize`) that become a hole: those wholly past the old last chunk
    /// and before the first chunk written; for a truncate up the new last chunk too. nil
    /// when shorter than `minimumHole` or when this file keeps no map.
    func holeGap(size: UInt64, offset: UInt64, newSize: UInt64, extendsOnly: Bool) -> Range<UInt64>? {
        guard holeStore != nil, header != nil, offset > size || extendsOnly else { return nil }
        let cs = UInt64(layout.chunkSize)
        let from = (size + cs - 1) / cs
        let to = extendsOnly ? (newSize + cs - 1) / cs : offset / cs
        return to >= from + ContentFile.minimumHole ? from..<to : nil
    }

    // MARK: reading a chunk

    /// Opens chunk `i`; a chunk named by the map whose slot is all zeros is zeros. Whether it
    /// opened (false: it failed authentication, and the caller reports EIO).
    @inline(__always)
    func openChunk(_ cipher: ChunkCipher, _ i: UInt64, _ sealed: UnsafeRawPointer, _ n: Int,
                   into out: UnsafeMutableRawPointer) -> Bool {
        if !holes.isEmpty && holes.contains(i) && Self.isAllZero(sealed, n) {
            out.initializeMemory(as: UInt8.self, repeating: 0, count: n - layout.overhead)
            return true
        }
        do { try cipher.open(index: i, sealed: sealed, sealedCount: n, into: out) } catch { return false }
        return true
    }

    static func isAllZero(_ p: UnsafeRawPointer, _ n: Int) -> Bool {
        var i = 0
        while i + 8 <= n {
            if p.loadUnaligned(fromByteOffset: i, as: UInt64.self) != 0 { return false }
            i += 8
        }
        while i < n {
            if p.load(fromByteOffset: i, as: UInt8.self) != 0 { return false }
            i += 1
        }
        return true
    }

    // MARK: punching and zeroing

    /// fallocate(2) FALLOC_FL_PUNCH_HOLE (always with KEEP_SIZE) and FALLOC_FL_ZERO_RANGE:
    /// `[offset, offset + length)` reads as zeros afterwards. The chunks it covers whole
    /// become holes (named in the map, then punched underneath, so they cost no space);
    /// the chunks it covers in part are rewritten with zeros there. Without `keepSize` a
    /// range past the end first extends the file as a truncate up does. Where the store's
    /// file system cannot punch (EOPNOTSUPP), the chunks are written as sealed zeros.
    public func zeroRange(offset: UInt64, length: UInt64, keepSize: Bool) throws {
        guard length > 0 else { return }
        guard offset <= ChunkLayout.maximumPlaintextSize, length <= ChunkLayout.maximumPlaintextSize - offset else {
            throw tooLarge()
        }
        lockWrite(); defer { unlock() }
        let end = offset + length
        let size = try plaintextSizeLocked()
        if !keepSize && end > size {
            let before = try headerlessBefore()
            if before != nil { try writeNewHeader(classForNewHeader) }
            var through = size
            do { try writeLocked(data: nil, count: 0, offset: end, holesAllowed: true, through: &through) }
            catch { undoNewHeader(before); throw error }
        }
        let to = min(end, size)
        guard offset < to, header != nil else { return }
        try zeroLocked(from: offset, to: to, size: size)
    }

    private func zeroLocked(from: UInt64, to: UInt64, size: UInt64) throws {
        let cs = UInt64(layout.chunkSize)
        // Chunks covered whole: from the first chunk boundary at or after `from`; the last
        // one may be the file's partial last chunk, covered whole when `to` is the end.
        let wholeFirst = (from + cs - 1) / cs
        let wholeEnd = to == size ? (size + cs - 1) / cs : to / cs
        if wholeEnd <= wholeFirst {
            return try writeZeros(from: from, to: to)
        }
        if from < wholeFirst * cs { try writeZeros(from: from, to: wholeFirst * cs) }
        if wholeEnd * cs < to { try writeZeros(from: wholeEnd * cs, to: to) }
        guard holeStore != nil else { return try writeZeros(from: wholeFirst * cs, to: min(to, wholeEnd * cs)) }
        let before = holes
        try addHoles(wholeFirst..<wholeEnd)
        let cipherSize = try ciphertextSize()
        let at = layout.sealedOffset(ofChunk: wholeFirst)
        let stop = min(cipherSize, layout.sealedOffset(ofChunk: wholeEnd))
        guard stop > at else { return }
        if pv_punch_hole(fd, Int64(at), Int64(stop - at)) != 0 {
            let e = errno
            guard e == EOPNOTSUPP || e == ENOSYS else {
                holes = before
                try? saveHoles()
                throw e == ENOSPC || e == EDQUOT ? StoreError.noSpace : StoreError.io(errno: e, context: "\(displayPath): punch hole")
            }
            // No punching here (FAT, exFAT, some FUSE stores): sealed zeros, in the map or not.
            try writeZeros(from: wholeFirst * cs, to: min(to, wholeEnd * cs))
        }
    }

    /// Writes zeros as data over `[from, to)` (inside the file), in bounded pieces.
    private func writeZeros(from: UInt64, to: UInt64) throws {
        let piece = 64 * layout.chunkSize
        let zeros = UnsafeMutableRawPointer.allocate(byteCount: piece, alignment: 16)
        defer { zeros.deallocate() }
        zeros.initializeMemory(as: UInt8.self, repeating: 0, count: piece)
        var o = from
        while o < to {
            let n = Int(min(UInt64(piece), to - o))
            var through = o
            try writeLocked(data: zeros, count: n, offset: o, through: &through)
            o += UInt64(n)
        }
    }

    // MARK: seeking

    /// lseek(2) SEEK_DATA (`data`) or SEEK_HOLE from plaintext `offset`, by the map, in whole
    /// chunks: a hole starts and ends at chunk boundaries (or the end of the file), and the
    /// end of the file is a hole. ENXIO at or past the end, as on a local file system.
    public func seek(from offset: UInt64, data: Bool) throws -> UInt64 {
        lockRead(); defer { unlock() }
        let size = try plaintextSizeLocked()
        guard offset < size else { throw StoreError.io(errno: ENXIO, context: "\(displayPath): seek past the end") }
        let cs = UInt64(layout.chunkSize)
        let c = offset / cs
        if data {
            guard let h = holes.hole(containing: c) else { return offset }
            guard h.upperBound < (size + cs - 1) / cs else {
                throw StoreError.io(errno: ENXIO, context: "\(displayPath): no data after the offset")
            }
            return h.upperBound * cs
        }
        if holes.contains(c) { return offset }
        guard let h = holes.firstHole(startingAtOrAfter: c) else { return size }
        return min(size, h.lowerBound * cs)
    }

    /// How many chunks from `first` on are holes named by the map whose slots hold nothing
    /// underneath (SEEK_DATA): fsck counts them as checked without reading them.
    public func chunksInMappedHole(from first: UInt64) -> UInt64 {
        lockRead(); defer { unlock() }
        guard let h = holes.hole(containing: first), let cipherSize = try? ciphertextSize() else { return 0 }
        let start = layout.sealedOffset(ofChunk: first)
        guard start < cipherSize else { return 0 }
        let data = lseek(fd, off_t(start), SEEK_DATA_VALUE)
        let holeEnd: UInt64
        if data >= 0 { holeEnd = UInt64(data) } else if errno == ENXIO { holeEnd = cipherSize } else { return 0 }
        guard holeEnd > start else { return 0 }
        let underneath = holeEnd >= cipherSize ? UInt64.max : (holeEnd - start) / UInt64(layout.sealedChunkSize)
        return min(underneath, h.upperBound - first)
    }
}
