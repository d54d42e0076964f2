import Glibc
import CFuse
import CLinux
import PhotoVaultStore

/// `*at()` system calls taking byte-array names (backing names are bytes, not Strings:
/// a plain tree may hold names that are not valid UTF-8).
enum Syscall {
    @inline(__always)
    static func withCName<R>(_ name: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
        var z = name
        z.append(0)
        return z.withUnsafeBufferPointer { p in
            p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: z.count) { body($0) }
        }
    }

    static func openat(_ dirfd: Int32, _ name: [UInt8], _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
        withCName(name) { pv_openat3(dirfd, $0, flags, UInt32(mode)) }
    }

    static func mkdirat(_ dirfd: Int32, _ name: [UInt8], _ mode: mode_t) -> Int32 {
        withCName(name) { Glibc.mkdirat(dirfd, $0, mode) }
    }

    static func unlinkat(_ dirfd: Int32, _ name: [UInt8], _ flags: Int32) -> Int32 {
        withCName(name) { Glibc.unlinkat(dirfd, $0, flags) }
    }

    /// Removes `name` in `dirfd`, and everything under it if it is a directory (store
    /// leftovers only: never follows symlinks). Throws the first error.
    static func removeTree(_ dirfd: Int32, _ name: [UInt8], isDirectory: Bool) throws {
        if isDirectory {
            let fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw FSError.last() }
            defer { Glibc.close(fd) }
            for e in try listDirectory(fd) {
                try removeTree(fd, e.name, isDirectory: e.type == UInt8(DT_DIR))
            }
        }
        guard unlinkat(dirfd, name, isDirectory ? AT_REMOVEDIR : 0) == 0 else { throw FSError.last() }
    }

    static func fstatat(_ dirfd: Int32, _ name: [UInt8], _ st: inout stat, _ flags: Int32) -> Int32 {
        withCName(name) { Glibc.fstatat(dirfd, $0, &st, flags) }
    }

    static func symlinkat(_ target: [UInt8], _ dirfd: Int32, _ name: [UInt8]) -> Int32 {
        withCName(target) { t in withCName(name) { Glibc.symlinkat(t, dirfd, $0) } }
    }

    /// Never follows a symlink: a new link is given to its creator, not its target.
    static func fchownat(_ dirfd: Int32, _ name: [UInt8], _ uid: uid_t, _ gid: gid_t) -> Int32 {
        withCName(name) { Glibc.fchownat(dirfd, $0, uid, gid, AT_SYMLINK_NOFOLLOW) }
    }

    static func renameat2(_ olddir: Int32, _ old: [UInt8], _ newdir: Int32, _ new: [UInt8], _ flags: UInt32) -> Int32 {
        withCName(old) { o in withCName(new) { n in pv_renameat2(olddir, o, newdir, n, flags) } }
    }

    static func mknodat(_ dirfd: Int32, _ name: [UInt8], _ mode: mode_t, _ dev: dev_t) -> Int32 {
        withCName(name) { Glibc.mknodat(dirfd, $0, mode, dev) }
    }

    /// Reads a symlink's target relative to an PV_O_PATH descriptor of the link itself.
    static func readlink(_ fd: Int32) throws -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = buf.withUnsafeMutableBufferPointer { p in
            p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { Glibc.readlinkat(fd, "", $0, p.count) }
        }
        guard n >= 0 else { throw FSError.last() }
        guard n < buf.count else { throw FSError.nameTooLong }
        return Array(buf[0..<n])
    }

    /// `/proc/self/fd/N`: reopens or names an PV_O_PATH descriptor for calls without an fd form.
    static func procPath(_ fd: Int32) -> String { "/proc/self/fd/\(fd)" }

    /// Lists a directory's backing entries (without "." and "..").
    static func listDirectory(_ dirfd: Int32) throws -> [(name: [UInt8], ino: UInt64, type: UInt8)] {
        let fd = Glibc.openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw FSError.last() }
        guard let dp = fdopendir(fd) else { let e = errno; Glibc.close(fd); throw FSError.posix(e) }
        defer { closedir(dp) }
        var out: [(name: [UInt8], ino: UInt64, type: UInt8)] = []
        while true {
            errno = 0
            guard let ent = Glibc.readdir(dp) else {
                if errno != 0 { throw FSError.last() }
                break
            }
            let name = DirectoryEntryName.bytes(ent)
            if name == [0x2e] || name == [0x2e, 0x2e] { continue }
            out.append((name, UInt64(ent.pointee.d_ino), ent.pointee.d_type))
        }
        return out
    }
}

// Linux flags that Glibc hides behind _GNU_SOURCE.
let PV_O_PATH: Int32 = pv_o_path()
let PV_AT_EMPTY_PATH: Int32 = pv_at_empty_path()
