import Glibc
import PhotoVaultCrypto

/// Copies vault entries out to local files without a mount (`photovault export`), like
/// `cp -r PATH... DEST/`: each vault path lands inside the local directory DEST under its
/// own name (DEST and its parents are created if missing); the vault root `/` copies the
/// root's contents into DEST. Modes, atime and mtime and `user.*` xattrs are kept.
///
/// Nothing unauthenticated is ever written: each file is decrypted into a temp file
/// (`.pvexport-<hex>`) beside its destination and renamed to its real name only after every
/// chunk authenticated and the temp file was fsync'ed; each local directory is fsync'ed
/// after its entries, so after a crash a name holds the old file or the whole new one. On
/// failure the temp file is removed and the error is `.integrity(path: vault path, …)`. Entries whose encrypted name does not decrypt are not
/// part of the plaintext view: they are skipped (reported through `progress` and the
/// summary; `fsck` names them).
///
/// Standard output: `dest == "-"` streams exactly one regular file to stdout. Each block is
/// authenticated before it is written, so no wrong byte reaches stdout, but a damaged chunk
/// ends the stream early with an `.integrity` error (the caller must exit non-zero).
///
/// Holds a shared `TreeLock` on the tree root for the whole run.
public final class Exporter {
    public let tree: UserTree
    public let stdoutFD: Int32
    public let blockSize: Int
    public let lockTimeout: Double

    public static let tempPrefix = ".pvexport-"

    public init(tree: UserTree, stdout: Int32 = STDOUT_FILENO, blockSize: Int = 1 << 20, lockTimeout: Double = 2) {
        self.tree = tree
        self.stdoutFD = stdout
        self.blockSize = max(blockSize, 4096)
        self.lockTimeout = lockTimeout
    }

    /// Without `force` an existing local file or symlink is never replaced (`.exists(local
    /// path)`); a local directory is never replaced by a non-directory or the reverse.
    /// Stops at the first error; entries completed before it stay.
    @discardableResult
    public func export(paths: [String], to dest: String, force: Bool = false,
                       progress: @escaping (ProgressEvent) -> Void = { _ in }) throws -> TransferSummary {
        // Reading the store never runs out of space: ENOSPC here is the destination's.
        do { return try exportAll(paths: paths, to: dest, force: force, progress: progress) } catch StoreError.noSpace {
            throw StoreError.destinationFull(dest == "-" ? "standard output" : dest)
        }
    }

    private func exportAll(paths: [String], to dest: String, force: Bool,
                           progress: @escaping (ProgressEvent) -> Void) throws -> TransferSummary {
        guard !paths.isEmpty else { throw StoreError.invalidArgument("nothing to export") }
        let lock = try TreeLock(root: tree.root, mode: .shared, timeout: lockTimeout)
        defer { lock.release() }
        let resolver = try VaultResolver(tree: tree)
        var run = Run(exporter: self, force: force, progress: progress)
        if dest == "-" {
            guard paths.count == 1 else { throw StoreError.invalidArgument("only one file can be written to standard output") }
            try run.stream(try resolver.entry(try VaultPath(paths[0])))
            return run.summary
        }
        try Exporter.makeLocalDirectories(dest)
        let destfd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard destfd >= 0 else { throw StoreError.posix("open \(dest)") }
        defer { close(destfd) }
        for p in paths {
            let vp = try VaultPath(p)
            if vp.isRoot {
                try run.children(of: resolver.root, into: destfd, localPath: dest, resolver: resolver)
                continue
            }
            let entry = try resolver.entry(vp)
            guard let st = try entry.stat() else { throw StoreError.notFound(vp.description) }
            try run.entry(entry, stat: st, into: destfd, localPath: StorePath.join(dest, String(decoding: entry.name, as: UTF8.self)),
                          resolver: resolver)
        }
        // What landed directly in the destination (its subdirectories synced themselves).
        try AtomicFile.syncDirectory(destfd, dest)
        return run.summary
    }

    /// `mkdir -p`.
    static func makeLocalDirectories(_ path: String) throws {
        var st = stat()
        if fstatat(AT_FDCWD, path, &st, 0) == 0 {
            guard OfflineSys.isDirectory(st) else { throw StoreError.io(errno: ENOTDIR, context: path) }
            return
        }
        let parent = StorePath.dirname(path)
        if parent != path { try makeLocalDirectories(parent) }
        guard mkdir(path, 0o777) == 0 else {
            if errno == EEXIST { return }
            throw StoreError.posix("mkdir \(path)")
        }
        try AtomicFile.syncParent(of: path)
    }

    struct Run {
        let exporter: Exporter
        let force: Bool
        let progress: (ProgressEvent) -> Void
        var summary = TransferSummary()
        var tree: UserTree { exporter.tree }

