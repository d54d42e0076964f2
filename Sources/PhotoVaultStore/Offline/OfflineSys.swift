import Glibc
import CLinux

/// System calls the offline tools need beyond `FileIO`: directory listing by fd, metadata,
/// timestamps and extended attributes. Everything works relative to open directory fds so
/// that a concurrent rename of a path component cannot redirect a write (no path is
/// resolved twice). The CLI uses a few of them for the same work done through a mount.
public enum OfflineSys {
    /// One directory entry as the kernel returns it (raw bytes: a foreign entry may not be
    /// valid UTF-8, and it must still be opened, moved or reported by its exact name).
    public struct Entry {
        public let raw: [UInt8]
        let type: UInt8
        var name: String { String(decoding: raw, as: UTF8.self) }
        var cName: [CChar] { raw.map { CChar(bitPattern: $0) } + [0] }
    }

    /// Lists a directory (without "." and ".."), sorted by name so walks are reproducible.
    public static func list(_ dirfd: Int32) throws -> [Entry] {
        let dup = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dup >= 0 else { throw StoreError.posix("open directory") }
        guard let dir = fdopendir(dup) else { close(dup); throw StoreError.posix("fdopendir") }
        defer { closedir(dir) }
        var out: [Entry] = []
        errno = 0
        while let e = readdir(dir) {
            let raw = DirectoryEntryName.bytes(e)
            if raw == [46] || raw == [46, 46] { continue }
            out.append(Entry(raw: raw, type: e.pointee.d_type))
            errno = 0
        }
        if errno != 0 { throw StoreError.posix("readdir") }
        return out.sorted { $0.raw.lexicographicallyPrecedes($1.raw) }
    }

    /// `fstatat` without following a final symlink; nil when the entry does not exist.
    public static func lstat(_ dirfd: Int32, _ name: [CChar]) throws -> stat? {
        var st = stat()
        if fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 { return st }
        if errno == ENOENT { return nil }
        throw StoreError.posix("stat")
    }

    static func lstat(_ dirfd: Int32, _ name: String) throws -> stat? {
        try lstat(dirfd, Array(name.utf8CString))
    }

    static func fstat(_ fd: Int32) throws -> stat {
        var st = stat()
        guard Glibc.fstat(fd, &st) == 0 else { throw StoreError.posix("fstat") }
        return st
    }

    /// Whether modification time `kept`, on a file system that keeps times to
    /// `resolutionNs` (BackingCapabilities: 1 s on exfat-fuse and sshfs), is `source`'s as
    /// that file system would have stored it: both truncated to its resolution. A rerun of an
    /// import or export compares them; exact nanoseconds made every file on such a drive
    /// look changed.
    static func sameModificationTime(_ kept: timespec, _ source: timespec, resolutionNs: Int64) -> Bool {
        let r = max(resolutionNs, 1)
        func ns(_ t: timespec) -> Int64 { Int64(t.tv_sec) &* 1_000_000_000 &+ Int64(t.tv_nsec) }
        let a = ns(kept), b = ns(source)
        func floorDiv(_ x: Int64) -> Int64 { x >= 0 ? x / r : -((-x + r - 1) / r) }
        return floorDiv(a) == floorDiv(b)
    }

    public static func isDirectory(_ st: stat) -> Bool { st.st_mode & S_IFMT == S_IFDIR }
    public static func isRegular(_ st: stat) -> Bool { st.st_mode & S_IFMT == S_IFREG }
    public static func isSymlink(_ st: stat) -> Bool { st.st_mode & S_IFMT == S_IFLNK }

    /// "a FIFO", "a directory", ... (for messages).
    static func typeName(_ st: stat) -> String {
        switch st.st_mode & S_IFMT {
        case S_IFREG: return "a regular file"
        case S_IFDIR: return "a directory"
        case S_IFLNK: return "a symlink"
        case S_IFIFO: return "a FIFO"
        case S_IFSOCK: return "a socket"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        default: return "a file of unknown type"
        }
    }

    /// Sets atime and mtime of an open file (after its last write).
    static func setTimes(_ fd: Int32, from st: stat) {
        let ts = [st.st_atim, st.st_mtim]
        _ = futimens(fd, ts)
    }

