import Glibc
import PhotoVaultCrypto
import PhotoVaultStore

/// The store's on-disk format behind the FUSE adapter: names through `NameCodec` bound to
/// each directory's `.pvdir`, contents through `ContentFile`, link targets through
/// `LinkTarget`, extended attributes through `XattrCodec`.
final class EncryptedBackend: TreeBackend, @unchecked Sendable {
    let tree: UserTree
    private var keyring: UserKeyring { tree.keyring }

    init(tree: UserTree) {
        self.tree = tree
    }

    /// A directory's `.pvdir`: its ID never changes; its default class can (xattr). A sync
    /// engine can add versions of it underneath a live mount (docs/SYNC.md): their IDs join
    /// `alternateIDs` when a name fails to decode (`refreshVersions`).
    final class Naming: DirectoryNaming, @unchecked Sendable {
        private let lock = PMutex()
        private var info: DirectoryInfo
        private var lastRefresh: timespec
        init(_ info: DirectoryInfo) {
            self.info = info
            lastRefresh = Naming.now()
        }
        var current: DirectoryInfo { lock.withLock { info } }
        func update(_ body: (inout DirectoryInfo) -> Void) -> DirectoryInfo {
            lock.withLock { body(&info); return info }
        }

        /// Reads the directory's `.pvdir` versions again, at most once a second (a directory
        /// full of foreign entries must not be listed once per entry), and adds the IDs not
        /// known yet. Names keep being written under the ID loaded first. Whether any was added.
        func refreshVersions(dirFD: Int32, keyring: UserKeyring) -> Bool {
            let t = Naming.now()
            let due = lock.withLock { () -> Bool in
                guard t.tv_sec > lastRefresh.tv_sec + 1 || (t.tv_sec == lastRefresh.tv_sec + 1 && t.tv_nsec >= lastRefresh.tv_nsec) else { return false }
                lastRefresh = t
                return true
            }
            guard due, let fresh = try? DirectoryInfo.read(dirfd: dirFD, keyring: keyring) else { return false }
            return lock.withLock {
                var added = false
                for id in [fresh.id] + fresh.alternateIDs where id != info.id && !info.alternateIDs.contains(id) {
                    info.alternateIDs.append(id)
                    added = true
                }
                return added
            }
        }

        static func now() -> timespec {
            var t = timespec()
            clock_gettime(CLOCK_MONOTONIC, &t)
            return t
        }
    }

    private func info(_ dir: DirectoryNaming) -> DirectoryInfo { (dir as! Naming).current }

    func naming(forDirectory fd: Int32) throws -> DirectoryNaming {
        Naming(try DirectoryInfo.read(dirfd: fd, keyring: keyring))
    }

    private static func string(_ b: [UInt8]) -> String { String(decoding: b, as: UTF8.self) }

    /// Plaintext names are 1–255 bytes (FORMAT.md section 6, NAME_MAX in statfs). The kernel
    /// lets FUSE names reach 1024 bytes, so the limit is enforced here, as ext4 does.
    static let maxPlainNameLength = 255