        init(exporter: Exporter, force: Bool, progress: @escaping (ProgressEvent) -> Void) {
            self.exporter = exporter
            self.force = force
            self.progress = progress
        }

        mutating func entry(_ entry: VaultEntry, stat st: stat, into destfd: Int32, localPath: String, resolver: VaultResolver) throws {
            // The exact name bytes: names need not be UTF-8, and a lossy decoding could turn
            // two names into one (export would then fail, or overwrite with --force).
            let local = entry.name.map { CChar(bitPattern: $0) } + [0]
            if OfflineSys.isDirectory(st) {
                try directory(entry, stat: st, into: destfd, local: local, localPath: localPath, resolver: resolver)
            } else if OfflineSys.isRegular(st) {
                try file(entry, into: destfd, local: local, localPath: localPath)
            } else if OfflineSys.isSymlink(st) {
                try symlink(entry, stat: st, into: destfd, local: local, localPath: localPath)
            } else {
                summary.skipped.append(entry.path.description)
                progress(.skipped(entry.path.description, reason: "not a regular file, directory or symlink in the store"))
            }
        }

        func checkReplace(_ destfd: Int32, _ local: [CChar], _ localPath: String) throws {
            guard let existing = try OfflineSys.lstat(destfd, local) else { return }
            if !force || OfflineSys.isDirectory(existing) { throw StoreError.exists(localPath) }
        }

        mutating func directory(_ entry: VaultEntry, stat st: stat, into destfd: Int32, local: [CChar], localPath: String,
                                resolver: VaultResolver) throws {
            let dir = try resolver.open(entry)
            let created: Bool
            if let existing = try OfflineSys.lstat(destfd, local) {
                guard OfflineSys.isDirectory(existing) else { throw StoreError.exists(localPath) }
                created = false
            } else {
                guard mkdirat(destfd, local, 0o700) == 0 else { throw StoreError.posix("mkdir \(localPath)") }
                created = true
            }
            let fd = try OfflineSys.openDirectory(destfd, local)
            defer { close(fd) }
            // Marked until it has its mode (PendingDirectory); one an earlier, interrupted
            // export made is finished as if made now. A directory the user had is not.
            if created { PendingDirectory.mark(fd, PendingDirectory.localMarker) }
            let ours = created || PendingDirectory.isMarked(fd, PendingDirectory.localMarker)
            var finished = false
            defer { if ours && !finished { PendingDirectory.finishAfterFailure(fd, from: st) } }
            summary.directories += 1
            progress(.directory(localPath))
            try children(of: dir, into: fd, localPath: localPath, resolver: resolver)
            try exportXattrs(from: dir.fd, to: fd, display: entry.path.description)
            if ours { PendingDirectory.finish(fd, PendingDirectory.localMarker, from: st) }
            finished = true
            try AtomicFile.syncDirectory(fd, localPath)
        }

        /// Every visible entry of `dir` into the local directory `destfd`.
        mutating func children(of dir: VaultDirectory, into destfd: Int32, localPath: String, resolver: VaultResolver) throws {
            for e in try OfflineSys.list(dir.fd) where !NameCodec.isInternal(e.name) {
                let plain: [UInt8]
                // Only a name that fails authentication is skipped; one whose long-name
                // companion cannot be read (EIO) stops the export with that error.
                do { plain = try tree.names.decode(entry: e.name, in: dir.info, dirfd: dir.fd) }
                catch StoreError.integrity {
                    let where_ = dir.path.description + (dir.path.isRoot ? "" : "/") + e.name
                    summary.skipped.append(where_)
                    progress(.skipped(where_, reason: "the encrypted name does not decrypt (run fsck)"))
                    continue
                }
                let child = VaultEntry(parent: dir, name: plain, encoded: tree.names.encode(plain, in: dir.info))
                guard let st = try child.stat() else { continue }
                try entry(child, stat: st, into: destfd,
                          localPath: StorePath.join(localPath, String(decoding: plain, as: UTF8.self)), resolver: resolver)
            }
        }

        /// Opens a vault file for reading, with integrity errors carrying its plaintext path.
        func openContent(_ entry: VaultEntry) throws -> ContentFile {
            let display = entry.path.description
            let fd: Int32
            do { fd = try FileIO.openRegular(entry.parent.fd, entry.cName, what: display) }
            catch StoreError.io(let e, _) where e == ENOENT { throw StoreError.notFound(display) }
            do { return try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring, displayPath: display) }
            catch StoreError.integrity(_, let d) { close(fd); throw StoreError.integrity(path: display, detail: d) }
            catch { close(fd); throw error }
        }