    /// Same for an entry that is not open (directories after their children, symlinks).
    static func setTimes(_ dirfd: Int32, _ name: String, from st: stat) {
        let ts = [st.st_atim, st.st_mtim]
        _ = utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW)
    }

    /// `readlinkat`, whole target.
    static func readLink(_ dirfd: Int32, _ name: [CChar]) throws -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: 4097)
        let n = buf.withUnsafeMutableBytes { readlinkat(dirfd, name, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) }
        guard n >= 0 else { throw StoreError.posix("readlink") }
        return Array(buf[0..<n])
    }

    /// Opens a subdirectory without following a symlink in its place.
    static func openDirectory(_ dirfd: Int32, _ name: [CChar]) throws -> Int32 {
        let fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open directory") }
        return fd
    }

    static func temporaryName() -> String { AtomicFile.tempPrefix + Base64Hex.random(8) }

    /// Renames inside or across directories; `replace: false` fails with `.exists` if the
    /// target is taken (renameat2 RENAME_NOREPLACE, atomic; or `NoReplace`'s fallback where
    /// the file system has no such flag: the offline writer holds the tree's exclusive lock).
    public static func rename(_ fromDir: Int32, _ from: [CChar], _ toDir: Int32, _ to: [CChar], replace: Bool, display: String) throws {
        let rc = replace ? renameat(fromDir, from, toDir, to) : NoReplace.rename(fromDir, from, toDir, to)
        guard rc == 0 else {
            if errno == EEXIST || errno == ENOTEMPTY { throw StoreError.exists(display) }
            throw StoreError.posix("rename \(display)")
        }
    }

    /// Copies up to `count` bytes from `fd` (at its current position, so pipes work);
    /// returns fewer only at end of input.
    public static func readStream(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int) throws -> Int {
        var done = 0
        while done < count {
            let n = Glibc.read(fd, buf + done, count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.posix("read")
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    public static func writeStream(_ fd: Int32, _ buf: UnsafeRawPointer, _ count: Int) throws {
        var done = 0
        while done < count {
            let n = Glibc.write(fd, buf + done, count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.posix("write")
            }
            done += n
        }
    }
}

/// Extended attributes by fd. `<sys/xattr.h>` is in neither Glibc's Swift module nor the
/// store's C shim, so the three libc calls are looked up once at run time.
public enum OfflineXattr {
    private typealias GetFn = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private typealias ListFn = @convention(c) (Int32, UnsafeMutablePointer<CChar>?, Int) -> Int
    private typealias SetFn = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    private typealias RemoveFn = @convention(c) (Int32, UnsafePointer<CChar>) -> Int32

    private static func sym<T>(_ name: String, _: T.Type) -> T {
        guard let p = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { fatalError("libc lacks \(name)") }
        return unsafeBitCast(p, to: T.self)
    }
    private static let fget = sym("fgetxattr", GetFn.self)
    private static let flist = sym("flistxattr", ListFn.self)
    private static let fset = sym("fsetxattr", SetFn.self)
    private static let fremove = sym("fremovexattr", RemoveFn.self)

    /// Attribute names of an open file or directory, as bytes: a name need not be UTF-8
    /// (decoded, two such names would become one). Filesystems without xattr support
    /// answer as if there were none.
    public static func names(_ fd: Int32) throws -> [[UInt8]] {
        while true {
            let n = flist(fd, nil, 0)
            // rclone's mount answers EIO, which the probe of the store told apart (the offline
            // commands probe first: BackingCapabilities).
            if n < 0 && (errno == ENOTSUP || errno == EOPNOTSUPP || !BackingCapabilities.known(fd).xattrs) { return [] }
            guard n >= 0 else { throw StoreError.posix("listxattr") }
            if n == 0 { return [] }
            var buf = [CChar](repeating: 0, count: n)
            let m = buf.withUnsafeMutableBufferPointer { flist(fd, $0.baseAddress, $0.count) }
            if m < 0 && errno == ERANGE { continue }   // grew in between
            guard m >= 0 else { throw StoreError.posix("listxattr") }
            return buf[0..<m].split(separator: 0).map { $0.map { UInt8(bitPattern: $0) } }
        }
    }

    /// `names` for attributes this program stores (ASCII names): others are decoded with
    /// U+FFFD, which no stored name contains.
    public static func storedNames(_ fd: Int32) throws -> [String] {
        try names(fd).map { String(decoding: $0, as: UTF8.self) }
    }

    public static func get(_ fd: Int32, _ name: String) throws -> [UInt8] { try get(fd, Array(name.utf8)) }

    public static func get(_ fd: Int32, _ bytes: [UInt8]) throws -> [UInt8] {
        let name = cName(bytes)
        while true {
            let n = fget(fd, name, nil, 0)
            guard n >= 0 else { throw StoreError.posix("getxattr") }
            var buf = [UInt8](repeating: 0, count: max(n, 1))
            let m = buf.withUnsafeMutableBytes { fget(fd, name, $0.baseAddress, $0.count) }
            if m < 0 && errno == ERANGE { continue }
            guard m >= 0 else { throw StoreError.posix("getxattr") }
            return Array(buf[0..<m])
        }
    }

    static func exists(_ fd: Int32, _ name: String) -> Bool { fget(fd, name, nil, 0) >= 0 }

    /// Removes an attribute; a missing one (or no xattr support) is not an error.
    static func remove(_ fd: Int32, _ name: String) { _ = fremove(fd, name) }

    static func set(_ fd: Int32, _ name: String, _ value: [UInt8]) throws { try set(fd, Array(name.utf8), value) }

    static func set(_ fd: Int32, _ name: [UInt8], _ value: [UInt8]) throws {
        let rc = value.withUnsafeBytes { fset(fd, cName(name), $0.baseAddress, value.count, 0) }
        guard rc == 0 else { throw StoreError.posix("setxattr \(String(decoding: name, as: UTF8.self))") }
    }

    /// A name's bytes as a C string.
    public static func cName(_ name: [UInt8]) -> [CChar] { name.map { CChar(bitPattern: $0) } + [0] }
}
