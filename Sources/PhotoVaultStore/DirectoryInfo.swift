import Glibc
import CLinux
import PhotoVaultCrypto

/// The `.pvdir` file inside every ciphertext directory (FORMAT.md, "Directories"):
///
///   0  4  magic "PVD" + version byte 0x01
///   4 16  directory ID (random): the domain of every name encrypted in this directory
///  20  1  default protection class for new files (1...4)
///  21 16  BLAKE2b-128(key = metadata key, "PVdir\x01" || bytes 0..<21)
///
/// The ID is what lets a directory be renamed without re-encrypting its children's names
/// (as gocryptfs's diriv); the MAC stops an attacker from weakening the default class.
public struct DirectoryInfo: Sendable, Equatable {
    public static let fileName = ".pvdir"
    public static let size = 37
    static let magic: [UInt8] = [0x50, 0x56, 0x44, 0x01]
    static let macLabel: [UInt8] = Array("PVdir".utf8) + [1]

    public var id: [UInt8]
    public var defaultClass: ProtectionClass
    /// IDs of other versions of this `.pvdir` beside it: copies a sync engine made when two
    /// devices wrote it at once (docs/SYNC.md). Names are read under every one of them and
    /// written under `id`. Not part of the file.
    public var alternateIDs: [[UInt8]] = []

    public init(id: [UInt8] = SecureRandom.bytes(16), defaultClass: ProtectionClass = .default) {
        self.id = id
        self.defaultClass = defaultClass
    }

    public func encode(keyring: UserKeyring) -> [UInt8] {
        var b = DirectoryInfo.magic + id + [defaultClass.rawValue]
        b += DirectoryInfo.mac(b, keyring: keyring)
        return b
    }

    static func mac(_ body: [UInt8], keyring: UserKeyring) -> [UInt8] {
        keyring.metadataKey.withUnsafeBytes { k in
            macLabel.withUnsafeBytes { l in body.withUnsafeBytes { b in KeyedHash.hash(key: k, parts: [l, b], outputLength: 16) } }
        }
    }

    public static func decode(_ b: [UInt8], keyring: UserKeyring) throws -> DirectoryInfo {
        guard b.count == size, Array(b[0..<3]) == Array(magic[0..<3]) else {
            throw StoreError.integrity(path: "", detail: "directory ID file is damaged")
        }
        guard b[3] == magic[3] else { throw StoreError.unknownVersion(found: Int(b[3]), supported: Int(magic[3])) }
        let body = Array(b[0..<21])
        guard constantTimeEqual(mac(body, keyring: keyring), Array(b[21..<37])),
              let c = ProtectionClass(rawValue: b[20]) else {
            throw StoreError.integrity(path: "", detail: "directory ID file failed authentication")
        }
        return DirectoryInfo(id: Array(b[4..<20]), defaultClass: c)
    }

    /// Reads `.pvdir` of an open ciphertext directory, with the IDs of its sync-conflict
    /// copies (`DirectoryVersions`).
    public static func read(dirfd: Int32, keyring: UserKeyring) throws -> DirectoryInfo {
        try DirectoryVersions.read(dirfd: dirfd, keyring: keyring)
    }

    /// Reads one version of `.pvdir` (`name`: the file or a conflict copy of it).
    static func readFile(dirfd: Int32, name: String = fileName, keyring: UserKeyring) throws -> DirectoryInfo {
        // Misshapen (a directory, FIFO, socket, device or symlink in its place), not
        // unreadable: format damage like a bad size. Never followed, never waited on.
        let fd: Int32
        do {
            fd = try FileIO.openRegular(dirfd, name, what: name, misshapen: { _ in
                StoreError.integrity(path: "", detail: "directory ID file is not a regular file")
            })
        } catch StoreError.io(let e, _) where e == ENOENT {
            throw StoreError.integrity(path: "", detail: missingDetail)
        }
        defer { close(fd) }
        var b = [UInt8](repeating: 0, count: size + 1)
        let n = try b.withUnsafeMutableBytes { try FileIO.readFully(fd, $0.baseAddress!, size + 1, offset: 0) }
        return try decode(Array(b[0..<n]), keyring: keyring)
    }

    /// Writes (or replaces) `.pvdir` crash-safely.
    public func write(dirfd: Int32, keyring: UserKeyring) throws {
        try AtomicFile.write(encode(keyring: keyring), in: dirfd, name: DirectoryInfo.fileName, mode: 0o400)
    }

