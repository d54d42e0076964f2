import Glibc
import PhotoVaultCrypto

/// Protection classes without a mount (`photovault class get|set|list`).
///
/// * A file's class is byte 6 of its header, reported only once the header authenticates
///   (`FileHeader.authenticatedClass`): a changed byte is an integrity error, not a class.
///   Setting it rewraps only the file key (`ContentFile.setProtectionClass`: one 128-byte
///   write at offset 0 and fsync); no chunk changes, the inode and hard links stay, and
///   the file's atime and mtime are put back (a class change is not a content change).
/// * A directory has a default class for files created in it (`.pvdir`); setting it
///   rewrites `.pvdir` crash-safely. Existing files keep their class.
///
/// Changes take an exclusive `TreeLock`, reads a shared one.
public struct ClassTool {
    public let tree: UserTree
    public let lockTimeout: Double

    public init(tree: UserTree, lockTimeout: Double = 2) {
        self.tree = tree
        self.lockTimeout = lockTimeout
    }

    public enum Kind: String, Equatable, Sendable { case file, directory, symlink, other }

    /// The class of one vault entry.
    public struct Info: Equatable, Sendable {
        public let path: String
        public let kind: Kind
        /// File: its header's class, or for a 0-byte file (header not written yet) the class
        /// its header will get (`ProtectionClass.forHeaderlessFile`: the directory's default,
        /// the strictest class for a file with several links). Directory: its default class.
        /// Symlinks and others: nil.
        public let protectionClass: ProtectionClass?
        /// True for a 0-byte file whose class is only the directory default so far.
        public let pending: Bool
    }

    public func get(_ path: String) throws -> Info {
        let lock = try TreeLock(root: tree.root, mode: .shared, timeout: lockTimeout)
        defer { lock.release() }
        let resolver = try VaultResolver(tree: tree)
        let vp = try VaultPath(path)
        if vp.isRoot { return Info(path: "/", kind: .directory, protectionClass: resolver.root.info.defaultClass, pending: false) }
        let entry = try resolver.entry(vp)
        return try info(entry, resolver: resolver)
    }

    /// Every visible entry of a directory with its class, sorted by name. Entries whose
    /// name does not decrypt are left out (fsck reports them); a long name whose companion
    /// cannot be read (EIO, EACCES) is no such name: the listing fails with that error.
    public func list(_ directory: String) throws -> [Info] {
        let lock = try TreeLock(root: tree.root, mode: .shared, timeout: lockTimeout)
        defer { lock.release() }
        let resolver = try VaultResolver(tree: tree)
        let dir = try resolver.directory(try VaultPath(directory))
        var out: [Info] = []
        for e in try OfflineSys.list(dir.fd) where !NameCodec.isInternal(e.name) && !SyncDebris.matches(e.name) {
            let d: (plain: [UInt8], encoded: EncodedName, conflict: Bool)
            do { d = try tree.names.decodeListed(entry: e.name, in: dir.info, dirfd: dir.fd) } catch StoreError.integrity { continue }
            let entry = VaultEntry(parent: dir, name: d.plain, encoded: d.encoded)
            out.append(try info(entry, resolver: resolver))
        }
        return out.sorted { Array($0.path.utf8).lexicographicallyPrecedes(Array($1.path.utf8)) }
    }

    /// Sets a file's class, or a directory's default class.
    public func set(_ path: String, to cls: ProtectionClass) throws {
        let lock = try TreeLock(root: tree.root, mode: .exclusive, timeout: lockTimeout)
        defer { lock.release() }
        let resolver = try VaultResolver(tree: tree)
        let vp = try VaultPath(path)
        if vp.isRoot { return try setDefault(resolver.root, cls) }
        let entry = try resolver.entry(vp)
        guard let st = try entry.stat() else { throw StoreError.notFound(vp.description) }
        if OfflineSys.isDirectory(st) { return try setDefault(try resolver.open(entry), cls) }
        guard OfflineSys.isRegular(st) else { throw StoreError.invalidArgument("\(vp) is neither a file nor a directory") }
        let display = vp.description
        let fd = try FileIO.openRegular(entry.parent.fd, entry.cName, O_RDWR, what: display)
        let content: ContentFile
        do {
            content = try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring,
                                      classForNewHeader: entry.parent.info.defaultClass, displayPath: display, holeMaps: tree.holeMaps())
        } catch StoreError.integrity(_, let d) { close(fd); throw StoreError.integrity(path: display, detail: d) }
        catch { close(fd); throw error }
        defer { content.close() }
        let before = try OfflineSys.fstat(fd)
        try content.setProtectionClass(cls)
        OfflineSys.setTimes(fd, from: before)
    }

    func setDefault(_ dir: VaultDirectory, _ cls: ProtectionClass) throws {
        var info = dir.info
        guard info.defaultClass != cls else { return }
        info.defaultClass = cls
        try info.write(dirfd: dir.fd, keyring: tree.keyring)
    }

    func info(_ entry: VaultEntry, resolver: VaultResolver) throws -> Info {
        let display = entry.path.description
        guard let st = try entry.stat() else { throw StoreError.notFound(display) }
        if OfflineSys.isDirectory(st) {
            return Info(path: display, kind: .directory, protectionClass: try resolver.open(entry).info.defaultClass, pending: false)
        }
        if OfflineSys.isSymlink(st) { return Info(path: display, kind: .symlink, protectionClass: nil, pending: false) }
        guard OfflineSys.isRegular(st) else { return Info(path: display, kind: .other, protectionClass: nil, pending: false) }
        if st.st_size == 0 {
            let cls = ProtectionClass.forHeaderlessFile(links: UInt64(st.st_nlink), directoryDefault: entry.parent.info.defaultClass)
            return Info(path: display, kind: .file, protectionClass: cls, pending: true)
        }
        let fd = try FileIO.openRegular(entry.parent.fd, entry.cName, what: display)
        defer { close(fd) }
        var b = [UInt8](repeating: 0, count: FileHeader.size)
        let n = try b.withUnsafeMutableBytes { try FileIO.readFully(fd, $0.baseAddress!, FileHeader.size, offset: 0) }
        do {
            let cls = try FileHeader.authenticatedClass(Array(b[0..<n]), keyring: tree.keyring)
            return Info(path: display, kind: .file, protectionClass: cls, pending: false)
        } catch StoreError.integrity(_, let d) {
            throw StoreError.integrity(path: display, detail: d)
        } catch StoreError.unknownVersion(let f, let s) {
            throw StoreError.unknownVersionOf(path: display, found: f, supported: s)
        }
    }
}
