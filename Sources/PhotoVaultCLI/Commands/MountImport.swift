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
    /// its own name as offline (`dir/.` lands under dir's real name). Without `force` the
    /// sources are first walked against the mount in the offline importer's order (sources
    /// as given, each directory's entries sorted by name): an existing file or symlink, or
    /// a file, symlink or directory in the way of the other kind, is the offline `exists`
    /// error (exit 20). Then, as offline, only what comes before that first conflict is
    /// copied (existing directories are merged) and the error is thrown; without a
    /// conflict one `cp -R -n` copies everything. With a class, every file the copy
    /// created or replaced then gets it; directories keep the default class they got from
    /// their parent and symlinks have none, exactly as offline. The class is set after the
    /// copy (cp cannot set it first), which changes only the header and keeps the times cp set.
    static func copy(_ sources: [String], to mp: String, dest: VaultPath, class cls: ProtectionClass?, force: Bool) throws {
        try makeDirectories(mp, dest)
        let destDir = Array(path(mp, dest).utf8)
        var resolved: [[UInt8]] = []
        var plan = CopyPlan()
        for source in sources {
            let (dir, name) = try Importer.split(source)
            // cp -R follows `P/` as offline does (and lstat and open through it too).
            resolved.append(Array((StorePath.join(dir, name) + (Importer.followsLink(source) ? "/" : "")).utf8))
            if !force && plan.conflict == nil {
                _ = plan.walk(resolved[resolved.count - 1], vault: dest.appending(Array(name.utf8)), into: destDir)
            }
        }
        if plan.conflict == nil { plan.jobs = [(resolved, destDir)] }
        var targets: [ClassTarget] = []
        var status: Int32 = 0
        var out = ""
        for (all, into) in plan.jobs {
            // cp takes String arguments: an entry before the conflict whose local or mount
            // path is not UTF-8 (only a child name read from disk can be) is not copied.
            let srcs = all.filter { String(validating: $0, as: UTF8.self) != nil }
            guard !srcs.isEmpty, String(validating: into, as: UTF8.self) != nil else { continue }
            if cls != nil {
                for src in srcs {
                    collect(src, landing: into + [47] + (src.split(separator: 47).last.map(Array.init) ?? []),
                            force: force, into: &targets)
                }
            }
            // --remove-destination, not -f: cp -f writes through an existing symlink of the
            // vault, possibly to a file outside it; offline, --force replaces the link itself.
            (status, out) = MountFlow.runTool(["cp", "-R", "--preserve=mode,timestamps", force ? "--remove-destination" : "-n"]
                                              + srcs.map { String(decoding: $0, as: UTF8.self) }
                                              + [String(decoding: into, as: UTF8.self) + "/"])
            if status != 0 { break }
        }
        if let c = cls {
            // After a failed copy, only the files it created are sure to be new copies.
            for t in targets where status == 0 || !t.existed {
                let p = t.path.map { CChar(bitPattern: $0) } + [0]
                do { try setClass(p, c, display: String(decoding: t.path, as: UTF8.self)) } catch { if status == 0 { throw error } }
            }
        }
        guard status == 0 else {
            // A full store is its own error (exit 19), as offline; cp runs in the C locale.
            if out.contains("No space left on device") || out.contains("Disk quota exceeded") { throw StoreError.noSpace }
            throw CLIError.failed("copy through the mount failed: \(out.trimmedWhitespace())")
        }
        if let conflict = plan.conflict { throw StoreError.exists(conflict.description) }
    }

    /// The offline importer's walk without `force`, done on the mount before any copy: the
    /// first entry it would refuse (`conflict`) and the `cp -R` runs (local sources, mount
    /// directory) that copy exactly what it would have copied before refusing.
    struct CopyPlan {
        var jobs: [(sources: [[UInt8]], into: [UInt8])] = []
        var conflict: VaultPath?

        /// Walks local `src`, landing at `vault` (mount directory `into` + its name).
        /// Returns true at the first conflict.
        mutating func walk(_ src: [UInt8], vault: VaultPath, into: [UInt8]) -> Bool {
            let name = vault.lastName ?? []
            let landing = into + [47] + name
            var st = stat(), there = stat()
            // An unreadable source, or nothing in the way: copied (cp reports its own errors).
            guard lstat(src.map { CChar(bitPattern: $0) } + [0], &st) == 0,
                  lstat(landing.map { CChar(bitPattern: $0) } + [0], &there) == 0 else {
                add(src, into: into)
                return false
            }
            if OfflineSys.isDirectory(st) {
                // Merged like cp -r; a file or symlink in the way is an error, as offline.
                guard OfflineSys.isDirectory(there) else { conflict = vault; return true }
                let fd = Glibc.open(src.map { CChar(bitPattern: $0) } + [0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard fd >= 0 else { add(src, into: into); return false }
                defer { close(fd) }
                for e in (try? OfflineSys.list(fd)) ?? [] {   // sorted by name, as offline
                    if walk(src + [47] + e.raw, vault: vault.appending(e.raw), into: landing) { return true }
                }
                return false
            }
            // Offline skips FIFOs, sockets and devices; an existing file or symlink is refused.
            guard OfflineSys.isRegular(st) || (st.st_mode & S_IFMT) == S_IFLNK else { return false }
            conflict = vault
            return true
        }

        private mutating func add(_ src: [UInt8], into: [UInt8]) {
            if let last = jobs.last, last.into == into { jobs[jobs.count - 1].sources.append(src) }
            else { jobs.append(([src], into)) }
        }
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