    /// The ID of a new directory: BLAKE2b-128(key = metadata key, "PVdirid" 0x01 || its
    /// entry name). The entry name is the plaintext name sealed under the parent's ID, so two
    /// devices that each create `trip` in the same folder give it the same ID, and a sync
    /// engine merging the two folders merges two identical `.pvdir` files, not two
    /// directories whose names only one of them can read (docs/SYNC.md). Readers take the
    /// ID as it is stored (FORMAT.md section 7): no format change.
    static func derivedID(entry: String, keyring: UserKeyring) -> [UInt8] {
        keyring.metadataKey.withUnsafeBytes { k in
            idLabel.withUnsafeBytes { l in Array(entry.utf8).withUnsafeBytes { e in KeyedHash.hash(key: k, parts: [l, e], outputLength: 16) } }
        }
    }
    static let missingDetail = "directory ID file is missing"
    static let idLabel: [UInt8] = Array("PVdirid".utf8) + [1]

    /// Creates a new ciphertext directory atomically: it is built under a temporary name,
    /// given its `.pvdir`, then renamed to `entry`; a crash leaves only a `.pvtmp-` directory.
    public static func makeDirectory(in parentfd: Int32, entry: String, mode: mode_t, defaultClass: ProtectionClass,
                                     keyring: UserKeyring, marker: String? = nil) throws -> DirectoryInfo {
        let tmp = AtomicFile.tempPrefix + Base64Hex.random(8)
        guard mkdirat(parentfd, tmp, mode | 0o300) == 0 else { throw StoreError.posix("mkdir") }
        let info = DirectoryInfo(id: derivedID(entry: entry, keyring: keyring), defaultClass: defaultClass)
        guard BackingCapabilities.of(parentfd).renamedDirectoryKeepsNewFiles else {
            try nameFirst(info, tmp: tmp, in: parentfd, entry: entry, mode: mode, keyring: keyring, marker: marker)
            return info
        }
        do {
            let dfd = openat(parentfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard dfd >= 0 else { throw StoreError.posix("open new directory") }
            defer { close(dfd) }
            try info.write(dirfd: dfd, keyring: keyring)
            if let m = marker { PendingDirectory.mark(dfd, m) }   // before it has its name
            if mode & 0o300 != 0o300 {
                // Keep the setgid bit a directory inherits from a setgid parent, as mkdir does.
                var st = stat()
                let inherited = fstat(dfd, &st) == 0 ? st.st_mode & S_ISGID : 0
                _ = fchmod(dfd, mode | inherited)
            }
            // RENAME_NOREPLACE, or its fallback where the file system refuses the flag with
            // EINVAL (exFAT, NTFS, sshfs: every mkdir through the mount used to fail so).
            guard NoReplace.rename(parentfd, tmp, parentfd, entry) == 0 else {
                throw errno == EEXIST ? StoreError.exists(entry) : StoreError.posix("rename new directory")
            }
        } catch {
            unlinkat(parentfd, StorePath.join(tmp, fileName), 0)
            unlinkat(parentfd, tmp, AT_REMOVEDIR)
            throw error
        }
        return info
    }

    /// `makeDirectory` where a directory renamed right after a file was written in it loses
    /// that file for a while (rclone's VFS cache): the empty directory takes its name first,
    /// then gets its `.pvdir`. A crash in between leaves an empty directory without one,
    /// which the mount cannot open (EIO) and fsck reports; nothing in it is lost.
    private static func nameFirst(_ info: DirectoryInfo, tmp: String, in parentfd: Int32, entry: String, mode: mode_t,
                                  keyring: UserKeyring, marker: String?) throws {
        guard NoReplace.rename(parentfd, tmp, parentfd, entry) == 0 else {
            let e = errno
            unlinkat(parentfd, tmp, AT_REMOVEDIR)
            throw e == EEXIST ? StoreError.exists(entry) : StoreError.posix("rename new directory", e)
        }
        do {
            let dfd = openat(parentfd, entry, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard dfd >= 0 else { throw StoreError.posix("open new directory") }
            defer { close(dfd) }
            try info.write(dirfd: dfd, keyring: keyring)
            if let m = marker { PendingDirectory.mark(dfd, m) }
            if mode & 0o300 != 0o300 {
                var st = stat()
                let inherited = fstat(dfd, &st) == 0 ? st.st_mode & S_ISGID : 0
                _ = fchmod(dfd, mode | inherited)
            }
        } catch {
            unlinkat(parentfd, StorePath.join(entry, fileName), 0)
            unlinkat(parentfd, entry, AT_REMOVEDIR)
            throw error
        }
    }
}
