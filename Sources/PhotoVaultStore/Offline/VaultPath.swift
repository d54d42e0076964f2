import Glibc
import CLinux

/// A plaintext path inside a vault, such as `/2024/trip/a.jpg`. Leading, trailing and
/// repeated slashes are ignored; `.` and `..` components are refused rather than resolved
/// (a vault path is always absolute from the tree root, so there is nothing to resolve).
public struct VaultPath: Equatable, Hashable, Sendable, CustomStringConvertible {
    public let components: [[UInt8]]

    public init(components: [[UInt8]]) { self.components = components }

    public init(_ text: String) throws {
        var comps: [[UInt8]] = []
        for part in Array(text.utf8).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            let c = Array(part)
            guard c != [46], c != [46, 46] else { throw StoreError.invalidArgument("vault path '\(text)' contains '.' or '..'") }
            guard c.count <= 255, !c.contains(0) else { throw StoreError.invalidArgument("vault path '\(text)' has an invalid name") }
            comps.append(c)
        }
        components = comps
    }

    public static let root = VaultPath(components: [])
    public var isRoot: Bool { components.isEmpty }
    public var parent: VaultPath { VaultPath(components: Array(components.dropLast())) }
    public var lastName: [UInt8]? { components.last }
    public func appending(_ name: [UInt8]) -> VaultPath { VaultPath(components: components + [name]) }

    public var description: String {
        "/" + components.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/")
    }
}

/// An open ciphertext directory of the tree (O_RDONLY, so it can be listed, fsync'ed and
/// used as the base of `openat`), its decoded `.pvdir` and its plaintext path.
/// The fd is closed when the object goes away.
public final class VaultDirectory {
    public let fd: Int32
    public let info: DirectoryInfo
    public let path: VaultPath

    init(fd: Int32, info: DirectoryInfo, path: VaultPath) {
        self.fd = fd
        self.info = info
        self.path = path
    }

    deinit { close(fd) }
}

/// A name inside an open ciphertext directory: the resolved parent, the plaintext name and
/// its encrypted form. The entry itself may or may not exist.
public struct VaultEntry {
    public let parent: VaultDirectory
    public let name: [UInt8]
    public let encoded: EncodedName
    public var path: VaultPath { parent.path.appending(name) }
    var cName: [CChar] { Array(encoded.entry.utf8CString) }

    /// `lstat` of the ciphertext entry; nil when it does not exist.
    public func stat() throws -> stat? { try OfflineSys.lstat(parent.fd, cName) }

    /// Creates the entry with `create` (a rename or a mkdir) after its long name's companion
    /// (FORMAT.md section 6: companions first). If that fails and the entry is not there,
    /// the companion just written is removed again: it would be an orphan. An entry that is
    /// there (one `force` was replacing, or a concurrent creator's) keeps its companion,
    /// which is the same file. One step for a signal (`DeferredSignals`): no orphan companion.
    func create(_ create: () throws -> Void) throws {
        try DeferredSignals.during {
            do {
                try NameCodec.writeCompanion(encoded, in: parent.fd)
                try create()
            } catch {
                var missing = false   // an entry that cannot be looked at keeps its companion
                do { missing = try self.stat() == nil } catch {}
                if missing { NameCodec.removeCompanion(encoded, in: parent.fd) }
                throw error
            }
        }
    }
}

/// Walks plaintext paths through a user tree: each component is encrypted with the
/// `.pvdir` of the directory it is in and opened with `openat(O_PATH | O_NOFOLLOW)` relative
/// to the previous one, so a symlink planted in the store is never followed and a path
/// component renamed during the walk cannot redirect it elsewhere.
public struct VaultResolver {
    public let tree: UserTree
    public let root: VaultDirectory

    public init(tree: UserTree) throws {
        self.tree = tree
        let fd = try tree.openRoot()
        let info: DirectoryInfo
        do { info = try DirectoryInfo.read(dirfd: fd, keyring: tree.keyring) }
        catch StoreError.integrity(_, let d) { close(fd); throw StoreError.integrity(path: "/", detail: d) }
        catch { close(fd); throw error }
        root = VaultDirectory(fd: fd, info: info, path: .root)
    }

