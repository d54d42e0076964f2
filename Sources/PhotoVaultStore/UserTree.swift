import Glibc
import Synchronization
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
    private let holeMapStore = Mutex<HoleMapStore?>(nil)

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

    /// The tree's root directory is the mount's root, so a `chmod 000 ~/PhotoVault` (any mode
    /// without the owner's read and search bits) is stored on it. While mounted, its owner
    /// can chmod it back through the mount; but no later mount could open it, and its name
    /// in the store is a hash nobody knows. For a mount by the owner whom the mode shuts out
    /// (root with CAP_DAC_OVERRIDE is not), this gives the owner read and search back (u+rx,
    /// nothing else) and returns the mode it had, for a warning; nil when nothing changed.
    /// Errors are left to whatever opens the root next.
    public func restoreOwnerAccess() -> mode_t? {
        var st = stat()
        guard lstat(root, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid(),
              st.st_mode & 0o500 != 0o500, faccessat(AT_FDCWD, root, R_OK | X_OK, AT_EACCESS) != 0, errno == EACCES
        else { return nil }
        let old = st.st_mode & 0o7777
        guard chmod(root, old | 0o500) == 0 else { return nil }
        return old
    }

    /// Reads the root's `.pvdir`, as the offline tools do before anything else: damaged,
    /// missing or failing authentication is `.integrity(path: "/")` (exit 22), of a version
    /// this build does not read `.unknownVersion` (exit 10). Nothing in the tree can be
    /// named without it.
    public func checkRoot() throws {
        let fd = try openRoot()
        defer { close(fd) }
        do { _ = try DirectoryInfo.read(dirfd: fd, keyring: keyring) }
        catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: "/", detail: d) }
    }

    /// Where the offline tools find files' hole maps (the root, opened once); nil when the
    /// root cannot be opened (a version-2 file's holes then read as damaged).
    public func holeMaps() -> HoleMapStore? {
        holeMapStore.withLock { s in
            if s == nil { s = try? HoleMapStore(opening: root) }
            return s
        }
    }

    /// Opens the tree's root directory (O_RDONLY | O_DIRECTORY).
    public func openRoot() throws -> Int32 {
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(root)") }
        return fd
    }
}
