import Glibc
import CLinux
import PhotoVaultCrypto

/// Crash-safe replacement of small files (credential records, store config, headers):
/// write a temp file in the same directory, fsync it, rename over the target, fsync the
/// directory. After a crash the target holds either the old or the new bytes, never a mix.
public enum AtomicFile {
    public static let tempPrefix = ".pvtmp-"

    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws {
        let dir = StorePath.dirname(path)
        let name = StorePath.basename(path)
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw StoreError.posix("open \(dir)") }
        defer { close(dfd) }
        try write(bytes, in: dfd, name: name, mode: mode)
    }

    /// Same, relative to an open directory.
    public static func write(_ bytes: [UInt8], in dirfd: Int32, name: String, mode: mode_t = 0o600) throws {
        try place(bytes, in: dirfd, name: name, mode: mode, replacing: true)
        try syncDirectory(dirfd, name)
    }

    /// `write` (`replacing`) or a create-if-absent (link) without the directory fsync: when it returns, `name`
    /// holds the new bytes, synced; a failure before that leaves `name` as it was. A caller
    /// to whom a failed directory fsync means something else than a failed write (the change
    /// took effect, only its durability is unknown) syncs the directory itself.
    public static func place(_ bytes: [UInt8], in dirfd: Int32, name: String, mode: mode_t = 0o600,
                             replacing: Bool) throws {
        let tmp = tempPrefix + Base64Hex.random(8)
        let fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw StoreError.posix("create temp file") }
        var renamed = false
        defer {
            if !renamed { unlinkat(dirfd, tmp, 0) }
        }
        do {
            try FileIO.writeAll(fd, bytes, offset: 0)
            guard fsync(fd) == 0 else { throw StoreError.posix("fsync") }
            close(fd)
        } catch { close(fd); throw error }
        if replacing {
            guard renameat(dirfd, tmp, dirfd, name) == 0 else { throw StoreError.posix("rename \(name)") }
            renamed = true
        } else {
            // link() fails if the target exists: an atomic create-if-absent. Where the file
            // system has no hard links (exFAT), a rename that refuses a taken name (NoReplace).
            guard NoReplace.createIfAbsent(tmp: tmp, name: name, in: dirfd) == 0 else {
                if errno == EEXIST { throw StoreError.exists(name) }
                throw StoreError.posix("create \(name)")
            }
        }
    }

    /// fsync of a directory after an entry in it was created, renamed or removed: without
    /// it the change may not survive a crash. A failure (EIO) is reported, not ignored.
    /// `dirfd` may be an O_PATH descriptor (the mount keeps its directories open that way),
    /// which fsync refuses with EBADF: the directory is then opened for reading to be synced.
    public static func syncDirectory(_ dirfd: Int32, _ entry: String) throws {
        if FileIO.fsync(dirfd) == 0 { return }
        guard errno == EBADF else { return try directoryNotSynced(dirfd, entry) }
        let fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open the directory holding \(entry)") }
        defer { close(fd) }
        guard FileIO.fsync(fd) == 0 else { return try directoryNotSynced(fd, entry) }
    }

    /// A directory fsync that failed: the error, unless the drive cannot sync directories at
    /// all (the probe found so: `BackingCapabilities.directoryFsync`) and says so with EINVAL,
    /// ENOSYS or EOPNOTSUPP. Its new names are then as durable as the drive makes them, which
    /// is all anything written there gets; an EIO is always an error.
    static func directoryNotSynced(_ fd: Int32, _ entry: String) throws {
        let e = errno
        if [EINVAL, ENOSYS, EOPNOTSUPP].contains(e) && !BackingCapabilities.known(fd).directoryFsync { return }
        throw StoreError.posix("fsync the directory holding \(entry)", e)
    }

    /// mkdir -p with mode 0700 for the components that do not exist yet, each synced into its
    /// parent (the device secret's directory, the store and the directories above it).
    public static func makeDirectories(_ dir: String) throws {
        if dir.isEmpty || dir == "/" || dir == "." { return }
        var st = stat()
        if stat(dir, &st) == 0 { return }
        try makeDirectories(StorePath.dirname(dir))
        guard mkdir(dir, 0o700) == 0 else {
            if errno == EEXIST { return }
            throw StoreError.posix("mkdir \(dir)")
        }
        try syncParent(of: dir)
    }

    /// Same, for the directory that holds `path` (after `mkdir(path)`, for instance).
    public static func syncParent(of path: String) throws {
        let dir = StorePath.dirname(path)
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw StoreError.posix("open \(dir)") }
        defer { close(dfd) }
        try syncDirectory(dfd, StorePath.basename(path))
    }
}

