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

        /// One vault entry (with its lstat) copied into the local directory `destfd`; a
        /// directory with everything below it.
        mutating func entry(_ entry: VaultEntry, stat st: stat, into destfd: Int32, localPath: String, resolver: VaultResolver) throws {
            if OfflineSys.isDirectory(st) {
                try walk(resolver: resolver) { try $0.enter(entry, stat: st, into: destfd, localPath: localPath, resolver: resolver) }
            } else {
                try leaf(entry, stat: st, into: destfd, localPath: localPath)
            }
        }

        /// The exact name bytes: names need not be UTF-8, and a lossy decoding could turn
        /// two names into one (export would then fail, or overwrite with --force).
        static func localName(_ entry: VaultEntry) -> [CChar] { entry.name.map { CChar(bitPattern: $0) } + [0] }

        /// A file, symlink or other non-directory entry.
        mutating func leaf(_ entry: VaultEntry, stat st: stat, into destfd: Int32, localPath: String) throws {
            let local = Run.localName(entry)
            if OfflineSys.isRegular(st) {
                if try isUnchanged(st, destfd, local) { return unchanged(localPath) }
                try file(entry, into: destfd, local: local, localPath: localPath)
            } else if OfflineSys.isSymlink(st) {
                try symlink(entry, stat: st, into: destfd, local: local, localPath: localPath)
            } else {
                summary.skipped.append(entry.path.description)
                progress(.skipped(entry.path.description, reason: "not a regular file, directory or symlink in the store"))
            }
        }

        /// Whether the local `local` is already the vault file whose ciphertext `st` describes
        /// (without `force`): a regular file of the same size and modification time, as rsync
        /// judges it, so that a rerun of an interrupted export continues where it stopped.
        func isUnchanged(_ st: stat, _ destfd: Int32, _ local: [CChar]) throws -> Bool {
            guard !force, let there = try OfflineSys.lstat(destfd, local), OfflineSys.isRegular(there),
                  let size = try? tree.layout.plaintextSize(ciphertextSize: UInt64(st.st_size)) else { return false }
            return size == UInt64(there.st_size) && OfflineSys.sameModificationTime(
                there.st_mtim, st.st_mtim, resolutionNs: BackingCapabilities.of(destfd).mtimeResolutionNs)
        }

        /// A local entry already in place: counted, not copied again.
        mutating func unchanged(_ localPath: String) {
            summary.unchanged += 1
            progress(.unchanged(localPath))
        }

        /// Whether `local` exists (and may be replaced: `force`, not a directory).
        @discardableResult
        func checkReplace(_ destfd: Int32, _ local: [CChar], _ localPath: String) throws -> Bool {
            guard let existing = try OfflineSys.lstat(destfd, local) else { return false }
            if !force || OfflineSys.isDirectory(existing) { throw StoreError.exists(localPath) }
            return true
        }

        /// A local directory being filled from a vault directory: the vault directory's
        /// visible-looking entries, and the next one to copy.
        struct Frame {
            let dir: VaultDirectory
            let destfd: Int32
            let localPath: String
            var entries: [OfflineSys.Entry] = []
            var next = 0
            /// A directory the walk entered itself (nil for the root's children copied
            /// straight into DEST): `destfd` is its own, and it is finished when left.
            var made: Made?
        }

        struct Made {
            let entry: VaultEntry
            let stat: stat
            /// Made by this export (or an interrupted earlier one): it gets its mode when
            /// finished, or `finishAfterFailure` if the export fails inside it.
            let ours: Bool
            var finished = false
        }

        /// Every visible entry of `dir` into the local directory `destfd`.
        mutating func children(of dir: VaultDirectory, into destfd: Int32, localPath: String, resolver: VaultResolver) throws {
            try walk(resolver: resolver) { _ in Frame(dir: dir, destfd: destfd, localPath: localPath) }
        }

        /// Copies the directory `top` makes and everything below it, depth first in the order
        /// of each listing. An explicit stack, not recursion: a tree can be nested deeper than
        /// a thread's stack holds frames (a recursion per level crashed, SIGSEGV, at some
        /// 1,500 levels). On an error every directory still open is left as a failed
        /// recursion left it (innermost first), and the error is thrown.
        mutating func walk(resolver: VaultResolver, from top: (inout Run) throws -> Frame) throws {
            var stack: [Frame] = []
            do {
                stack.append(try top(&self))
                stack[0].entries = try Run.visible(stack[0].dir)
                while let i = stack.indices.last {
                    guard stack[i].next < stack[i].entries.count else {
                        try leave(&stack[i])
                        if stack[i].made != nil { close(stack[i].destfd) }
                        stack.removeLast()
                        continue
                    }
                    let e = stack[i].entries[stack[i].next]
                    stack[i].next += 1
                    let (dir, destfd, localPath) = (stack[i].dir, stack[i].destfd, stack[i].localPath)
                    // Only a name that fails authentication is skipped; one whose long-name
                    // companion cannot be read (EIO) stops the export with that error.
                    // A sync engine's conflict copy goes out under its view name (docs/SYNC.md).
                    let plain: [UInt8]
                    let encoded: EncodedName
                    do { (plain, encoded, _) = try tree.names.decodeListed(entry: e.name, in: dir.info, dirfd: dir.fd) }
                    catch StoreError.integrity {
                        let where_ = dir.path.description + (dir.path.isRoot ? "" : "/") + e.name
                        summary.skipped.append(where_)
                        progress(.skipped(where_, reason: "the encrypted name does not decrypt (run fsck)"))
                        continue
                    }
                    let child = VaultEntry(parent: dir, name: plain, encoded: encoded)
                    guard let st = try child.stat() else { continue }
                    let childPath = StorePath.join(localPath, String(decoding: plain, as: UTF8.self))
                    if OfflineSys.isDirectory(st) {
                        stack.append(try enter(child, stat: st, into: destfd, localPath: childPath, resolver: resolver))
                        stack[stack.count - 1].entries = try Run.visible(stack[stack.count - 1].dir)
                    } else {
                        try leaf(child, stat: st, into: destfd, localPath: childPath)
                    }
                }
            } catch {
                for f in stack.reversed() {
                    guard let m = f.made else { continue }
                    if m.ours && !m.finished { PendingDirectory.finishAfterFailure(f.destfd, from: m.stat) }
                    close(f.destfd)
                }
                throw error
            }
        }
        /// The entries of a vault directory that may be visible (internal files left out).
        static func visible(_ dir: VaultDirectory) throws -> [OfflineSys.Entry] {
            try OfflineSys.list(dir.fd).filter { !NameCodec.isInternal($0.name) && !SyncDebris.matches($0.name) }
        }

        /// Opens the vault directory `entry` and makes (or takes, if it is a directory) its
        /// local copy `localPath` in `destfd`: the frame the walk fills.
        mutating func enter(_ entry: VaultEntry, stat st: stat, into destfd: Int32, localPath: String,
                            resolver: VaultResolver) throws -> Frame {
            let local = Run.localName(entry)
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
            // Marked until it has its mode (PendingDirectory); one an earlier, interrupted
            // export made is finished as if made now. A directory the user had is not.
            if created { PendingDirectory.mark(fd, PendingDirectory.localMarker) }
            let ours = created || PendingDirectory.isMarked(fd, PendingDirectory.localMarker)
            summary.directories += 1
            progress(.directory(localPath))
            return Frame(dir: dir, destfd: fd, localPath: localPath, made: Made(entry: entry, stat: st, ours: ours))
        }

        /// All entries of a frame are copied: its directory gets its xattrs and mode, and is
        /// synced (the root's children copied into DEST: nothing, the caller syncs DEST).
        func leave(_ f: inout Frame) throws {
            guard var m = f.made else { return }
            defer { f.made = m }
            try exportXattrs(from: f.dir.fd, to: f.destfd, display: m.entry.path.description)
            if m.ours { PendingDirectory.finish(f.destfd, PendingDirectory.localMarker, from: m.stat) }
            m.finished = true
            try AtomicFile.syncDirectory(f.destfd, f.localPath)
        }

        /// Opens a vault file for reading, with integrity errors carrying its plaintext path.
        func openContent(_ entry: VaultEntry) throws -> ContentFile {
            let display = entry.path.description
            let fd: Int32
            do { fd = try FileIO.openRegular(entry.parent.fd, entry.cName, what: display) }
            catch StoreError.io(let e, _) where e == ENOENT { throw StoreError.notFound(display) }
            do { return try ContentFile(fd: fd, layout: tree.layout, keyring: tree.keyring, displayPath: display, holeMaps: tree.holeMaps()) }
            catch StoreError.integrity(_, let d) { close(fd); throw StoreError.integrity(path: display, detail: d) }
            catch { close(fd); throw error }
        }

        /// Decrypts the whole of `content` block by block into `sink`. `.fileStarted` names
        /// `writing` (the local file being written), else the vault path.
        func copy(_ content: ContentFile, display: String, writing: String? = nil,
                  _ sink: (UnsafeRawPointer, Int) throws -> Void) throws -> UInt64 {
            let size: UInt64
            do { size = try content.size() }
            catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: display, detail: d) }
            progress(.fileStarted(writing ?? display, size: size))
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
            if try checkReplace(destfd, local, localPath) { progress(.replacing(localPath)) }
            let content = try openContent(entry)
            defer { content.close() }
            let st = try OfflineSys.fstat(content.fd)
            let tmp = Array((Exporter.tempPrefix + Base64Hex.random(8)).utf8CString)
            PartialFile.register(destfd, tmp)   // a signal removes it (PartialFile)
            defer { PartialFile.clear() }
            let fd = openat(destfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw StoreError.posix("create temp file for \(localPath)") }
            var placed = false
            defer {
                close(fd)
                if !placed { unlinkat(destfd, tmp, 0) }
            }
            let bytes = try copy(content, display: entry.path.description, writing: localPath) {
                try OfflineSys.writeStream(fd, $0, $1)
            }
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
            let bytes = try copy(content, display: entry.path.description) { buf, count in
                do { try OfflineSys.writeStream(out, buf, count) }
                catch StoreError.io(let e, _) { throw StoreError.io(errno: e, context: "write standard output") }
            }
            summary.files += 1
            summary.bytes += bytes
            progress(.file("-", bytes: bytes))
        }

        mutating func symlink(_ entry: VaultEntry, stat st: stat, into destfd: Int32, local: [CChar], localPath: String) throws {
            let sealed = try OfflineSys.readLink(entry.parent.fd, entry.cName)
            let target: [UInt8]
            do { target = try LinkTarget.open(sealed, keyring: tree.keyring, treeRoot: tree.root) }
            catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: entry.path.description, detail: d) }
            // Already this link (a rerun): left as it is.
            if !force, let there = try OfflineSys.lstat(destfd, local), OfflineSys.isSymlink(there),
               (try? OfflineSys.readLink(destfd, local)) == target { return unchanged(localPath) }
            try checkReplace(destfd, local, localPath)
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
        /// local filesystem without user xattrs just does not get them. Only `user.*`
        /// names, as import takes only those: `trusted.*` and `security.*` ones (stored by a
        /// mount, for root's `rsync -aX`) would need privileges export does not ask for.
        func exportXattrs(from src: Int32, to dst: Int32, display: String) throws {
            for stored in try OfflineXattr.storedNames(src) where stored.hasPrefix(XattrCodec.storedPrefix) {
                guard let plain = tree.xattrs.plainName(stored) else {
                    throw StoreError.integrity(path: display, detail: "an extended attribute name failed authentication")
                }
                guard plain.starts(with: Array("user.".utf8)) else { continue }
                let value: [UInt8]
                do { value = try tree.xattrs.openValue(try OfflineXattr.get(src, stored), storedName: stored) }
                catch StoreError.integrity(_, let d) { throw StoreError.integrity(path: display, detail: d) }
                if plain == Array(PendingDirectory.localMarker.utf8) { continue }
                do { try OfflineXattr.set(dst, plain, value) }
                catch StoreError.io(let e, _) where e == ENOTSUP || e == EOPNOTSUPP { return }
            }
        }
    }
}
