import Glibc
import PhotoVaultCrypto

/// Checks a whole user tree offline (`photovault fsck`): every `.pvdir`, every entry name
/// (long-name companions included), every file header and every chunk of every file (read
/// through `ContentFile`, so exactly what a mount would accept), every symlink target and
/// every `user.pv.*` extended attribute. Entries that belong to no PhotoVault structure are
/// reported, never fatal.
///
/// Without `repair` nothing is written: files are opened read-only (with O_NOATIME where
/// permitted) and only a shared `TreeLock` is taken. With `repair` (exclusive lock) fsck
/// makes exactly two kinds of change, each listed in `FsckSummary.actions`:
///  1. an entry that cannot be decrypted — a damaged name, foreign entry,
///     directory without a valid `.pvdir`, file with a damaged header or chunk, damaged
///     symlink, unsupported file type or a root `.pvmount` that is not a regular file — is
///     moved whole into `/lost+found` (an ordinary encrypted directory at the tree root,
///     created if missing) under a new, valid name;
///     a long-named entry's companion is removed after the move, as FORMAT.md prescribes for
///     any entry leaving a directory; one that cannot be moved (`/lost+found` cannot be
///     created or opened, or the rename fails) is reported `repairFailed`, counted in
///     `FsckSummary.leftInPlace` and left in place, and the repair goes on. A sync tool's
///     conflict copy is never moved (it is shown under its original's name, or reported
///     `syncConflict` and left in place when that name cannot be read); debris in which
///     nothing can be read (an orphan companion, a foreign file whose header does not open)
///     is set aside in the root's `NameCodec.debrisDirectory` instead, out of the mount's view;
///  2. leftover `.pvtmp-*` temp files are deleted (a temp directory only if it holds
///     nothing but `.pvdir` and temp files).
/// Damage is only what was read and failed authentication or PhotoVault's format
/// (`Fsck.isDamage`). An entry that could not be read (EIO, EACCES, EMFILE, a locked class
/// key) may be healthy: it is reported `unreadable` and never moved. Damaged extended
/// attributes are reported, not repaired. `/lost+found` itself is not examined (its entries
/// are counted), so a second fsck after a repair is clean.
public final class Fsck {
    public let tree: UserTree
    public let lockTimeout: Double
    public static let lostAndFoundName = "lost+found"

    public init(tree: UserTree, lockTimeout: Double = 2) {
        self.tree = tree
        self.lockTimeout = lockTimeout
    }

    public func run(repair: Bool = false, progress: @escaping (ProgressEvent) -> Void = { _ in }) throws -> FsckSummary {
        let lock = try TreeLock(root: tree.root, mode: repair ? .exclusive : .shared, timeout: lockTimeout)
        defer { lock.release() }
        var walk = Walk(tree: tree, repair: repair, progress: progress)
        let resolver: VaultResolver
        do { resolver = try VaultResolver(tree: tree) }
        catch let error where Fsck.isDamage(error) {
            // Without the root's .pvdir nothing below can be named; there is nowhere to repair to.
            // Damage (a bad MAC, size or magic, or a version this photovault does not read) is
            // reported as it is for any directory, not thrown.
            // Not `access`, which follows a symlink: a dangling one is there, and misshapen.
            var st = stat()
            let missing = lstat(StorePath.join(tree.root, DirectoryInfo.fileName), &st) != 0 && errno == ENOENT
            walk.report("/", "", missing ? FsckProblem.Kind.directoryInfoMissing : .directoryInfoDamaged, Fsck.detail(error))
            return walk.summary
        }
        walk.resolver = resolver
        switch lostAndFoundName(resolver) {
        case .success(let name): walk.summary.lostAndFound = name
        case .failure(let f):
            // Nowhere to move to: repair leaves every damaged entry in place, and the walk
            // examines all of the root (it skips no lost+found it could not look at).
            walk.lostAndFoundFailure = f
            if repair {
                walk.report("/" + f.name, f.storePath, .unreadable,
                            "cannot be looked at (\(f.error)): repair moved nothing into /\(Fsck.lostAndFoundName), damaged entries are left in place")
            }
        }
        walk.summary.directories += 1
        try walk.directory(resolver.root, storePath: "", isRoot: true)
        walk.linkCompanionsLeft(root: resolver.root)
        return walk.summary
    }

    /// Where repair puts what it moves: `lost+found` at the tree root, or — when an entry of
    /// that name is not a directory (a user's file, or a symlink) — the first of
    /// `lost+found.1`, `lost+found.2`, … that is a directory that opens (its `.pvdir`
    /// authenticates) or free. A directory that cannot be opened is passed over like a
    /// non-directory. A candidate that cannot be stat'ed (EIO, EACCES, …) ends the search with
    /// that error: passing over it, the next one could fail alike, and fsck looped forever.
    /// The walk skips only the one chosen.
    func lostAndFoundName(_ resolver: VaultResolver) -> Result<String, LostAndFoundFailure> {
        var n = 0
        while true {
            let name = n == 0 ? Fsck.lostAndFoundName : "\(Fsck.lostAndFoundName).\(n)"
            let plain = Array(name.utf8)
            let entry = VaultEntry(parent: resolver.root, name: plain, encoded: tree.names.encode(plain, in: resolver.root.info))
            switch Result(catching: { try entry.stat() }) {
            case .success(nil): return .success(name)
            case .success(let st?) where OfflineSys.isDirectory(st):
                // One whose own .pvdir is damaged cannot take entries: the walk reports it.
                if (try? resolver.open(entry)) != nil { return .success(name) }
                n += 1
            case .success: n += 1
            case .failure(let error):
                return .failure(LostAndFoundFailure(name: name, storePath: entry.encoded.entry, error: error))
            }
        }
    }

