import Glibc
import PhotoVaultCrypto

/// One account's encrypted tree inside the store (`users/<hex tree ID>/`), with the keys
/// and geometry needed to read and write it. Shared by the FUSE layer and the offline
/// commands (import, export, fsck, class).
public final class UserTree: @unchecked Sendable {
    public let root: String
    public let keyring: UserKeyring
    public let layout: ChunkLayout
    public let names: NameCodec
    public let xattrs: XattrCodec

    public init(root: String, keyring: UserKeyring, layout: ChunkLayout) {
        self.root = root
        self.keyring = keyring
        self.layout = layout
        names = NameCodec(keyring: keyring)
        xattrs = XattrCodec(keyring: keyring)
    }

    /// Creates the tree's root directory and its `.pvdir` (used by `user add`).
    public static func initialiseRoot(at path: String, keyring: UserKeyring) throws {
        if mkdir(path, 0o700) != 0 && errno != EEXIST { throw StoreError.posix("mkdir \(path)") }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(path)") }
        defer { close(fd) }
        try DirectoryInfo().write(dirfd: fd, keyring: keyring)
        // The account record written next points at this tree: its entry must last too.
        try AtomicFile.syncParent(of: path)
    }

    /// Opens the tree's root directory (O_RDONLY | O_DIRECTORY).
    public func openRoot() throws -> Int32 {
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(root)") }
        return fd
    }
}