/// Raw, retrying file I/O helpers.
public enum FileIO {
    /// O_NOATIME (Linux: 01000000 on x86-64 and arm64). Refused with EPERM for a file the
    /// caller neither owns nor has CAP_FOWNER over; callers then open without it.
    public static let noAtime: Int32 = 0o1000000

    /// fsync(2) as the offline tools call it (`sync`, `AtomicFile.syncDirectory`). Only tests
    /// replace it, to see what was synced when or to make it fail.
    nonisolated(unsafe) static var fsync: (Int32) -> Int32 = { Glibc.fsync($0) }

    /// fsync of a file written under a temp name, before the rename that gives it its name:
    /// otherwise a crash can leave the name on an empty or partly written file. A failure
    /// (EIO, ENOSPC) is thrown, not ignored.
    public static func sync(_ fd: Int32, _ what: String) throws {
        guard fsync(fd) == 0 else { throw StoreError.posix("fsync \(what)") }
    }

    public static func writeAll(_ fd: Int32, _ bytes: [UInt8], offset: Int64) throws {
        try bytes.withUnsafeBytes { try writeAll(fd, $0.baseAddress, bytes.count, offset: offset) }
    }

    public static func writeAll(_ fd: Int32, _ buf: UnsafeRawPointer?, _ count: Int, offset: Int64) throws {
        var done = 0
        while done < count {
            let n = pwrite(fd, buf! + done, count - done, Int(offset) + done)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.posix("write")
            }
            done += n
        }
    }

    /// Reads up to `count` bytes; returns fewer only at end of file.
    public static func readFully(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int, offset: Int64) throws -> Int {
        var done = 0
        while done < count {
            let n = pread(fd, buf + done, count - done, Int(offset) + done)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.posix("read")
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Reads a whole regular file (`openRegular`: a FIFO, socket, device, directory or
    /// symlink in its place is `.corruptStore`, never waited on or followed).
    public static func readFile(_ path: String, limit: Int = 1 << 20) throws -> [UInt8] {
        try readFile(in: AT_FDCWD, name: path, limit: limit)
    }

    public static func readFile(in dirfd: Int32, name: String, limit: Int = 1 << 20) throws -> [UInt8] {
        let fd = try openRegular(dirfd, name, what: name)
        defer { close(fd) }
        return try readAll(fd, limit: limit)
    }

    /// Opens a file PhotoVault itself reads or locks inside the store (`.pvdir`, long-name
    /// companions, the config, account records, lock files, ciphertext files the offline
    /// tools open after a stat). Whoever can write the store can put anything in its place,
    /// at any moment. Opening a device node runs its driver's open, which can act (a tape
    /// rewinds, a modem hangs up), `O_NONBLOCK` or not, and opening a FIFO can wait for good;
    /// so the name is first opened with `O_PATH | O_NOFOLLOW`, which runs no driver's open,
    /// never waits and never follows a symlink (it gives the link itself). `fstat` on that
    /// descriptor says what the name held at that moment; only a regular file is then opened
    /// for reading or writing, through `/proc/self/fd/N`, which reaches that same inode
    /// whatever has been renamed over the name since. No device, FIFO or socket swapped in
    /// at any time is ever opened. Anything but a regular file is thrown as `misshapen`
    /// (default `.corruptStore`, exit 9; EIO and a log line in the daemon). Other failures
    /// are `.posix` with the errno (ENOENT included). With `O_CREAT` a missing file is
    /// created with `O_EXCL | O_NOFOLLOW`, so that nothing put in its place meanwhile is
    /// opened.
    public static func openRegular(_ dirfd: Int32, _ name: UnsafePointer<CChar>, _ flags: Int32 = O_RDONLY,
                                   mode: mode_t = 0, what: @autoclosure () -> String,
                                   misshapen: ((String) -> StoreError)? = nil) throws -> Int32 {
        func notRegular() -> StoreError {
            let w = what()
            return misshapen?(w) ?? .corruptStore("\(w) is not a regular file")
        }
        let creates = flags & O_CREAT != 0
        // A file created or removed by someone else between the two opens is looked at again;
        // only a store being rewritten without pause can exhaust the attempts.
        for _ in 0..<8 {
            let pathFD = pv_openat(dirfd, name, pv_o_path() | O_NOFOLLOW | O_CLOEXEC, 0)
            guard pathFD >= 0 else {
                let e = errno
                guard e == ENOENT, creates else { throw StoreError.posix("open \(what())", e) }
                // A file to be opened read-only (a lock file) is made write-only and opened on the
                // next round: an rclone mount refuses O_RDONLY | O_CREAT with EIO.
                let readOnly = flags & O_ACCMODE == O_RDONLY
                let createFlags = readOnly ? (flags & ~O_ACCMODE) | O_WRONLY : flags
                let fd = openat(dirfd, name, createFlags | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode)
                if fd >= 0 && readOnly { close(fd); continue }
                if fd >= 0 { return fd }   // made here: a regular file
                let made = errno
                if made == EEXIST { continue }
                // ELOOP: a symlink; EISDIR: a directory (both put in its place meanwhile).
                if made == ELOOP || made == EISDIR { throw notRegular() }
                throw StoreError.posix("open \(what())", made)
            }
            defer { close(pathFD) }
            var st = stat()
            guard Glibc.fstat(pathFD, &st) == 0 else { throw StoreError.posix("fstat \(what())") }
            guard st.st_mode & S_IFMT == S_IFREG else { throw notRegular() }
            // The same inode, by the descriptor's magic link (not followed by name: O_NOFOLLOW
            // would refuse the link itself). O_NONBLOCK is harmless on a regular file.
            let fd = open(procFD(pathFD), (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW)) | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                let e = errno
                if e == ENOENT, access("/proc/self/fd", F_OK) != 0 {
                    throw StoreError.io(errno: ENOENT, context: "open \(what()) through /proc/self/fd (is /proc mounted?)")
                }
                throw StoreError.posix("open \(what())", e)
            }
            return fd
        }
        throw StoreError.posix("open \(what()) (created and removed again and again while it was opened)", EAGAIN)
    }

    /// `/proc/self/fd/N`: the file an `O_PATH` descriptor refers to, for opening it for real.
    static func procFD(_ fd: Int32) -> String { "/proc/self/fd/\(fd)" }

    public static func readAll(_ fd: Int32, limit: Int) throws -> [UInt8] {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        var off: Int64 = 0
        while out.count <= limit {
            let n = try buf.withUnsafeMutableBytes { try readFully(fd, $0.baseAddress!, $0.count, offset: off) }
            out.append(contentsOf: buf[0..<n])
            off += Int64(n)
            if n < buf.count { break }
        }
        guard out.count <= limit else { throw StoreError.corruptStore("file larger than expected") }
        return out
    }
}

/// Path string helpers (no Foundation on the hot path).
public enum StorePath {
    public static func dirname(_ p: String) -> String {
        guard let i = p.lastIndex(of: "/") else { return "." }
        return i == p.startIndex ? "/" : String(p[..<i])
    }
    public static func basename(_ p: String) -> String {
        guard let i = p.lastIndex(of: "/") else { return p }
        return String(p[p.index(after: i)...])
    }
    public static func join(_ a: String, _ b: String) -> String {
        a.hasSuffix("/") ? a + b : a + "/" + b
    }
}

public enum Base64Hex {
    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](); out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }
    public static func unhex(_ s: String) -> [UInt8]? {
        let u = Array(s.utf8)
        guard u.count % 2 == 0 else { return nil }
        func v(_ c: UInt8) -> UInt8? {
            switch c { case 48...57: return c - 48; case 97...102: return c - 87; default: return nil }
        }
        var out = [UInt8]()
        var i = 0
        while i < u.count {
            guard let h = v(u[i]), let l = v(u[i + 1]) else { return nil }
            out.append(h << 4 | l); i += 2
        }
        return out
    }
    public static func random(_ n: Int) -> String { hex(SecureRandom.bytes(n)) }
}