    /// The candidate for /lost+found that could not be stat'ed, and why.
    struct LostAndFoundFailure: Error {
        let name: String
        let storePath: String
        let error: Error
    }

    static func engineName(_ e: ConflictName.Engine) -> String {
        switch e {
        case .syncthing: return "Syncthing"
        case .nextcloud: return "Nextcloud"
        case .owncloud: return "ownCloud"
        case .dropbox: return "Dropbox"
        case .rclone: return "rclone"
        }
    }

    /// Reading must not even touch atimes (`FileIO.noAtime`); refused with EPERM for files
    /// the caller does not own, then fsck opens without it.
    static let noAtime = FileIO.noAtime

    /// `%` → `%25` (names never contain `/`), so that `%2F` in a lost+found name always
    /// stands for a path separator.
    static func escape(_ name: String) -> String {
        var out = ""
        for ch in name { out += ch == "%" ? "%25" : String(ch) }
        return out
    }

    /// Whether `error` says the data itself is damaged (authentication or format failure), so
    /// that repair may act on it. Anything else (an I/O error, a permission, too many open
    /// files, a locked class key) says nothing about the bytes: reported `unreadable`, no more.
    static func isDamage(_ error: Error) -> Bool {
        switch error {
        case StoreError.integrity, StoreError.unknownVersion, StoreError.unknownVersionOf, StoreError.corruptStore, StoreError.corruptRecord,
             CryptoError.authenticationFailed:
            return true
        default:
            return false
        }
    }

    /// What a damage error says, without the path it names (the report has its own).
    static func detail(_ error: Error) -> String {
        if case StoreError.integrity(_, let d) = error { return d }
        return "\(error)"
    }

