import Glibc
import CLinux

/// Overwriting sealed bytes that a file already holds, on a filesystem where that can need
/// free space.
///
/// A filesystem that copies on write (btrfs always; xfs, bcachefs or ZFS once extents are
/// shared, as after `cp --reflink`, which `cp -a` does by default on them) gives every page
/// rewritten a new block, reserved page by page while the pwrite copies. On a full disk the
/// pwrite stops short after some pages: the chunk it was in is half new, half old, and the
/// bytes it held read as EIO. `fallocate` does not help: on btrfs it reserves holes only,
/// never the new copy of a block already written.
///
/// `keep(reserve: true)` writes the range's own bytes back over it first. That changes no
/// byte, so when it fails (ENOSPC, even halfway) nothing was lost; when it succeeds the pages
/// are dirty with their new blocks reserved, and the new bytes written over them next take
/// over those reservations page by page instead of needing more space (measured on btrfs: a
/// rewrite of 160 KiB of such pages succeeds with 96 KiB free, while a rewrite of clean pages
/// stops short at the free space). If the new write fails all the same (another writer took
/// the last free blocks in between), `SealedBytesBackup.restore` of the kept bytes is the best
/// effort left; it needs a page of free space at a time.
enum InPlaceOverwrite {
    /// Filesystems that overwrite a written block in place (no new block, so no ENOSPC):
    /// ext2/3/4, tmpfs, ramfs. On any other (or when `fstatfs` fails) an overwrite may need
    /// space, and `keep` reserves it.
    private static let inPlaceFilesystems: Set<Int> = [0xEF53, 0x0102_1994, 0x8584_58F6]

    /// Whether an overwrite of `fd`'s existing bytes may need free space (one `fstatfs`).
    static func mayNeedSpace(_ fd: Int32) -> Bool {
        let type = pv_fs_type(fd)
        return type < 0 || !inPlaceFilesystems.contains(Int(type))
    }

    /// Reads the sealed bytes `[offset, offset + count)` and, with `reserve`, writes them
    /// back over themselves (see above); returns them kept, for `restore` if the real write
    /// fails. Throws `.noSpace` (or the I/O error) with the file unchanged.
    static func keep(_ fd: Int32, firstChunk: UInt64, offset: UInt64, count: Int, reserve: Bool,
                     path: String) throws -> SealedBytesBackup {
        var kept = SealedBytesBackup(index: firstChunk, offset: offset, count: count)
        do {
            guard try kept.load(from: fd) else { throw StoreError.integrity(path: path, detail: "file shorter than its size") }
            if reserve { try kept.restore(to: fd) }
        } catch {
            kept.deallocate()
            throw error
        }
        return kept
    }
}