    /// The entry under another version of the directory's `.pvdir`, or a sync engine's
    /// conflict copy, where the name is one of those (`NameCodec.locate`; no extra system
    /// call otherwise).
    func backingName(_ plain: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> [UInt8] {
        guard plain.count <= Self.maxPlainNameLength else { throw FSError.nameTooLong }
        return Array(tree.names.locate(plain, in: info(dir), dirfd: dirFD).entry.utf8)
    }

    /// An existing entry of that name (under another `.pvdir` version, or a conflict copy
    /// shown under it) is the one a rename replaces or an exclusive create meets: never a
    /// second entry with the same plaintext name.
    func prepareName(_ plain: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> [UInt8] {
        guard plain.count <= Self.maxPlainNameLength else { throw FSError.nameTooLong }
        let enc = tree.names.locate(plain, in: info(dir), dirfd: dirFD)
        try NameCodec.writeCompanion(enc, in: dirFD)
        return Array(enc.entry.utf8)
    }

    func nameRemoved(_ backing: [UInt8], in dir: DirectoryNaming, dirFD: Int32) {
        NameCodec.removeCompanion(ofEntry: Self.string(backing), in: dirFD)
    }

    /// Only a name that fails authentication is `.corrupt`; a long name's companion that
    /// cannot be read (`StoreError.io`: EIO, EACCES, EMFILE, ENOMEM) is thrown, so that a
    /// listing fails instead of dropping a file that is only unreadable for now.
    func plainName(_ backing: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> DecodedName {
        let entry = Self.string(backing)
        if NameCodec.isInternal(entry) || SyncDebris.matches(entry) { return .hidden }
        do { return .visible(try tree.names.decodeListed(entry: entry, in: info(dir), dirfd: dirFD).plain) }
        catch StoreError.integrity {
            // Perhaps written under a version of `.pvdir` a sync engine brought in since.
            guard (dir as! Naming).refreshVersions(dirFD: dirFD, keyring: keyring) else { return .corrupt }
            do { return .visible(try tree.names.decodeListed(entry: entry, in: info(dir), dirfd: dirFD).plain) }
            catch StoreError.integrity { return .corrupt }
        }
    }

    func makeDirectory(named backing: [UInt8], in parentFD: Int32, parent: DirectoryNaming, mode: mode_t) throws {
        _ = try DirectoryInfo.makeDirectory(in: parentFD, entry: Self.string(backing), mode: mode,
                                            defaultClass: info(parent).defaultClass, keyring: keyring)
    }

    /// Removes a directory that is empty in the plaintext view. Leftovers of interrupted
    /// writes (`.pvtmp-*` files or directories, orphan companions) go first; `.pvdir` goes
    /// only when nothing else is left, and is put back if the directory cannot be removed,
    /// so a failed rmdir never leaves a directory whose names can no longer be read.
    func removeDirectory(named backing: [UInt8], in parentFD: Int32) throws {
        let fd = Syscall.openat(parentFD, backing, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw FSError.last() }
        defer { close(fd) }
        let entries = try Syscall.listDirectory(fd)
        guard entries.allSatisfy({ NameCodec.isInternal(Self.string($0.name)) }) else { throw FSError.notEmpty }
        // rmdir(2) needs write permission on the parent only, but removing the internal
        // files needs it on the directory itself: a read-only (0555) directory is made
        // writable for its owner first, and given its mode back if it stays.
        var st = stat()
        var restoreMode: mode_t? = nil
        var removed = false
        if fstat(fd, &st) == 0, st.st_mode & 0o300 != 0o300, st.st_uid == geteuid(),
           fchmod(fd, (st.st_mode & 0o7777) | 0o300) == 0 {
            restoreMode = st.st_mode & 0o7777
        }
        defer { if !removed, let m = restoreMode { _ = fchmod(fd, m) } }
        for e in entries where Self.string(e.name) != DirectoryInfo.fileName {
            try Syscall.removeTree(fd, e.name, isDirectory: e.type == UInt8(DT_DIR))
        }
        let hasInfo = entries.contains { Self.string($0.name) == DirectoryInfo.fileName }
        let saved = hasInfo ? try FileIO.readFile(in: fd, name: DirectoryInfo.fileName, limit: 1 << 16) : nil
        if hasInfo { guard unlinkat(fd, DirectoryInfo.fileName, 0) == 0 else { throw FSError.last() } }
        guard Syscall.unlinkat(parentFD, backing, AT_REMOVEDIR) == 0 else {
            let e = errno
            if let saved { try AtomicFile.write(saved, in: fd, name: DirectoryInfo.fileName, mode: 0o400) }
            throw FSError.posix(e)
        }
        removed = true
    }

    func plaintextSize(backingSize: Int64) -> Int64 {
        Int64(tree.layout.reportedSize(ciphertextSize: UInt64(max(0, backingSize))))
    }

    func openContent(fd: Int32, classForNewHeader cls: ProtectionClass?, rootFD: Int32) throws -> FileContent {
        EncryptedContent(try ContentFile(fd: fd, layout: tree.layout, keyring: keyring, classForNewHeader: cls ?? .default,
                                         holeMaps: holeMaps(rootFD)))
    }

    func createContent(fd: Int32, protectionClass cls: ProtectionClass?, rootFD: Int32) throws -> FileContent {
        EncryptedContent(try ContentFile.create(fd: fd, layout: tree.layout, keyring: keyring,
                                                protectionClass: cls ?? .default, holeMaps: holeMaps(rootFD)))
    }

    /// One `HoleMapStore` for the mount's root (it only names the descriptor).
    private let holeMapStores = PMutex()
    nonisolated(unsafe) private var holeMapStore: HoleMapStore?
    private func holeMaps(_ rootFD: Int32) -> HoleMapStore {
        holeMapStores.withLock {
            if let s = holeMapStore, s.rootFD == rootFD { return s }
            let s = HoleMapStore(rootFD: rootFD)
            holeMapStore = s
            return s
        }
    }

    /// A file of format version 2 may have a hole map (`HoleMapFile`), named by the file ID
    /// in its header; one pread of the header's clear part, and only for such a file.
    func companionsOfFile(_ fd: Int32, rootFD: Int32) -> [String] {
        var b = [UInt8](repeating: 0, count: FileHeader.prefixSize)
        guard let n = try? b.withUnsafeMutableBytes({ try FileIO.readFully(fd, $0.baseAddress!, FileHeader.prefixSize, offset: 0) }),
              n == FileHeader.prefixSize, Array(b[0..<4]) == FileHeader.magic,
              Int(b[4]) | Int(b[5]) << 8 >= Int(FileHeader.sparseVersion) else { return [] }
        return [HoleMapFile.name(fileID: Array(b[8..<24]))]
    }

    func mayHaveCompanionsOfFiles(rootFD: Int32) -> Bool { holeMaps(rootFD).mayHoldMaps }

    func fileRemoved(companions: [String], rootFD: Int32) {
        for c in companions { _ = unlinkat(rootFD, c, 0) }
    }

    func defaultClass(in dir: DirectoryNaming) -> ProtectionClass? { info(dir).defaultClass }

    func setDefaultClass(_ cls: ProtectionClass, in dir: DirectoryNaming, dirFD: Int32) throws {
        let n = dir as! Naming
        // .pvdir is replaced through a temp file, which needs a real directory fd.
        let fd = openat(dirFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw FSError.last() }
        defer { close(fd) }
        var updated = n.current
        updated.defaultClass = cls
        try updated.write(dirfd: fd, keyring: keyring)
        _ = n.update { $0.defaultClass = cls }
    }

    func setProtectionClass(_ cls: ProtectionClass, of content: FileContent) throws {
        guard let c = content as? EncryptedContent else { throw FSError.notSupported }
        try c.file.setProtectionClass(cls)
    }

    func protectionClass(ofFile fd: Int32) throws -> ProtectionClass? {
        var b = [UInt8](repeating: 0, count: FileHeader.size)
        let n = try b.withUnsafeMutableBytes { try FileIO.readFully(fd, $0.baseAddress!, FileHeader.size, offset: 0) }
        if n == 0 { return nil }   // header not written yet
        // Authenticated while the class key is there; a locked class can only show the
        // header's clear byte (FORMAT.md section 4).
        do { return try FileHeader.authenticatedClass(Array(b[0..<n]), keyring: keyring) }
        catch StoreError.locked { return try FileHeader.parse(Array(b[0..<n])).protectionClass }
    }

    func sealLinkTarget(_ plain: [UInt8], rootFD: Int32) throws -> [UInt8] {
        let stored = try LinkTarget.seal(plain, keyring: keyring)
        try LinkTarget.writeCompanion(stored, rootFD: rootFD)
        return Array(stored.symlink.utf8)
    }

    func openLinkTarget(_ stored: [UInt8], rootFD: Int32) throws -> [UInt8] {
        try LinkTarget.open(stored, keyring: keyring, rootFD: rootFD)
    }

    func linkTargetRemoved(_ stored: [UInt8], rootFD: Int32) {
        LinkTarget.removeCompanion(ofStored: stored, rootFD: rootFD)
    }

    /// `user.`, `trusted.` and `security.` attributes are stored, all sealed the same way
    /// (FORMAT.md section 8): the kernel decides who may read and write each namespace
    /// before a request reaches the mount. Refused (EOPNOTSUPP): `system.` (POSIX ACLs),
    /// which the kernel would have to read in the clear to enforce; `security.capability`,
    /// which the `nosuid` mount would never honour and which the mount promises the kernel
    /// never to hold (`DeviceIO`, FUSE_HANDLE_KILLPRIV_V2); and `security.selinux`, which
    /// SELinux itself refuses on a FUSE mount (labelled as a whole) and which `ls -l` asks
    /// of every file until it meets EOPNOTSUPP once (an answer of "none" cost a round trip
    /// per file: `ls -lR` of 8,905 entries took twice as long).
    func sealXattrName(_ plain: [UInt8]) throws -> [UInt8] {
        guard !Self.refusedNames.contains(plain),
              Self.storedNamespaces.contains(where: { plain.starts(with: $0) }) else { throw FSError.notSupported }
        return Array(tree.xattrs.storedName(plain).utf8)
    }

    func openXattrName(_ backing: [UInt8]) -> [UInt8]? {
        // Stored names are ASCII (user.pv. + base64url): anything else is not one of ours.
        guard backing.allSatisfy({ $0 < 0x80 }) else { return nil }
        return tree.xattrs.plainName(Self.stored(backing))
    }

    /// E2BIG above `XattrCodec.maxValueSize`, as the kernel answers for a sealed value over
    /// its limit, before any sealing.
    func sealXattrValue(_ plain: [UInt8], name: [UInt8]) throws -> [UInt8] {
        guard plain.count <= XattrCodec.maxValueSize else { throw FSError.posix(E2BIG) }
        return tree.xattrs.sealValue(plain, storedName: Self.stored(try sealXattrName(name)))
    }

    func openXattrValue(_ sealed: [UInt8], name: [UInt8]) throws -> [UInt8] {
        try tree.xattrs.openValue(sealed, storedName: Self.stored(try sealXattrName(name)))
    }

    private static let storedNamespaces = ["user.", "trusted.", "security."].map { Array($0.utf8) }
    private static let refusedNames = ["security.capability", "security.selinux"].map { Array($0.utf8) }
    private static func stored(_ b: [UInt8]) -> String { String(decoding: b, as: UTF8.self) }

    func canOpen(_ cls: ProtectionClass) -> Bool { keyring.canOpen(cls) }
    func lock() { keyring.lock() }
    func wipeAll() { keyring.wipeAll() }
}

/// `ContentFile` behind the adapter's content protocol.
final class EncryptedContent: FileContent {
    let file: ContentFile
    init(_ file: ContentFile) { self.file = file }

    var protectionClass: ProtectionClass? { file.protectionClass }
    func size() throws -> Int64 { Int64(try file.size()) }
    func read(into buffer: UnsafeMutableRawPointer, count: Int, offset: Int64) throws -> Int {
        try file.read(into: buffer, count: count, offset: UInt64(offset))
    }
    func write(from buffer: UnsafeRawPointer, count: Int, offset: Int64) throws -> Int {
        try file.write(from: buffer, count: count, offset: UInt64(offset), dropsSetID: DeviceIO.requestDropsSetID)
    }
    func truncate(to size: Int64) throws { try file.truncate(to: UInt64(size), dropsSetID: DeviceIO.requestDropsSetID) }
    func allocate(offset: Int64, length: Int64, keepSize: Bool) throws {
        try file.allocate(upTo: UInt64(offset) + UInt64(length), keepSize: keepSize)
    }
    func zeroRange(offset: Int64, length: Int64, keepSize: Bool) throws {
        try file.zeroRange(offset: UInt64(offset), length: UInt64(length), keepSize: keepSize)
    }
    func seek(from offset: Int64, data: Bool) throws -> Int64 {
        Int64(try file.seek(from: UInt64(offset), data: data))
    }
    func sync(dataOnly: Bool) throws { try file.sync() }
    func wipeKey() { file.forgetKey() }
    func close() throws { file.close() }
}