    /// Opens the directory at `path`. With `create`, missing components are created as
    /// encrypted directories (mode `mode`) inheriting their parent's default class; `made`
    /// is told each one, outermost first.
    public func directory(_ path: VaultPath, create: Bool = false, mode: mode_t = 0o700,
                   made: (VaultEntry) -> Void = { _ in }) throws -> VaultDirectory {
        var current = root
        for name in path.components {
            let entry = VaultEntry(parent: current, name: name, encoded: tree.names.locate(name, in: current.info, dirfd: current.fd))
            if try entry.stat() == nil {
                guard create else { throw StoreError.notFound(entry.path.description) }
                try makeDirectory(entry, mode: mode, made: made)
            }
            current = try open(entry)
        }
        return current
    }

    /// Resolves the parent of `path` (creating it with `createParents`) and encrypts the last
    /// name. The root itself has no entry.
    public func entry(_ path: VaultPath, createParents: Bool = false, made: (VaultEntry) -> Void = { _ in }) throws -> VaultEntry {
        guard let name = path.lastName else { throw StoreError.invalidArgument("the vault root has no entry of its own") }
        let parent = try directory(path.parent, create: createParents, made: made)
        return VaultEntry(parent: parent, name: name, encoded: tree.names.locate(name, in: parent.info, dirfd: parent.fd))
    }

    /// Opens an existing entry as a directory: `O_PATH | O_NOFOLLOW` first (a symlink or a
    /// file in its place is reported, never followed), then its `.pvdir`.
    public func open(_ entry: VaultEntry) throws -> VaultDirectory {
        let pathFD = pv_openat(entry.parent.fd, entry.cName, pv_o_path() | O_NOFOLLOW | O_CLOEXEC, 0)
        guard pathFD >= 0 else {
            if errno == ENOENT { throw StoreError.notFound(entry.path.description) }
            throw StoreError.posix("open \(entry.path)")
        }
        defer { close(pathFD) }
        let st = try OfflineSys.fstat(pathFD)
        guard OfflineSys.isDirectory(st) else { throw StoreError.io(errno: ENOTDIR, context: entry.path.description) }
        let fd = openat(pathFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(entry.path)") }
        do {
            let info = try DirectoryInfo.read(dirfd: fd, keyring: tree.keyring)
            return VaultDirectory(fd: fd, info: info, path: entry.path)
        } catch StoreError.integrity(_, let d) {
            close(fd)
            throw StoreError.integrity(path: entry.path.description, detail: d)
        } catch StoreError.unknownVersion(let f, let s) {
            close(fd)
            throw StoreError.unknownVersionOf(path: entry.path.description, found: f, supported: s)
        } catch {
            close(fd)
            throw error
        }
    }

    /// Creates the encrypted directory `entry` (companion first for a long name), then syncs
    /// its parent so that the new entry survives a crash. Losing a race to another creator of
    /// the same directory is not an error; `made` is told only about a directory made here,
    /// in the same step for a signal (`DeferredSignals`) as its making.
    func makeDirectory(_ entry: VaultEntry, mode: mode_t, marker: String? = nil, made: (VaultEntry) -> Void = { _ in }) throws {
        let madeHere = try DeferredSignals.during {
            let m = try createDirectory(entry, mode: mode, marker: marker)
            if m { made(entry) }
            return m
        }
        if madeHere {
            try AtomicFile.syncDirectory(entry.parent.fd, entry.path.description)
        }
    }

    /// `makeDirectory` without the sync of the parent: whether it made the directory (false:
    /// another creator did). For a caller that treats a failure to create and a failure to
    /// sync differently (fsck's /lost+found).
    func createDirectory(_ entry: VaultEntry, mode: mode_t, marker: String? = nil) throws -> Bool {
        do {
            try entry.create {
                _ = try DirectoryInfo.makeDirectory(in: entry.parent.fd, entry: entry.encoded.entry, mode: mode,
                                                    defaultClass: entry.parent.info.defaultClass, keyring: tree.keyring,
                                                    marker: marker)
            }
        } catch StoreError.exists {
            return false
        }
        return true
    }
}
