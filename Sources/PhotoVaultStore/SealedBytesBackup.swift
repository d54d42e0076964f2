import Glibc

/// Sealed chunk bytes as they are on disk, kept while a write rewrites them in place: a
/// file's partial last chunk while a write grows the file, or any range of chunks that
/// `InPlaceOverwrite` reserves on a copy-on-write filesystem (then `index` is the range's
/// first chunk). If the write stops halfway (a full store whose filesystem has no
/// `fallocate`, so the growth could not be reserved, and whose `pwrite` then stops short
/// at the first block it cannot allocate), `restore` puts them back: the bytes the file
/// held before still authenticate instead of failing as EIO. Putting them back needs no
/// new block: they lie inside the file's old length.
struct SealedBytesBackup {
    let index: UInt64
    /// Ciphertext offset and length of the chunk as it is on disk.
    let offset: Int64
    let count: Int
    let bytes: UnsafeMutableRawPointer
    /// False until the chunk was read (by the write itself when it needs the old plaintext).
    var loaded = false

    init(index: UInt64, offset: UInt64, count: Int) {
        self.index = index
        self.offset = Int64(offset)
        self.count = count
        bytes = UnsafeMutableRawPointer.allocate(byteCount: count, alignment: 16)
    }

    /// Reads the chunk (one pread) unless it was read already; `false` when the file holds
    /// fewer bytes than the chunk should.
    mutating func load(from fd: Int32) throws -> Bool {
        if loaded { return true }
        loaded = try FileIO.readFully(fd, bytes, count, offset: offset) == count
        return loaded
    }

    /// Writes the kept bytes back at their place (call after cutting the file back to its
    /// old length).
    func restore(to fd: Int32) throws {
        if loaded { try FileIO.writeAll(fd, bytes, count, offset: offset) }
    }

    func deallocate() { bytes.deallocate() }
}