    static func openForCheck(_ dirfd: Int32, _ name: [CChar], _ flags: Int32) -> Int32 {
        let fd = openat(dirfd, name, flags | noAtime | O_NOFOLLOW | O_CLOEXEC)
        if fd >= 0 || errno != EPERM { return fd }
        return openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC)
    }

    /// A ciphertext file found regular by `lstat`: opened without waiting or following (a FIFO
    /// or symlink put in its place since), checked again on the descriptor (`.corruptStore`).
    static func openFileForCheck(_ dirfd: Int32, _ name: [CChar]) throws -> Int32 {
        do { return try FileIO.openRegular(dirfd, name, O_RDONLY | noAtime, what: "file") }
        catch StoreError.io(let e, _) where e == EPERM {
            return try FileIO.openRegular(dirfd, name, O_RDONLY, what: "file")
        }
    }

    struct Walk {
        let tree: UserTree
        let repair: Bool
        let progress: (ProgressEvent) -> Void
        var resolver: VaultResolver!
        var summary = FsckSummary()
        var lostAndFound: VaultDirectory?
        /// Set when no /lost+found could be chosen: repair then moves nothing.
        var lostAndFoundFailure: LostAndFoundFailure?
        /// Why /lost+found could not be created or opened, once it failed: every entry repair
        /// would move is then reported `repairFailed` with it and left in place.
        var lostAndFoundOpenFailure: Error?
        /// File ID of every header read so far, with its inode and path: two inodes with one
        /// ID are a copied header (`fileIDShared`).
        /// `origin`: the entry's store path with any sync-conflict marker taken off, the same
        /// for a file and the copies a sync engine made of it, which share its header.
        var fileIDs: [[UInt8]: (dev: UInt64, ino: UInt64, path: String, origin: String)] = [:]
        /// Symlink target companions in the tree's root (`LinkTarget`), and the ones some
        /// symlink names: the rest are orphans, left by a crash between a companion and its
        /// symlink (or between a symlink's removal and its companion's).
        var linkCompanions: [String] = []
        var linkCompanionsNamed: Set<String> = []
        /// Hole maps in the tree's root (`HoleMapFile`): one whose file ID no file has is an
        /// orphan, left by a crash between a file's last unlink and its map's removal.
        var holeMaps: [String] = []

        init(tree: UserTree, repair: Bool, progress: @escaping (ProgressEvent) -> Void) {
            self.tree = tree
            self.repair = repair
            self.progress = progress
        }

        mutating func report(_ path: String, _ storePath: String, _ kind: FsckProblem.Kind, _ detail: String) {
            summary.problems.append(FsckProblem(path: path, storePath: storePath.isEmpty ? "." : storePath, kind: kind, detail: detail))
        }

        /// "" + n → n (store paths), "/" + n → /n, p + n → p/n.
        static func join(_ parent: String, _ name: String) -> String {
            if parent.isEmpty { return name }
            return parent.hasSuffix("/") ? parent + name : parent + "/" + name
        }

        /// A directory being walked: its entries, and the next one to check.
        struct Frame {
            let dir: VaultDirectory
            let storePath: String
            let isRoot: Bool
            let entries: [OfflineSys.Entry]
            let present: Set<[UInt8]>
            var next = 0
        }

        /// Checks every entry of an open, authenticated directory and of every directory below
        /// it, depth first, in the order of each listing. An explicit stack, not recursion: a
        /// tree can be nested deeper than a thread's stack holds frames (fsck crashed, SIGSEGV,
        /// at some 1,500 levels). Each level holds one descriptor, so a tree nested deeper than
        /// the descriptor limit is reported `unreadable` there, and the walk goes on.
        mutating func directory(_ top: VaultDirectory, storePath: String, isRoot: Bool) throws {
            var stack: [Frame] = []
            if let f = enter(top, storePath: storePath, isRoot: isRoot) { stack.append(f) }
            while let i = stack.indices.last {
                guard stack[i].next < stack[i].entries.count else {
                    stack.removeLast()   // closes its descriptor
                    continue
                }
                let f = stack[i]
                stack[i].next += 1
                if let sub = try check(f.entries[f.next], in: f.dir, storePath: f.storePath, isRoot: f.isRoot, present: f.present),
                   let child = enter(sub.dir, storePath: sub.storePath, isRoot: false) {
                    stack.append(child)
                }
            }
        }

        /// Lists an open, authenticated directory; nil (reported) if it cannot be listed.
        mutating func enter(_ dir: VaultDirectory, storePath: String, isRoot: Bool) -> Frame? {
            progress(.directory(dir.path.description))
            let entries: [OfflineSys.Entry]
            do { entries = try OfflineSys.list(dir.fd) } catch {
                // Not damage (the entries may be intact): reported, and the walk goes on.
                report(dir.path.description, storePath, .unreadable, "cannot list the directory: \(error)")
                return nil
            }
            return Frame(dir: dir, storePath: storePath, isRoot: isRoot, entries: entries, present: Set(entries.map { $0.raw }))
        }

        /// Checks one entry of `dir`. Returns a healthy subdirectory (open, its `.pvdir`
        /// authenticated) with its store path, for the walk to enter.
        mutating func check(_ e: OfflineSys.Entry, in dir: VaultDirectory, storePath: String, isRoot: Bool,
                            present: Set<[UInt8]>) throws -> (dir: VaultDirectory, storePath: String)? {
            let name = e.name
            let sp = Walk.join(storePath, name)
            let shownInDir = Walk.join(dir.path.description, name)   // plaintext dir + ciphertext entry
            if name == DirectoryInfo.fileName { return nil }
            if isRoot && name == NameCodec.debrisDirectory {
                // What an earlier repair set aside; not examined (nothing in it reads).
                if let st = try? OfflineSys.lstat(dir.fd, e.cName), OfflineSys.isDirectory(st) { return nil }
            }
            if NameCodec.isInternal(name) && !NameCodec.isInternalItself(name) {
                internalCopy(e, in: dir, shown: shownInDir, storePath: sp)
                return nil
            }
            if SyncDebris.matches(name) {
                report(shownInDir, sp, .syncDebris, "left by a sync engine or a desktop: not PhotoVault's, left alone")
                return nil
            }
            if isRoot && name == TreeLock.mountLockName {
                try mountLock(dir, e, shown: shownInDir, storePath: sp)
                return nil
            }
            if name.hasPrefix(AtomicFile.tempPrefix) {
                report(shownInDir, sp, .leftoverTemp, "temp file of an interrupted write")
                if repair { removeTemp(dir.fd, e, storePath: sp) }
                return nil
            }
            if isRoot && HoleMapFile.isCompanion(name) {
                holeMaps.append(name)
                return nil   // judged once every file was seen (`linkCompanionsLeft`)
            }
            if isRoot && LinkTarget.isCompanion(name) {
                linkCompanions.append(name)
                return nil   // judged once every symlink was seen (`linkCompanionsLeft`)
            }
            if name.hasPrefix(NameCodec.longPrefix) && name.hasSuffix(NameCodec.companionSuffix) {
                let owner = Array(e.raw.dropLast(NameCodec.companionSuffix.utf8.count))
                let ownerName = String(decoding: owner, as: UTF8.self)
                // A sync engine's copy of the long-named entry shares its companion.
                if !present.contains(owner) && !present.contains(where: { ConflictName.isCopy(String(decoding: $0, as: UTF8.self), of: ownerName) }) {
                    report(shownInDir, sp, .orphanCompanion, "long-name companion without its entry")
                    // Only a name, of an entry that is gone: nothing to recover in /lost+found.
                    if repair { try setAside(dir, e, shown: shownInDir, storePath: sp) }
                }
                return nil   // otherwise checked with its entry
            }
            // The name itself.
            var plain: [UInt8]
            var conflict: (original: String, marks: [ConflictName])?
            switch decodeName(e.name, in: dir) {
            case .success(let p):
                plain = p
            case .failure(let problem):
                // A sync engine's conflict copy: shown under its original's name with a mark.
                // One whose original name cannot be read is reported, never moved: repair would
                // make it a nameless lost+found entry.
                if problem.kind != .unreadable, let r = ConflictName.root(name) {
                    switch decodeName(r.original, in: dir) {
                    case .success(let p):
                        plain = ConflictName.displayName(p, marks: r.marks.map(\.mark))
                        conflict = r
                    case .failure(let why):
                        report(shownInDir, sp, .syncConflict,
                               "a \(Fsck.engineName(r.marks[0].engine)) conflict copy of an entry whose name cannot be read (\(why.detail)); left in place")
                        return nil
                    }
                } else {
                    report(shownInDir, sp, problem.kind, problem.detail)
                    guard repair && problem.kind != .unreadable else { return nil }
                    if holdsNothingReadable(dir, e) {
                        try setAside(dir, e, shown: shownInDir, storePath: sp)
                    } else {
                        try quarantine(dir, e, shown: shownInDir, storePath: sp, suggested: "bad-name " + lostName(dir.path) + "%2F" + name, isLong: true)
                    }
                    return nil
                }
            }
            let path = dir.path.appending(plain)
            if isRoot && lostAndFoundFailure == nil && plain == Array(summary.lostAndFound.utf8) {
                summary.lostAndFoundEntries += countVisible(dir.fd, e)
                return nil
            }
            guard let st = lstatEntry(dir, e, shown: path.description, storePath: sp) else { return nil }
            var damaged = false
            var healthy: VaultDirectory?
            if OfflineSys.isDirectory(st) {
                (damaged, healthy) = subdirectory(dir, e, path: path, storePath: sp)
            } else if OfflineSys.isRegular(st) {
                damaged = file(dir, e, path: path, storePath: sp)
            } else if OfflineSys.isSymlink(st) {
                damaged = symlink(dir, e, path: path, storePath: sp)
            } else {
                // A FIFO, socket or device node made through the mount (mknod): stored as
                // itself under its sealed name, which authenticated above; no content.
                summary.specialFiles += 1
            }
            if let c = conflict {
                report(path.description, sp, .syncConflict, conflictDetail(c, copy: st, in: dir))
            }
            if damaged && repair {
                try quarantine(dir, e, shown: path.description, storePath: sp, suggested: lostName(path), isLong: true)
            }
            return healthy.map { (dir: $0, storePath: sp) }
        }

        /// `a Syncthing conflict copy of /trip/a.jpg: this copy 1200 bytes, modified
        /// 2026-12-07 03:02:24 UTC; the original 1500 bytes, modified ...`.
        func conflictDetail(_ c: (original: String, marks: [ConflictName]), copy: stat, in dir: VaultDirectory) -> String {
            let originalPath: String
            if case .success(let p) = decodeName(c.original, in: dir) { originalPath = dir.path.appending(p).description }
            else { originalPath = "an entry" }
            var out = "a \(Fsck.engineName(c.marks[0].engine)) conflict copy of \(originalPath): this copy \(version(copy))"
            if let o = try? OfflineSys.lstat(dir.fd, Array(c.original.utf8CString)) {
                out += "; the original \(version(o))"
            } else {
                out += "; the original is not there (the engine kept both versions as copies, or it was deleted)"
            }
            return out + ". Not damage: keep one (rename it), delete the other"
        }

        func version(_ st: stat) -> String {
            let size = OfflineSys.isRegular(st) ? "\(tree.layout.reportedSize(ciphertextSize: UInt64(max(0, st.st_size)))) bytes" : OfflineSys.typeName(st)
            var t = st.st_mtim.tv_sec
            var tmv = tm()
            gmtime_r(&t, &tmv)
            var buf = [CChar](repeating: 0, count: 32)
            strftime(&buf, buf.count, "%Y-%m-%d %H:%M:%S UTC", &tmv)
            return "\(size), modified \(String(cString: buf))"
        }

        /// A sync engine's copy of an internal file: of `.pvdir` (another version of the
        /// folder's parameters, whose names are read too), of a long-name companion (the same
        /// name), of the mount lock or a temp file. Reported, never moved or deleted.
        mutating func internalCopy(_ e: OfflineSys.Entry, in dir: VaultDirectory, shown: String, storePath: String) {
            guard let r = ConflictName.root(e.name) else { return }
            let engine = Fsck.engineName(r.marks[0].engine)
            if r.original == DirectoryInfo.fileName {
                let detail: String
                do {
                    let other = try DirectoryInfo.readFile(dirfd: dir.fd, name: e.name, keyring: tree.keyring)
                    let same = other.id == dir.info.id
                    detail = "a \(engine) conflict copy of this folder's \(DirectoryInfo.fileName) (two devices "
                        + (same ? "changed its default class: \(other.defaultClass) there, \(dir.info.defaultClass) in \(DirectoryInfo.fileName), which new files get)"
                                : "created the folder: the names written under either are shown; new ones go under \(DirectoryInfo.fileName))")
                } catch {
                    detail = "a \(engine) conflict copy of this folder's \(DirectoryInfo.fileName) that cannot be used (\(Fsck.detail(error))): names written under it are not shown"
                }
                report(dir.path.description, storePath, .syncConflict, detail)
            } else if r.original.hasSuffix(NameCodec.companionSuffix) {
                report(shown, storePath, .syncConflict, "a \(engine) conflict copy of a long-name companion (it holds the same name): can be deleted")
            } else {
                report(shown, storePath, .syncConflict, "a \(engine) conflict copy of the internal file \(r.original): can be deleted")
            }
        }

        /// The lstat of entry `e` of `dir`; nil if it vanished meanwhile, or (reported
        /// `unreadable`) if it cannot be stat'ed.
        mutating func lstatEntry(_ dir: VaultDirectory, _ e: OfflineSys.Entry, shown: String, storePath: String) -> stat? {
            do { return try OfflineSys.lstat(dir.fd, e.cName) } catch {
                report(shown, storePath, .unreadable, "\(error)")
                return nil
            }
        }

        /// The tree's mount lock (`TreeLock.mountLockName`): any regular file will do (it is
        /// only flocked). Anything else — a FIFO, socket, device, directory or symlink — makes
        /// every mount fail (`corruptStore`), so it is damage, and repair moves it whole into
        /// /lost+found like any misshapen entry; the next mount creates a new one.
        mutating func mountLock(_ root: VaultDirectory, _ e: OfflineSys.Entry, shown: String, storePath: String) throws {
            guard let st = lstatEntry(root, e, shown: shown, storePath: storePath), !OfflineSys.isRegular(st) else { return }
            report(shown, storePath, .mountLockDamaged,
                   "the mount lock is \(OfflineSys.typeName(st)), not a regular file: the tree cannot be mounted")
            if repair { try quarantine(root, e, shown: shown, storePath: storePath, suggested: "mount-lock " + e.name, isLong: false) }
        }

        struct NameProblem: Error { let kind: FsckProblem.Kind; let detail: String }

        /// The name checks of `NameCodec.decode`, each failure with its own kind: the entry
        /// `name`, under every version of the directory's `.pvdir`.
        func decodeName(_ name: String, in dir: VaultDirectory) -> Result<[UInt8], NameProblem> {
            var full = name
            if full.hasPrefix(NameCodec.longPrefix) {
                let companion = Array((name + NameCodec.companionSuffix).utf8CString)
                let fd: Int32
                do { fd = try FileIO.openRegular(dir.fd, companion, what: "long-name companion") }
                catch StoreError.io(let err, _) where err == ENOENT {
                    return .failure(NameProblem(kind: .longNameCompanionMissing, detail: "long-name companion file is missing"))
                } catch StoreError.corruptStore {
                    return .failure(NameProblem(kind: .longNameCompanionMismatch, detail: "long-name companion is not a regular file"))
                } catch {
                    return .failure(NameProblem(kind: .unreadable, detail: "cannot open long-name companion: \(error)"))
                }
                defer { close(fd) }
                let bytes: [UInt8]
                do { bytes = try FileIO.readAll(fd, limit: 4096) } catch {
                    if !Fsck.isDamage(error) {
                        return .failure(NameProblem(kind: .unreadable, detail: "cannot read long-name companion: \(error)"))
                    }
                    return .failure(NameProblem(kind: .longNameCompanionMismatch, detail: "long-name companion is too large"))
                }
                full = String(decoding: bytes, as: UTF8.self)
                guard NameCodec.isCanonicalCompanion(full, of: name) else {
                    return .failure(NameProblem(kind: .longNameCompanionMismatch, detail: "long-name companion does not match its entry"))
                }
            }
            guard let sealed = Base64URL.decode(full) else {
                return .failure(NameProblem(kind: .foreignEntry, detail: "not a PhotoVault name (a sync tool's conflict copy or a foreign file?)"))
            }
            guard let plain = ([dir.info.id] + dir.info.alternateIDs).lazy.compactMap({ try? self.tree.names.names.open(sealed, domain: $0) }).first else {
                return .failure(NameProblem(kind: .nameUndecryptable, detail: "name failed authentication (renamed or modified in the store)"))
            }
            // Authentic but no file name (as NameCodec.decode): never walked or joined into a
            // path; repair moves it under a name made of its ciphertext.
            guard NameCodec.isFileName(plain) else {
                return .failure(NameProblem(kind: .nameUndecryptable, detail: NameCodec.notAFileName))
            }
            return .success(plain)
        }

        /// Returns whether the directory itself is damaged, and the directory to enter if it is
        /// healthy.
        mutating func subdirectory(_ parent: VaultDirectory, _ e: OfflineSys.Entry, path: VaultPath,
                                   storePath: String) -> (damaged: Bool, healthy: VaultDirectory?) {
            let fd = Fsck.openForCheck(parent.fd, e.cName, O_RDONLY | O_DIRECTORY)
            guard fd >= 0 else {
                report(path.description, storePath, .unreadable, "cannot open directory: \(String(cString: strerror(errno)))")
                return (false, nil)
            }
            let info: DirectoryInfo
            do {
                info = try DirectoryInfo.read(dirfd: fd, keyring: tree.keyring)
            } catch {
                let missing = (try? OfflineSys.lstat(fd, DirectoryInfo.fileName)) ?? nil
                close(fd)
                guard Fsck.isDamage(error) else {
                    report(path.description, storePath, .unreadable, "cannot read \(DirectoryInfo.fileName): \(error)")
                    return (false, nil)
                }
                report(path.description, storePath, missing == nil ? .directoryInfoMissing : .directoryInfoDamaged, Fsck.detail(error))
                return (true, nil)
            }
            let dir = VaultDirectory(fd: fd, info: info, path: path)
            summary.directories += 1
            checkXattrs(fd, path: path.description, storePath: storePath)
            return (false, dir)
        }

        /// Authenticates the header and every chunk. Returns whether the file is damaged.
        mutating func file(_ dir: VaultDirectory, _ e: OfflineSys.Entry, path: VaultPath, storePath: String) -> Bool {
            let display = path.description
            let fd: Int32
            do { fd = try Fsck.openFileForCheck(dir.fd, e.cName) } catch {
                guard case StoreError.io(let err, _) = error else {
                    report(display, storePath, .unsupportedType, "not a regular file, directory or symlink")
                    return true
                }
                report(display, storePath, .unreadable, "cannot open: \(String(cString: strerror(err)))")
                return false
            }
            summary.files += 1
            let st: stat
            do { st = try OfflineSys.fstat(fd) } catch {
                close(fd)
                report(display, storePath, .unreadable, "\(error)")   // not skipped: the tree is not known clean
                return false
            }
            if st.st_size > 0 && st.st_size < FileHeader.size {
                close(fd)
                report(display, storePath, .headerTruncated, "\(st.st_size) bytes, shorter than the \(FileHeader.size)-byte header")
                return true
            }
            checkXattrs(fd, path: display, storePath: storePath)
            let content: ContentFile
            do {
                content = try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring, displayPath: display, holeMaps: tree.holeMaps())
            } catch {
                close(fd)
                switch error {
                case StoreError.integrity(_, let d): report(display, storePath, .headerDamaged, d)
                case StoreError.unknownVersion(let f, _), StoreError.unknownVersionOf(_, let f, _):
                    report(display, storePath, .headerDamaged, "unknown header version \(f)")
                default: report(display, storePath, .unreadable, "\(error)"); return false
                }
                return true
            }
            defer { content.close() }
            if let id = content.header?.fileID {
                // A sync engine's conflict copy is the same file edited on another device: same
                // header, same file ID (docs/SYNC.md). Not a copied header.
                let origin = Walk.join(StorePath.dirname(storePath) == "." ? "" : StorePath.dirname(storePath),
                                       ConflictName.root(e.name)?.original ?? e.name)
                if let first = fileIDs[id], first.dev != UInt64(st.st_dev) || first.ino != UInt64(st.st_ino), first.origin != origin {
                    report(display, storePath, .fileIDShared,
                           "has the file ID of \(first.path), another file: a header copied from it, so chunks can be moved between the two undetected")
                } else if fileIDs[id] == nil {
                    fileIDs[id] = (UInt64(st.st_dev), UInt64(st.st_ino), display, origin)
                }
            }
            let size: UInt64
            do { size = try content.size() }
            catch {
                guard case StoreError.integrity(_, let d) = error else {
                    report(display, storePath, .unreadable, "\(error)")
                    return false
                }
                report(display, storePath, .contentTruncated, d)
                return true
            }
            let (bad, failed, failure) = checkChunks(content, size: size)
            progress(.file(display, bytes: size))
            let total = (size + UInt64(tree.layout.chunkSize) - 1) / UInt64(tree.layout.chunkSize)
            func chunks(_ list: ChunkList) -> String {
                "\(list.count) of \(total) chunk\(total == 1 ? "" : "s")"
            }
            if let failure = failure {
                report(display, storePath, .unreadable, "\(chunks(failed)) could not be read (\(failed)): \(failure)")
            }
            guard bad.count == 0 else {
                report(display, storePath, .chunkDamaged, "\(chunks(bad)) failed authentication (\(bad))")
                return true
            }
            return false
        }

        /// Chunk indexes of one file: the exact count, and only the first `kept` of them, so
        /// that a huge file (a sparse one of a valid header and many GiB of zeros) cannot make
        /// the list, and fsck's report, grow without bound.
        struct ChunkList: CustomStringConvertible {
            static let kept = 64
            private(set) var count: UInt64 = 0
            private(set) var first: [UInt64] = []

            mutating func append(_ index: UInt64) {
                count += 1
                if first.count < Self.kept { first.append(index) }
            }

            mutating func append(_ indexes: Range<UInt64>) {
                count += UInt64(indexes.count)
                first += indexes.prefix(Self.kept - first.count)
            }

            /// `chunk 1, 5, 9` or, beyond the first `kept`, `chunk 0, 1, …, 63 and 1000 more`.
            var description: String {
                "chunk " + first.map(String.init).joined(separator: ", ")
                    + (count > UInt64(first.count) ? " and \(count - UInt64(first.count)) more" : "")
            }
        }

        /// Reads the file in large blocks; a block that fails is re-read chunk by chunk so that
        /// every damaged chunk is named, not only the first. Chunks lying in a hole of the
        /// ciphertext (zeros, never written) are counted as damaged without being read. Returns
        /// the chunks that failed authentication, and apart from them those that could not be
        /// read, with the first such error.
        mutating func checkChunks(_ content: ContentFile, size: UInt64) -> (damaged: ChunkList, unreadable: ChunkList, Error?) {
            let cs = UInt64(tree.layout.chunkSize)
            let chunksPerBlock = max(1, (1 << 20) / tree.layout.chunkSize)
            let block = chunksPerBlock * tree.layout.chunkSize
            let buf = UnsafeMutableRawPointer.allocate(byteCount: block, alignment: 16)
            defer { secureZero(UnsafeMutableRawBufferPointer(start: buf, count: block)); buf.deallocate() }
            var bad = ChunkList(), failed = ChunkList()
            var failure: Error?
            var offset: UInt64 = 0
            while offset < size {
                // Holes the file's map names, with nothing underneath: zeros, checked as such.
                let mapped = content.chunksInMappedHole(from: offset / cs)
                if mapped > 0 {
                    let n = mapped > (size - offset) / cs ? size - offset : mapped * cs
                    summary.chunksChecked += (n + cs - 1) / cs
                    offset += n
                    continue
                }
                let hole = content.chunksInHole(from: offset / cs)
                if hole > 0 {
                    bad.append(offset / cs ..< offset / cs + hole)
                    offset = min(size, offset + hole * cs)
                    continue
                }
                let want = Int(min(UInt64(block), size - offset))
                if let n = try? content.read(into: buf, count: want, offset: offset), n == want {
                    summary.bytesChecked += UInt64(n)
                    summary.chunksChecked += (UInt64(n) + cs - 1) / cs
                } else {
                    var o = offset
                    while o < offset + UInt64(want) {
                        let len = Int(min(cs, size - o))
                        do {
                            if try content.read(into: buf, count: len, offset: o) == len {
                                summary.bytesChecked += UInt64(len)
                                summary.chunksChecked += 1
                            } else {
                                bad.append(o / cs)
                            }
                        } catch where Fsck.isDamage(error) {
                            bad.append(o / cs)
                        } catch {
                            failed.append(o / cs)
                            failure = failure ?? error
                        }
                        o += UInt64(len)
                    }
                }
                offset += UInt64(want)
            }
            return (bad, failed, failure)
        }

        mutating func symlink(_ dir: VaultDirectory, _ e: OfflineSys.Entry, path: VaultPath, storePath: String) -> Bool {
            summary.symlinks += 1
            do {
                let stored = try OfflineSys.readLink(dir.fd, e.cName)
                if let c = LinkTarget.companionName(ofStored: stored) { linkCompanionsNamed.insert(c) }
                _ = try LinkTarget.open(stored, keyring: tree.keyring, treeRoot: tree.root)
                return false
            } catch StoreError.integrity(_, let d) {
                report(path.description, storePath, .symlinkDamaged, d)
                return true
            } catch {
                report(path.description, storePath, .unreadable, "\(error)")
                return false
            }
        }

        /// Root companions no symlink names, and hole maps of no file: reported
        /// `orphanCompanion`. Repair removes them (they hold a sealed target or a list of
        /// holes and nothing else), unless part of the tree could not be read: a symlink or
        /// a file there may still need one.
        mutating func linkCompanionsLeft(root: VaultDirectory) {
            let walkedAll = !summary.problems.contains { $0.kind == .unreadable }
            for name in linkCompanions where !linkCompanionsNamed.contains(name) {
                report("/" + name, name, .orphanCompanion, "symlink target companion without its symlink")
                if repair && walkedAll { unlinkat(root.fd, name, 0) }
            }
            for name in holeMaps where HoleMapFile.fileID(ofCompanion: name).map({ fileIDs[$0] == nil }) ?? false {
                report("/" + name, name, .orphanCompanion, "hole map without its file")
                if repair && walkedAll { unlinkat(root.fd, name, 0) }
            }
        }

        /// Only what was read and failed authentication is `xattrDamaged`; an attribute that
        /// could not be listed or read (EIO, E2BIG, ...) is `unreadable`, one removed since it was
        /// listed (ENODATA) is passed over.
        mutating func checkXattrs(_ fd: Int32, path: String, storePath: String) {
            let names: [String]
            do { names = try OfflineXattr.storedNames(fd) } catch {
                report(path, storePath, .unreadable, "cannot list extended attributes: \(error)")
                return
            }
            for stored in names where stored.hasPrefix(XattrCodec.storedPrefix) {
                guard tree.xattrs.plainName(stored) != nil else {
                    report(path, storePath, .xattrDamaged, "extended attribute \(stored) has a name that fails authentication")
                    continue
                }
                let sealed: [UInt8]
                do { sealed = try OfflineXattr.get(fd, stored) }
                catch StoreError.io(let e, _) where e == ENODATA { continue }
                catch {
                    report(path, storePath, .unreadable, "extended attribute \(stored) cannot be read: \(error)")
                    continue
                }
                do { _ = try tree.xattrs.openValue(sealed, storedName: stored) }
                catch { report(path, storePath, .xattrDamaged, "extended attribute \(stored): value failed authentication") }
            }
        }

        /// Entries of /lost+found that are not internal (it is not examined further).
        func countVisible(_ rootfd: Int32, _ e: OfflineSys.Entry) -> Int {
            guard let fd = try? OfflineSys.openDirectory(rootfd, e.cName) else { return 0 }
            defer { close(fd) }
            return ((try? OfflineSys.list(fd)) ?? []).filter { !NameCodec.isInternal($0.name) }.count
        }

        // MARK: repair

        /// A plaintext path as one name: `/a/b%c` → `a%2Fb%25c` (reversible).
        func lostName(_ path: VaultPath) -> String {
            path.components.map {
                Fsck.escape(String(decoding: $0, as: UTF8.self))
            }.joined(separator: "%2F")
        }

        /// /lost+found, created (mode 0700) if missing, then opened once. A failure to create
        /// or open it is returned, and kept for every later entry; a failed fsync of the root
        /// after creating it is thrown (it stops the repair, as a failed fsync after a move does).
        mutating func openLostAndFound() throws -> Result<VaultDirectory, Error> {
            if let lf = lostAndFound { return .success(lf) }
            if let failure = lostAndFoundOpenFailure { return .failure(failure) }
            let entry: VaultEntry
            var created = false
            do {
                entry = try resolver.entry(VaultPath(components: [Array(summary.lostAndFound.utf8)]))
                if try entry.stat() == nil { created = try resolver.createDirectory(entry, mode: 0o700) }
            } catch {
                lostAndFoundOpenFailure = error
                return .failure(error)
            }
            if created { try AtomicFile.syncDirectory(entry.parent.fd, entry.path.description) }
            do {
                let lf = try resolver.open(entry)
                lostAndFound = lf
                return .success(lf)
            } catch {
                lostAndFoundOpenFailure = error
                return .failure(error)
            }
        }

        /// A damaged entry repair could not move: reported `repairFailed` (one line, after its
        /// damage), counted in `leftInPlace`, and the repair goes on with the other entries.
        mutating func leaveInPlace(_ shown: String, _ storePath: String, _ why: String, setAside: Bool = false) {
            summary.leftInPlace += 1
            let not = setAside ? "not set aside in \(NameCodec.debrisDirectory)" : "not moved into /\(summary.lostAndFound)"
            report(shown, storePath, .repairFailed, "\(not), left in place: \(why)")
        }

        /// Moves `e` out of `dir` into /lost+found under a free name derived from `suggested`.
        /// Leaves it in place when no /lost+found could be chosen (reported once, by `run`), and
        /// when /lost+found cannot be created or opened or the move itself fails (reported here,
        /// for this entry). Only a failed fsync after a move stops the repair (thrown).
        mutating func quarantine(_ dir: VaultDirectory, _ e: OfflineSys.Entry, shown: String, storePath: String,
                                 suggested: String, isLong: Bool) throws {
            guard lostAndFoundFailure == nil else {
                summary.leftInPlace += 1
                return
            }
            let lf: VaultDirectory
            switch try openLostAndFound() {
            case .success(let d): lf = d
            case .failure(let error): return leaveInPlace(shown, storePath, "cannot create or open /\(summary.lostAndFound): \(error)")
            }
            var base = Array(suggested.utf8)
            if base.count > 240 { base = Array(base.suffix(240)) }   // keep the distinctive end
            let stem = String(decoding: base, as: UTF8.self)
            var attempt = 0
            while true {
                let name = attempt == 0 ? stem : stem + ".\(attempt)"
                let plain = Array(name.utf8)
                let enc = tree.names.encode(plain, in: lf.info)
                let target = VaultEntry(parent: lf, name: plain, encoded: enc)
                do {
                    guard try target.stat() == nil else {
                        attempt += 1
                        continue
                    }
                    try NameCodec.writeCompanion(enc, in: lf.fd)
                    do {
                        try OfflineSys.rename(dir.fd, e.cName, lf.fd, target.cName, replace: false, display: name)
                    } catch StoreError.exists {
                        attempt += 1
                        continue
                    } catch {
                        NameCodec.removeCompanion(enc, in: lf.fd)
                        throw error
                    }
                } catch {
                    return leaveInPlace(shown, storePath, "\(error)")
                }
                if isLong {
                    // Kept while a sync engine's copy of the entry still needs it.
                    NameCodec.removeCompanion(ofEntry: e.name, in: dir.fd)
                }
                summary.actions.append(.movedToLostAndFound(storePath: storePath, name: name))
                try AtomicFile.syncDirectory(lf.fd, summary.lostAndFound + "/" + name)
                try AtomicFile.syncDirectory(dir.fd, storePath)
                return
            }
        }

        /// Whether entry `e` (whose name does not decrypt) is a regular file that is no
        /// PhotoVault file of this vault: its header is missing, cut short or fails to open
        /// (a foreign file, a sync tool's copy of a `.pvdir`). Given a name in /lost+found it
        /// showed on the mount as a file that fails every read; a renamed ciphertext file
        /// (its header opens) still goes to /lost+found, where it reads again.
        func holdsNothingReadable(_ dir: VaultDirectory, _ e: OfflineSys.Entry) -> Bool {
            guard let st = try? OfflineSys.lstat(dir.fd, e.cName), OfflineSys.isRegular(st), st.st_size > 0,
                  let fd = try? Fsck.openFileForCheck(dir.fd, e.cName) else { return false }
            do {
                let content = try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring, holeMaps: tree.holeMaps())
                content.close()
                return false
            } catch {
                close(fd)
                return Fsck.isDamage(error)
            }
        }

        /// Moves `e` out of `dir` into the tree root's `NameCodec.debrisDirectory` (made 0700 if
        /// missing), under its store path with `/` as `%2F` (`.N` appended if taken): kept, not
        /// shown. A failure leaves it in place (`repairFailed`), as for /lost+found.
        mutating func setAside(_ dir: VaultDirectory, _ e: OfflineSys.Entry, shown: String, storePath: String) throws {
            let debris = NameCodec.debrisDirectory
            if mkdirat(resolver.root.fd, debris, 0o700) == 0 {
                try AtomicFile.syncDirectory(resolver.root.fd, "/")
            } else if errno != EEXIST {
                return leaveInPlace(shown, storePath, "cannot make \(debris): \(String(cString: strerror(errno)))", setAside: true)
            }
            let fd = openat(resolver.root.fd, debris, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else {
                return leaveInPlace(shown, storePath, "cannot open \(debris): \(String(cString: strerror(errno)))", setAside: true)
            }
            defer { close(fd) }
            let stem = Fsck.escape(storePath).split(separator: "/", omittingEmptySubsequences: false).joined(separator: "%2F")
            var attempt = 0
            while true {
                let name = attempt == 0 ? stem : stem + ".\(attempt)"
                do {
                    try OfflineSys.rename(dir.fd, e.cName, fd, Array(name.utf8CString), replace: false, display: name)
                } catch StoreError.exists {
                    attempt += 1
                    continue
                } catch {
                    return leaveInPlace(shown, storePath, "\(error)", setAside: true)
                }
                summary.actions.append(.setAside(storePath: storePath, name: name))
                try AtomicFile.syncDirectory(fd, debris)
                try AtomicFile.syncDirectory(dir.fd, storePath)
                return
            }
        }

        /// Deletes a leftover temp file, or a temp directory holding only internal files.
        mutating func removeTemp(_ dirfd: Int32, _ e: OfflineSys.Entry, storePath: String) {
            guard let st = try? OfflineSys.lstat(dirfd, e.cName) else { return }
            if OfflineSys.isDirectory(st) {
                guard let fd = try? OfflineSys.openDirectory(dirfd, e.cName) else { return }
                defer { close(fd) }
                let inner = (try? OfflineSys.list(fd)) ?? []
                guard inner.allSatisfy({ ($0.name == DirectoryInfo.fileName || $0.name.hasPrefix(AtomicFile.tempPrefix)) && $0.type != UInt8(DT_DIR) }) else {
                    return   // holds real entries: left alone, still reported
                }
                for i in inner { unlinkat(fd, i.cName, 0) }
                guard unlinkat(dirfd, e.cName, AT_REMOVEDIR) == 0 else { return }
            } else {
                guard unlinkat(dirfd, e.cName, 0) == 0 else { return }
            }
            summary.actions.append(.removedTemp(storePath: storePath))
        }
    }
}
