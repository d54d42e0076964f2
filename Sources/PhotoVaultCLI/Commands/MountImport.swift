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
    /// name, and a concurrent creator is not overwritten. The directory is then fsync'ed, as
    /// are the parents of those `makeDirectories` creates. Returns the bytes copied.
    static func stream(_ src: Int32, to mp: String, dest: VaultPath, class cls: ProtectionClass?, force: Bool) throws -> UInt64 {
        guard let name = dest.lastName else { throw StoreError.invalidArgument("the vault root has no entry of its own") }
        let display = dest.description
        try makeDirectories(mp, dest.parent)
        let dirfd = Glibc.open(path(mp, dest.parent), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else { throw StoreError.posix("open \(dest.parent)") }
        defer { close(dirfd) }
        let cname = cPath(name)
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
        // As offline: the rename lasts only once its directory is synced (FSYNCDIR, which
        // the daemon passes to the ciphertext directory); a failure is reported, not ignored.
        try AtomicFile.syncDirectory(dirfd, display)
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
    /// its own name as offline (`dir/.` lands under dir's real name). The sources are first
    /// walked against the mount in the offline importer's order (sources as given, each
    /// directory's entries sorted by name). FIFOs, sockets and devices are skipped as
    /// offline (cp -R would recreate them in the vault): each is passed to `skipped` when
    /// the copy reaches it, and a new directory that holds one is made here (0700), its
    /// other entries copied one by one and its mode and times set after them, as cp does.
    /// Without `force` an existing file or symlink, and with or without it a file, symlink or
    /// directory in the way of the other kind, is the offline `exists` error (exit 20): as offline, only what
    /// comes before that first conflict is copied (existing directories are merged) and the
    /// error is thrown. Without a conflict or a skip one `cp -R` copies everything. With a
    /// class, every file the copy created or replaced then gets it; directories keep the
    /// default class they got from their parent and symlinks have none, exactly as offline.
    /// The class is set after the copy (cp cannot set it first), which changes only the
    /// header and keeps the times cp set. Returns how many entries were skipped.
    @discardableResult
    static func copy(_ sources: [String], to mp: String, dest: VaultPath, class cls: ProtectionClass?, force: Bool,
                     unchanged: (String) -> Void = { _ in }, skipped: (String) -> Void = { _ in }) throws -> Int {
        // As offline: a missing source or a `file/` fails before DEST is made.
        for source in sources { try Importer.checkSource(source) }
        try makeDirectories(mp, dest)
        let destDir = Array(path(mp, dest).utf8)
        var resolved: [[UInt8]] = []
        var plan = CopyPlan(force: force)
        for source in sources {
            let (dir, name) = try Importer.split(source)
            // cp -R follows `P/` as offline does (and lstat and open through it too).
            resolved.append(Array((StorePath.join(dir, name) + (Importer.followsLink(source) ? "/" : "")).utf8))
            if plan.conflict == nil {
                _ = plan.walk(resolved[resolved.count - 1], vault: dest.appending(Array(name.utf8)), into: destDir)
            }
        }
        var merged: [CopyPlan.Merged] = []
        if plan.conflict == nil && plan.skips == 0 {
            plan.jobs = [.copy(resolved, into: destDir)]
            plan.directories = []   // the one cp covers them (collect)
            merged = plan.merged    // but it also gives them their source's mode and times
        }
        var targets: [CopyTarget] = plan.directories
        var status: Int32 = 0
        var out = ""
        var skips = 0
        var made: [[UInt8]] = []   // directories made here, not yet given their mode and times
        var failure: Error?
        jobs: for job in plan.jobs {
            switch job {
            case .skip(let vault):
                skips += 1
                skipped(vault.description)
            case .makeDirectory(let p, let vault):
                guard mkdir(cPath(p), 0o700) == 0 else {
                    failure = StoreError.posix("mkdir \(vault)")
                    break jobs
                }
                made.append(p)
            case .finishDirectory(let p, let st):
                finish(p, st)
                made.removeAll { $0 == p }
            case .copy(let all, let into):
                // cp takes String arguments: an entry before the conflict whose local or mount
                // path is not UTF-8 (only a child name read from disk can be) is not copied.
                let srcs = all.filter { String(validating: $0, as: UTF8.self) != nil }
                guard !srcs.isEmpty, String(validating: into, as: UTF8.self) != nil else { continue }
                for src in srcs {
                    collect(src, landing: into + [47] + (src.split(separator: 47).last.map(Array.init) ?? []),
                            force: force, into: &targets)
                }
                // --remove-destination, not -f: cp -f writes through an existing symlink of the
                // vault, possibly to a file outside it; offline, --force replaces the link itself.
                (status, out) = MountFlow.runTool(["cp", "-R", "--preserve=mode,timestamps", force ? "--remove-destination" : "-n"]
                                                  + srcs.map { String(decoding: $0, as: UTF8.self) }
                                                  + [String(decoding: into, as: UTF8.self) + "/"])
                if status != 0 { break jobs }
            }
        }
        // A directory the user already had keeps its mode and times, as offline (cp -R gives
        // one it merges into its source's); its mtime is now if the copy added or replaced
        // an entry in it, as the store's own directory would have.
        for m in merged { restore(m) }
        // After a failure, the directories made here still get their modes and times, as
        // offline, when the mode leaves them open to their owner for a second run.
        for job in plan.jobs {
            if case .finishDirectory(let p, let st) = job, made.contains(p), PendingDirectory.keepsOwnerAccess(st.st_mode) { finish(p, st) }
        }
        if let failure { throw failure }
        // cp copies no extended attribute (it would copy every namespace it can and write
        // the mount's virtual ones): the user.* ones offline import copies, as it does.
        // After a failed copy, only the entries it created are sure to be new copies.
        for t in targets where status == 0 || !t.existed {
            do { try copyXattrs(t.source, to: t.path) } catch { if status == 0 { throw error } }
        }
        if let c = cls {
            for t in targets where !t.isDirectory && (status == 0 || !t.existed) {
                let p = cPath(t.path)
                do { try setClass(p, c, display: String(decoding: t.path, as: UTF8.self)) } catch { if status == 0 { throw error } }
            }
        }
        guard status == 0 else {
            // A full store is its own error (exit 19), as offline; cp runs in the C locale.
            if out.contains("No space left on device") || out.contains("Disk quota exceeded") { throw StoreError.noSpace }
            throw CLIError.failed("copy through the mount failed: \(out.trimmedWhitespace())")
        }
        for u in plan.unchanged { unchanged(u.description) }
        if let conflict = plan.conflict { throw StoreError.exists(conflict.description) }
        return skips
    }

    /// Copies the `user.*` attributes of local `src` that offline import copies
    /// (`Importer.importsXattr`) to `dst` on the mount, which seals them. A source
    /// filesystem without xattrs has none; an attribute removed since it was listed is
    /// passed over. The owner may lack write permission on `dst` (cp gave it its source's
    /// mode), which setting a user attribute needs: it then gets it for the time of the
    /// copy (chmod changes neither atime nor mtime).
    static func copyXattrs(_ src: [UInt8], to dst: [UInt8]) throws {
        let display = String(decoding: dst, as: UTF8.self)
        // Only regular files and directories are targets; O_NONBLOCK in case one was swapped.
        let fd = Glibc.open(cPath(src), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(String(decoding: src, as: UTF8.self))") }
        defer { close(fd) }
        let names = try OfflineXattr.names(fd).filter(Importer.importsXattr)
        guard !names.isEmpty else { return }
        let d = cPath(dst)
        var st = stat()
        guard lstat(d, &st) == 0 else { throw StoreError.posix("stat \(display)") }
        var opened = false
        defer { if opened { _ = chmod(d, st.st_mode & 0o7777) } }
        for name in names {
            var value: [UInt8]
            do { value = try OfflineXattr.get(fd, name) } catch StoreError.io(let e, _) where e == ENODATA { continue }
            defer { secureZero(&value) }
            while lsetxattr(d, OfflineXattr.cName(name), value, value.count, 0) != 0 {
                guard errno == EACCES, !opened, st.st_mode & S_IWUSR == 0, chmod(d, (st.st_mode & 0o7777) | S_IWUSR) == 0 else {
                    throw StoreError.posix("set the extended attribute \(String(decoding: name, as: UTF8.self)) of \(display)")
                }
                opened = true
            }
        }
    }

    /// An existing directory cp merged into: its mode and atime back, its mtime back unless
    /// the copy added or replaced one of its entries (then now).
    private static func restore(_ m: CopyPlan.Merged) {
        let c = cPath(m.path)
        var now = stat()
        guard lstat(c, &now) == 0, OfflineSys.isDirectory(now) else { return }
        if now.st_mode & 0o7777 != m.before.st_mode & 0o7777 { _ = chmod(c, m.before.st_mode & 0o7777) }
        let mtime = m.changed ? timespec(tv_sec: 0, tv_nsec: Int(UTIME_NOW_VALUE)) : m.before.st_mtim
        _ = utimensat(AT_FDCWD, c, [m.before.st_atim, mtime], AT_SYMLINK_NOFOLLOW)
    }

    /// A directory made by the copy gets its source's mode and times after its entries, as
    /// `cp -R --preserve=mode,timestamps` gives them.
    private static func finish(_ p: [UInt8], _ st: stat) {
        let c = cPath(p)
        _ = chmod(c, st.st_mode & 0o7777)
        _ = utimensat(AT_FDCWD, c, [st.st_atim, st.st_mtim], AT_SYMLINK_NOFOLLOW)
    }

    /// The offline importer's walk, done on the mount before any copy: what it would skip,
    /// the first entry it would refuse without `force` (`conflict`), and the steps that copy
    /// exactly what it would have copied before refusing.
    struct CopyPlan {
        enum Job {
            /// One `cp -R` of local sources into a mount directory.
            case copy([[UInt8]], into: [UInt8])
            /// A new directory whose entries are not all copied (it holds a skipped one).
            case makeDirectory([UInt8], VaultPath)
            /// Its source's mode and times, after its entries.
            case finishDirectory([UInt8], stat)
            /// A FIFO, socket or device: named, not copied.
            case skip(VaultPath)
        }
        let force: Bool
        var jobs: [Job] = []
        /// Directories the walk merged into or made itself and finished (not inside one
        /// `cp -R`), which get their source's xattrs after the copy, as offline.
        var directories: [CopyTarget] = []
        /// An existing directory the walk merges into, as it was, and whether the copy adds
        /// or replaces one of its entries.
        struct Merged {
            let path: [UInt8]
            let before: stat
            let changed: Bool
        }
        var merged: [Merged] = []
        var conflict: VaultPath?
        var skips = 0
        /// Files and symlinks already in the vault as the source has them (offline's
        /// `isUnchanged`): not a conflict, and `cp -n` leaves them alone.
        var unchanged: [VaultPath] = []

        init(force: Bool) { self.force = force }

        /// A source directory being walked: what deciding its fate after its entries needs,
        /// its entries and the next one to walk.
        struct Frame {
            let src: [UInt8]
            let vault: VaultPath
            let into: [UInt8]
            let landing: [UInt8]
            let st: stat
            let exists: Bool
            /// `jobs.count` and `skips` before the directory's own jobs.
            let mark: Int
            let skipsBefore: Int
            let entries: [OfflineSys.Entry]
            var next = 0
        }

        /// What one source is to the walk.
        enum Visit {
            case conflict
            case done
            case directory(Frame)
        }

        /// Walks local `src`, landing at `vault` (mount directory `into` + its name), depth
        /// first in the order of each listing. Returns true at the first conflict. An explicit
        /// stack, not recursion: a tree can be nested deeper than a thread's stack holds
        /// frames (a recursion per level crashed, SIGSEGV, at some 1,650 levels).
        mutating func walk(_ src: [UInt8], vault: VaultPath, into: [UInt8]) -> Bool {
            var stack: [Frame] = []
            switch visit(src, vault: vault, into: into) {
            case .conflict: return true
            case .done: return false
            case .directory(let f): stack.append(f)
            }
            while let i = stack.indices.last {
                guard stack[i].next < stack[i].entries.count else {
                    leave(stack.removeLast())
                    continue
                }
                let e = stack[i].entries[stack[i].next]
                stack[i].next += 1
                let f = stack[i]
                switch visit(f.src + [47] + e.raw, vault: f.vault.appending(e.raw), into: f.landing) {
                case .conflict: return true
                case .done: break
                case .directory(let sub): stack.append(sub)
                }
            }
            return false
        }

        /// Everything about `src` that comes before its entries: a directory to walk is
        /// listed (and its job or merge recorded) and returned.
        private mutating func visit(_ src: [UInt8], vault: VaultPath, into: [UInt8]) -> Visit {
            let name = vault.lastName ?? []
            let landing = into + [47] + name
            var st = stat(), there = stat()
            // An unreadable source: copied (cp reports its own errors).
            guard lstat(cPath(src), &st) == 0 else {
                add(src, into: into)
                return .done
            }
            guard OfflineSys.isDirectory(st) || OfflineSys.isRegular(st) || (st.st_mode & S_IFMT) == S_IFLNK else {
                jobs.append(.skip(vault))
                skips += 1
                return .done
            }
            let exists = lstat(cPath(landing), &there) == 0
            if OfflineSys.isDirectory(st) {
                if exists && !OfflineSys.isDirectory(there) {
                    // A file or symlink in the way is never replaced by a directory, as
                    // offline: the `exists` error, with --force too (not cp's).
                    conflict = vault
                    return .conflict
                }
                let fd = Glibc.open(cPath(src), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard fd >= 0 else { add(src, into: into); return .done }
                let entries = (try? OfflineSys.list(fd)) ?? []   // sorted by name, as offline
                close(fd)
                // Merged like cp -r; a new directory is one cp -R unless it holds a skipped entry.
                let mark = jobs.count, skipsBefore = skips
                if !exists { jobs.append(.makeDirectory(landing, vault)) }
                if exists {
                    var child = stat()
                    let changed = entries.contains { e in
                        lstat(cPath(landing + [47] + e.raw), &child) != 0
                            || (force && !OfflineSys.isDirectory(child))
                    }
                    merged.append(Merged(path: landing, before: there, changed: changed))
                }
                return .directory(Frame(src: src, vault: vault, into: into, landing: landing, st: st, exists: exists,
                                        mark: mark, skipsBefore: skipsBefore, entries: entries))
            }
            // An existing file or symlink is refused without force; a directory is never
            // replaced by a file or symlink, with force either (offline's `exists`, not cp's error).
            if exists && !force && CopyPlan.same(src, st, landing, there) { unchanged.append(vault); return .done }
            if exists && (!force || OfflineSys.isDirectory(there)) { conflict = vault; return .conflict }
            add(src, into: into)
            return .done
        }

        /// Whether the mount's `landing` is already the local `src`: a regular file of the
        /// same size and modification time, or a symlink with the same target, as offline.
        static func same(_ src: [UInt8], _ st: stat, _ landing: [UInt8], _ there: stat) -> Bool {
            if OfflineSys.isRegular(st) && OfflineSys.isRegular(there) {
                return st.st_size == there.st_size && st.st_mtim.tv_sec == there.st_mtim.tv_sec
                    && st.st_mtim.tv_nsec == there.st_mtim.tv_nsec
            }
            guard OfflineSys.isSymlink(st) && OfflineSys.isSymlink(there) else { return false }
            var a = [CChar](repeating: 0, count: 4097), b = [CChar](repeating: 0, count: 4097)
            let n = readlink(cPath(src), &a, a.count), m = readlink(cPath(landing), &b, b.count)
            return n >= 0 && n == m && a[0..<n] == b[0..<m]
        }

        /// A directory whose entries are all walked: a new one without a skipped entry is one
        /// `cp -R` after all; otherwise it gets its xattrs (and, if made here, its mode) after.
        private mutating func leave(_ f: Frame) {
            if !f.exists && skips == f.skipsBefore {
                jobs.removeSubrange(f.mark...)
                add(f.src, into: f.into)
                return
            }
            directories.append(CopyTarget(source: f.src, path: f.landing, existed: f.exists, isDirectory: true))
            if !f.exists { jobs.append(.finishDirectory(f.landing, f.st)) }
        }

        private mutating func add(_ src: [UInt8], into: [UInt8]) {
            if case .copy(let sources, let last)? = jobs.last, last == into { jobs[jobs.count - 1] = .copy(sources + [src], into: into) }
            else { jobs.append(.copy([src], into: into)) }
        }
    }

    /// A raw path as a NUL-terminated C string (local names need not be UTF-8).
    static func cPath(_ p: [UInt8]) -> [CChar] { p.map { CChar(bitPattern: $0) } + [0] }

    /// A regular file the copy will write, or a directory it makes or merges into, with its
    /// local source, and whether it was there before (a file is then written only with force).
    struct CopyTarget {
        let source: [UInt8]
        let path: [UInt8]
        let existed: Bool
        let isDirectory: Bool
    }

    /// The regular files a copy of local `src` to `landing` on the mount creates or, with
    /// `force`, replaces, and the directories it makes or merges into. Raw bytes: a local
    /// name need not be valid UTF-8.
    private static func collect(_ src: [UInt8], landing: [UInt8], force: Bool, into out: inout [CopyTarget]) {
        // An explicit stack, not recursion (a tree can be nested deeper than a thread's stack
        // holds frames): each directory with its entries, the next one to visit, and whether
        // it existed; a directory goes to `out` after its entries, as offline.
        var stack: [(src: [UInt8], landing: [UInt8], existed: Bool, entries: [OfflineSys.Entry], next: Int)] = []
        func visit(_ src: [UInt8], _ landing: [UInt8]) {
            var st = stat(), there = stat()
            guard lstat(cPath(src), &st) == 0 else { return }
            let existed = lstat(cPath(landing), &there) == 0
            if OfflineSys.isRegular(st) {
                // cp -n skips an existing file; a symlink or directory in the way is not a copy.
                if !existed || (force && OfflineSys.isRegular(there)) {
                    out.append(CopyTarget(source: src, path: landing, existed: existed, isDirectory: false))
                }
                return
            }
            guard OfflineSys.isDirectory(st), !existed || OfflineSys.isDirectory(there) else { return }
            let fd = Glibc.open(cPath(src), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return }
            defer { close(fd) }
            stack.append((src, landing, existed, (try? OfflineSys.list(fd)) ?? [], 0))
        }
        visit(src, landing)
        while let i = stack.indices.last {
            guard stack[i].next < stack[i].entries.count else {
                let f = stack.removeLast()
                out.append(CopyTarget(source: f.src, path: f.landing, existed: f.existed, isDirectory: true))
                continue
            }
            let e = stack[i].entries[stack[i].next]
            stack[i].next += 1
            visit(stack[i].src + [47] + e.raw, stack[i].landing + [47] + e.raw)
        }
    }
}
