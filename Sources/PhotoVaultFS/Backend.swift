import Glibc
import PhotoVaultCrypto

/// A directory's naming context, loaded once per directory inode (for the encrypted tree:
/// the directory ID that binds its entry names).
protocol DirectoryNaming: AnyObject, Sendable {}

/// What a backing directory entry is to the user.
enum DecodedName {
    case visible([UInt8])
    /// An internal file of the store (directory ID, long-name companion, temp file).
    case hidden
    /// A name that fails authentication (or a long name whose companion is missing, misshapen
    /// or does not match): logged and skipped. A companion that cannot be *read* (EIO, EACCES,
    /// EMFILE) is no such name: `plainName` throws, and the listing fails with that errno.
    case corrupt
}

/// Random-access plaintext view of one backing file. Callers serialise access
/// (many readers or one writer, see `ContentState`).
protocol FileContent: AnyObject {
    var protectionClass: ProtectionClass? { get }
    /// Plaintext size.
    func size() throws -> Int64
    func read(into buffer: UnsafeMutableRawPointer, count: Int, offset: Int64) throws -> Int
    func write(from buffer: UnsafeRawPointer, count: Int, offset: Int64) throws -> Int
    func truncate(to size: Int64) throws
    /// fallocate(2) mode 0 or FALLOC_FL_KEEP_SIZE (`keepSize`) of [offset, offset + length).
    func allocate(offset: Int64, length: Int64, keepSize: Bool) throws
    /// fallocate(2) FALLOC_FL_PUNCH_HOLE or FALLOC_FL_ZERO_RANGE of [offset, offset + length):
    /// the range reads as zeros; without `keepSize` a range past the end extends the file.
    func zeroRange(offset: Int64, length: Int64, keepSize: Bool) throws
    /// lseek(2) SEEK_DATA (`data`) or SEEK_HOLE; ENXIO at or past the end.
    func seek(from offset: Int64, data: Bool) throws -> Int64
    func sync(dataOnly: Bool) throws
    /// Forgets the file key (device lock); later reads and writes fail with `.locked`.
    func wipeKey()
    /// Flushes pending state, wipes the key and closes the backing fd (also after `wipeKey`).
    func close() throws
}

/// Everything that differs between a plain passthrough tree and the encrypted store:
/// the FUSE adapter does inodes, handles and replies; the backend does names, content,
/// link targets and extended attributes.
protocol TreeBackend: AnyObject, Sendable {
    func naming(forDirectory fd: Int32) throws -> DirectoryNaming
    /// The backing name of an existing (or absent) entry: lookup, unlink, rename source.
    func backingName(_ plain: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> [UInt8]
    /// The backing name of an entry about to be created; may write companion files.
    func prepareName(_ plain: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> [UInt8]
    /// The entry `backing` is gone from the directory: remove its companion files.
    func nameRemoved(_ backing: [UInt8], in dir: DirectoryNaming, dirFD: Int32)
    func plainName(_ backing: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> DecodedName

    /// Creates a directory (with whatever it needs inside) under `backing`, atomically.
    func makeDirectory(named backing: [UInt8], in parentFD: Int32, parent: DirectoryNaming, mode: mode_t) throws
    /// rmdir: fails with ENOTEMPTY unless only internal files remain, which it removes.
    func removeDirectory(named backing: [UInt8], in parentFD: Int32) throws

    /// Plaintext size of a regular file from its backing size, without reading it.
    func plaintextSize(backingSize: Int64) -> Int64
    /// Opens the content of an existing file (`fd` is open O_RDWR or O_RDONLY). Its errors
    /// name no path: the adapter's log line names the file's path at the time of the error.
    /// `cls`: the class of a header written on the first write (its directory's default).
    /// `rootFD`: the tree's root, where the content keeps what lives outside the file (holes).
    func openContent(fd: Int32, classForNewHeader cls: ProtectionClass?, rootFD: Int32) throws -> FileContent
    /// Initialises a new, empty file's content (writes its header) with class `cls`.
    func createContent(fd: Int32, protectionClass cls: ProtectionClass?, rootFD: Int32) throws -> FileContent
    /// Before the last link of the regular file `fd` goes (unlink, rename over it): what
    /// lives outside the file for it, to pass to `fileRemoved` once it has no link left.
    func companionsOfFile(_ fd: Int32, rootFD: Int32) -> [String]
    /// Whether any file of the tree may have companions (`companionsOfFile` is then asked).
    func mayHaveCompanionsOfFiles(rootFD: Int32) -> Bool
    /// Removes companions `companionsOfFile` named, in the tree's root.
    func fileRemoved(companions: [String], rootFD: Int32)
    /// The class new files in a directory get (stored with the directory).
    func defaultClass(in dir: DirectoryNaming) -> ProtectionClass?
    func setDefaultClass(_ cls: ProtectionClass, in dir: DirectoryNaming, dirFD: Int32) throws
    /// Changes an existing file's class (rewraps its key).
    func setProtectionClass(_ cls: ProtectionClass, of content: FileContent) throws
    /// Reads the class of a closed file from its header.
    func protectionClass(ofFile fd: Int32) throws -> ProtectionClass?

    /// What a new symlink to `plain` holds underneath. A target too long for that is kept in a
    /// companion file in the tree's root `rootFD`, written here, before the symlink is made
    /// (`linkTargetRemoved` takes it back if the symlink is not made).
    func sealLinkTarget(_ plain: [UInt8], rootFD: Int32) throws -> [UInt8]
    func openLinkTarget(_ stored: [UInt8], rootFD: Int32) throws -> [UInt8]
    /// A backing symlink holding `stored` lost its last link (or was never made).
    func linkTargetRemoved(_ stored: [UInt8], rootFD: Int32)

    /// Extended attributes, names as the bytes the kernel passes (any but NUL, not always
    /// UTF-8: two names must never become one). Throws for a namespace not supported.
    func sealXattrName(_ plain: [UInt8]) throws -> [UInt8]
    /// nil: not one of ours (hidden from listxattr).
    func openXattrName(_ backing: [UInt8]) -> [UInt8]?
    func sealXattrValue(_ plain: [UInt8], name: [UInt8]) throws -> [UInt8]
    func openXattrValue(_ sealed: [UInt8], name: [UInt8]) throws -> [UInt8]

    /// Whether the keys of class `cls` are available for opening files right now.
    func canOpen(_ cls: ProtectionClass) -> Bool
    func lock()
    func wipeAll()
}
