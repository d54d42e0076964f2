import Foundation
import PhotoVaultCrypto
import PhotoVaultStore
import CLinux

/// `import` through a live mount (MountRoute): standard input with a temp file and a
/// no-replace rename, sources with `cp -R` and then the class.
extension MountRoute {
    /// `import - DEST`: standard input goes into a temp file in DEST's directory (created
    /// if missing), which gets the class before its first byte (so its header is written
    /// with it), mode 0644 and fsync, and only then is renamed to DEST, without replacing
    /// anything unless `force` (RENAME_NOREPLACE): no half-written file ever has the real
    /// name, and a concurrent creator is not overwritten. Returns the bytes copied.
    static func stream(_ src: Int32, to mp: String, dest: VaultPath, class cls: ProtectionClass?, force: Bool) throws -> UInt64 {
        guard let name = dest.lastName else { throw StoreError.invalidArgument("the vault root has no entry of its own") }
        let display = dest.description
        try makeDirectories(mp, dest.parent)
        let dirfd = Glibc.open(path(mp, dest.parent), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else { throw StoreError.posix("open \(dest.parent)") }
        defer { close(dirfd) }
        let cname = name.map { CChar(bitPattern: $0) } + [0]
        // Refused before stdin is read, as offline; a directory is never replaced.
        if let st = try OfflineSys.lstat(dirfd, cname), !force || OfflineSys.isDirectory(st) {
            throw StoreError.exists(display)
        }
        let tmp = Array((tempPrefix + Base64Hex.random(8)).utf8CString)
        var fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.posix("create a temp file for \(display)") }
        var placed = false
        defer {
            if fd >= 0 { close(fd) }
            if !placed { unlinkat(dirfd, tmp, 0) }
        }
        if let c = cls, fsetxattr(fd, classAttribute, c.name, c.name.utf8.count, 0) != 0 {
            throw StoreError.posix("set the class of \(display)")
        }
        let bytes = try copy(src, to: fd, display: display)
        guard fchmod(fd, Importer.stdinMode) == 0, fsync(fd) == 0 else { throw StoreError.posix("write \(display)") }
        // A FUSE file reports a failed last write at close, so its result counts.
        let closed = close(fd)
        fd = -1
        guard closed == 0 else { throw StoreError.posix("write \(display)") }
        try OfflineSys.rename(dirfd, tmp, dirfd, cname, replace: force, display: display)
        placed = true
        return bytes
    }

    /// Copies `src` to its end in 1 MiB blocks; the buffer is zeroed after (plaintext).
    private static func copy(_ src: Int32, to fd: Int32, display: String) throws -> UInt64 {
        let block = 1 << 20
        let buf = UnsafeMutableRawPointer.allocate(byteCount: block, alignment: 16)
        defer { secureZero(UnsafeMutableRawBufferPointer(start: buf, count: block)); buf.deallocate() }
        var total: UInt64 = 0
        while true {
            let n = try OfflineSys.readStream(src, buf, block)
            do { try OfflineSys.writeStream(fd, buf, n) } catch StoreError.io(let e, _) {
                throw StoreError.io(errno: e, context: "write \(display)")
            }
            total += UInt64(n)
            if n < block { return total }
        }
    }

    /// `import SOURCE... DEST`: `cp -R` into DEST (created if missing), each SOURCE under
    /// its own name as offline (`dir/.` lands under dir's real name). Without `force`
    /// existing files are kept (`cp -n`). With a class, every file the copy created or
    /// replaced then gets it; directories keep the default class they got from their
    /// parent and symlinks have none, exactly as offline. The class is set after the copy
    /// (cp cannot set it first), which changes only the header and keeps the times cp set.
    static func copy(_ sources: [String], to mp: String, dest: VaultPath, class cls: ProtectionClass?, force: Bool) throws {
        try makeDirectories(mp, dest)
        let destDir = path(mp, dest)
        var resolved: [String] = []
        var targets: [ClassTarget] = []
        for source in sources {
            let (dir, name) = try Importer.split(source)
            resolved.append(StorePath.join(dir, name))
            if cls != nil {
                collect(Array(StorePath.join(dir, name).utf8), landing: Array(StorePath.join(destDir, name).utf8),
                        force: force, into: &targets)
            }
        }
        let (status, out) = MountFlow.runTool(["cp", "-R", "--preserve=mode,timestamps", force ? "-f" : "-n"]
                                              + resolved + [destDir + "/"])
        if let c = cls {
            // After a failed copy, only the files it created are sure to be new copies.
            for t in targets where status == 0 || !t.existed {
                let p = t.path.map { CChar(bitPattern: $0) } + [0]
                do { try setClass(p, c, display: String(decoding: t.path, as: UTF8.self)) } catch { if status == 0 { throw error } }
            }
        }
        guard status == 0 else { throw CLIError.failed("copy through the mount failed: \(out.trimmedWhitespace())") }
    }

    /// A regular file the copy will write, and whether it was there before (then it is
    /// written only with force).
    struct ClassTarget {
        let path: [UInt8]
        let existed: Bool
    }

    /// The regular files a copy of local `src` to `landing` on the mount creates or, with
    /// `force`, replaces. Raw bytes: a local name need not be valid UTF-8.
    private static func collect(_ src: [UInt8], landing: [UInt8], force: Bool, into out: inout [ClassTarget]) {
        var st = stat(), there = stat()
        guard lstat(src.map { CChar(bitPattern: $0) } + [0], &st) == 0 else { return }
        let existed = lstat(landing.map { CChar(bitPattern: $0) } + [0], &there) == 0
        if OfflineSys.isRegular(st) {
            // cp -n skips an existing file; a symlink or directory in the way is not a copy.
            if !existed || (force && OfflineSys.isRegular(there)) { out.append(ClassTarget(path: landing, existed: existed)) }
            return
        }
        guard OfflineSys.isDirectory(st) else { return }
        let fd = Glibc.open(src.map { CChar(bitPattern: $0) } + [0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        for e in (try? OfflineSys.list(fd)) ?? [] {
            collect(src + [47] + e.raw, landing: landing + [47] + e.raw, force: force, into: &out)
        }
    }
}
