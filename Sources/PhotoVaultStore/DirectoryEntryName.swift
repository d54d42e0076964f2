import Glibc
import CLinux

/// The name of a `dirent` that `readdir` returned, read without going past the record.
///
/// glibc's `struct dirent` declares `d_name` as 256 bytes, but `readdir` hands out a
/// pointer into its own buffer where each record is only `d_reclen` bytes long: a short
/// name's record ends a few bytes after its NUL. Reading `ent.pointee.d_name` in Swift
/// copies the whole 256-byte tuple, which runs past the record and, for the last record
/// of a buffer that ends at a page boundary, past the mapping: the daemon crashed listing
/// large folders of short names that way. Every `readdir` loop reads names through here
/// (or, below the store, through CLinux's `pv_dirent_name_length` that this wraps).
public enum DirectoryEntryName {
    /// The name's bytes, without the terminating NUL.
    public static func bytes(_ ent: UnsafePointer<dirent>) -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: pv_dirent_name(ent), count: pv_dirent_name_length(ent)))
    }

    /// The name as a String (names that are not UTF-8 decode with replacement characters:
    /// callers that must reopen the entry by its exact name use `bytes`).
    public static func string(_ ent: UnsafePointer<dirent>) -> String {
        String(decoding: bytes(ent), as: UTF8.self)
    }
}
