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
///     conflict copy is named after its entry's plaintext (`recoveredName`); debris in which
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
        var fileIDs: [[UInt8]: (dev: UInt64, ino: UInt64, path: String)] = [:]

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
            if isRoot && name == TreeLock.mountLockName {
                try mountLock(dir, e, shown: shownInDir, storePath: sp)
                return nil
            }
            if name.hasPrefix(AtomicFile.tempPrefix) {
                report(shownInDir, sp, .leftoverTemp, "temp file of an interrupted write")
                if repair { removeTemp(dir.fd, e, storePath: sp) }
                return nil
            }
            if name.hasPrefix(NameCodec.longPrefix) && name.hasSuffix(NameCodec.companionSuffix) {
                let owner = Array(e.raw.dropLast(NameCodec.companionSuffix.utf8.count))
                if !present.contains(owner) {
                    report(shownInDir, sp, .orphanCompanion, "long-name companion without its entry")
                    // Only a name, of an entry that is gone: nothing to recover in /lost+found.
                    if repair { try setAside(dir, e, shown: shownInDir, storePath: sp) }
                }
                return nil   // otherwise checked with its entry
            }
            // The name itself.
            let plain: [UInt8]
            switch decodeName(e, in: dir) {
            case .success(let p):
                plain = p
            case .failure(let problem):
                report(shownInDir, sp, problem.kind, problem.detail)
                guard repair && problem.kind != .unreadable else { return nil }
                if let (plain, rest) = recoveredName(e, in: dir) {
                    // A sync tool's conflict copy of an entry (`NAME.sync-conflict-...`,
                    // `NAME (conflicted copy ...)`): named after the entry's plaintext.
                    try quarantine(dir, e, shown: shownInDir, storePath: sp,
                                   suggested: lostName(dir.path.appending(plain)) + Fsck.escape(rest), isLong: true)
                } else if holdsNothingReadable(dir, e) {
                    try setAside(dir, e, shown: shownInDir, storePath: sp)
                } else {
                    try quarantine(dir, e, shown: shownInDir, storePath: sp, suggested: "bad-name " + lostName(dir.path) + "%2F" + name, isLong: true)
                }
                return nil
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
            if damaged && repair {
                try quarantine(dir, e, shown: path.description, storePath: sp, suggested: lostName(path), isLong: true)
            }
            return healthy.map { (dir: $0, storePath: sp) }
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

        /// The name checks of `NameCodec.decode`, each failure with its own kind.
        func decodeName(_ e: OfflineSys.Entry, in dir: VaultDirectory) -> Result<[UInt8], NameProblem> {
            var full = e.name
            if full.hasPrefix(NameCodec.longPrefix) {
                let companion = Array((e.name + NameCodec.companionSuffix).utf8CString)
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
                guard NameCodec.isCanonicalCompanion(full, of: e.name) else {
                    return .failure(NameProblem(kind: .longNameCompanionMismatch, detail: "long-name companion does not match its entry"))
                }
            }
            guard let sealed = Base64URL.decode(full) else {
                return .failure(NameProblem(kind: .foreignEntry, detail: "not a PhotoVault name (a sync tool's conflict copy or a foreign file?)"))
            }
            guard let plain = try? tree.names.names.open(sealed, domain: dir.info.id) else {
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
                content = try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring, displayPath: display)
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
                if let first = fileIDs[id], first.dev != UInt64(st.st_dev) || first.ino != UInt64(st.st_ino) {
                    report(display, storePath, .fileIDShared,
                           "has the file ID of \(first.path), another file: a header copied from it, so chunks can be moved between the two undetected")
                } else if fileIDs[id] == nil {
                    fileIDs[id] = (UInt64(st.st_dev), UInt64(st.st_ino), display)
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
                _ = try LinkTarget.open(try OfflineSys.readLink(dir.fd, e.cName), keyring: tree.keyring)
                return false
            } catch StoreError.integrity(_, let d) {
                report(path.description, storePath, .symlinkDamaged, d)
                return true
            } catch {
                report(path.description, storePath, .unreadable, "\(error)")
                return false
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
                if isLong && e.name.hasPrefix(NameCodec.longPrefix) {
                    unlinkat(dir.fd, e.name + NameCodec.companionSuffix, 0)
                }
                summary.actions.append(.movedToLostAndFound(storePath: storePath, name: name))
                try AtomicFile.syncDirectory(lf.fd, summary.lostAndFound + "/" + name)
                try AtomicFile.syncDirectory(dir.fd, storePath)
                return
            }
        }

        /// The entry's plaintext name and the rest of its store name, when the store name is
        /// an entry name of `dir` followed by something else (a sync tool's conflict copy:
        /// `NAME.sync-conflict-20261206-101010-ABCDEFG`, `NAME (conflicted copy 2026-12-06)`).
        /// Nil when no prefix decrypts. Long names (`~hash...`) are not recovered this way.
        func recoveredName(_ e: OfflineSys.Entry, in dir: VaultDirectory) -> ([UInt8], String)? {
            let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
            let bytes = Array(e.name.utf8)
            let n = bytes.prefix { alphabet.contains($0) }.count
            guard n > 0, n < bytes.count, let sealed = Base64URL.decode(String(decoding: bytes[..<n], as: UTF8.self)),
                  let plain = try? tree.names.names.open(sealed, domain: dir.info.id), NameCodec.isFileName(plain) else { return nil }
            return (plain, String(decoding: bytes[n...], as: UTF8.self))
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
                let content = try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring)
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