        /// Decrypts the whole of `content` block by block into `sink`.
        func copy(_ content: ContentFile, display: String, _ sink: (UnsafeRawPointer, Int) throws -> Void) throws -> UInt64 {
            let size: UInt64
            do { size = try content.size() }
            catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: display, detail: d) }
            progress(.fileStarted(display, size: size))
            let block = exporter.blockSize
            let buf = UnsafeMutableRawPointer.allocate(byteCount: block, alignment: 16)
            defer { secureZero(UnsafeMutableRawBufferPointer(start: buf, count: block)); buf.deallocate() }
            var offset: UInt64 = 0
            while offset < size {
                let n: Int
                do { n = try content.read(into: buf, count: block, offset: offset) }
                catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: display, detail: d) }
                if n == 0 { break }
                try sink(buf, n)
                offset += UInt64(n)
                progress(.fileProgress(display, done: offset))
            }
            return offset
        }

        mutating func file(_ entry: VaultEntry, into destfd: Int32, local: [CChar], localPath: String) throws {
            try checkReplace(destfd, local, localPath)
            let content = try openContent(entry)
            defer { content.close() }
            let st = try OfflineSys.fstat(content.fd)
            let tmp = Array((Exporter.tempPrefix + Base64Hex.random(8)).utf8CString)
            let fd = openat(destfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw StoreError.posix("create temp file for \(localPath)") }
            var placed = false
            defer {
                close(fd)
                if !placed { unlinkat(destfd, tmp, 0) }
            }
            let bytes = try copy(content, display: entry.path.description) { try OfflineSys.writeStream(fd, $0, $1) }
            try exportXattrs(from: content.fd, to: fd, display: entry.path.description)
            _ = fchmod(fd, st.st_mode & 0o7777)
            OfflineSys.setTimes(fd, from: st)
            try FileIO.sync(fd, localPath)   // before the rename: --force must not trade a good file for an empty one
            try OfflineSys.rename(destfd, tmp, destfd, local, replace: force, display: localPath)
            placed = true
            summary.files += 1
            summary.bytes += bytes
            progress(.file(localPath, bytes: bytes))
        }

        mutating func stream(_ entry: VaultEntry) throws {
            guard let st = try entry.stat() else { throw StoreError.notFound(entry.path.description) }
            guard OfflineSys.isRegular(st) else {
                throw StoreError.invalidArgument("\(entry.path) is not a regular file; only a file can be written to standard output")
            }
            let content = try openContent(entry)
            defer { content.close() }
            let out = exporter.stdoutFD
            let bytes = try copy(content, display: entry.path.description) { try OfflineSys.writeStream(out, $0, $1) }
            summary.files += 1
            summary.bytes += bytes
            progress(.file("-", bytes: bytes))
        }

        mutating func symlink(_ entry: VaultEntry, stat st: stat, into destfd: Int32, local: [CChar], localPath: String) throws {
            try checkReplace(destfd, local, localPath)
            let sealed = try OfflineSys.readLink(entry.parent.fd, entry.cName)
            let target: [UInt8]
            do { target = try LinkTarget.open(sealed, keyring: tree.keyring) }
            catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: entry.path.description, detail: d) }
            let tmp = Array((Exporter.tempPrefix + Base64Hex.random(8)).utf8CString)
            let rc = target.withUnsafeBufferPointer { t -> Int32 in
                let c = t.map { CChar(bitPattern: $0) } + [0]
                return symlinkat(c, destfd, tmp)
            }
            guard rc == 0 else { throw StoreError.posix("symlink \(localPath)") }
            var placed = false
            defer { if !placed { unlinkat(destfd, tmp, 0) } }
            let ts = [st.st_atim, st.st_mtim]
            _ = utimensat(destfd, tmp, ts, AT_SYMLINK_NOFOLLOW)
            try OfflineSys.rename(destfd, tmp, destfd, local, replace: force, display: localPath)
            placed = true
            summary.symlinks += 1
            progress(.symlink(localPath))
        }

        /// Opens the vault entry's sealed `user.pv.*` attributes onto the local copy. A
        /// local filesystem without user xattrs just does not get them.
        func exportXattrs(from src: Int32, to dst: Int32, display: String) throws {
            for stored in try OfflineXattr.names(src) where stored.hasPrefix(XattrCodec.storedPrefix) {
                guard let plain = tree.xattrs.plainName(stored) else {
                    throw StoreError.integrity(path: display, detail: "an extended attribute name failed authentication")
                }
                let value: [UInt8]
                do { value = try tree.xattrs.openValue(try OfflineXattr.get(src, stored), storedName: stored) }
                catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: display, detail: d) }
                let name = String(decoding: plain, as: UTF8.self)
                if name == PendingDirectory.localMarker { continue }
                do { try OfflineXattr.set(dst, name, value) }
                catch StoreError.io(let e, _) where e == ENOTSUP || e == EOPNOTSUPP { return }
            }
        }
    }
}
