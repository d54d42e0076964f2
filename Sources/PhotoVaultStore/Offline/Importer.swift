import Glibc
import PhotoVaultCrypto

/// Copies local files into a user tree without a mount (`photovault import`), like
/// `cp -r SOURCE... DEST/`: each source lands inside the vault directory DEST under its own
/// name; DEST and its parents are created if missing; directories are merged; regular
/// files, directories and symlinks are copied with their mode, atime and mtime, and their
/// `user.*` extended attributes (sealed). FIFOs, sockets and devices are skipped.
///
/// Crash safety: a file is written under a `.pvtmp-` name in its target directory, synced,
/// given its mode and times, and only then renamed to its encrypted name (a long name's
/// companion is written before that rename, and removed again if the rename fails). An
/// interrupted import therefore never leaves a half-written file under a real name;
/// `photovault fsck --repair` removes the temp files.
///
/// Standard input: `sources == ["-"]` reads stdin to end of file into a new regular file
/// whose full vault path is `into` (DEST is then the file, not a directory; its parent
/// directories are created if missing; mode 0644; times are now).
///
/// Holds an exclusive `TreeLock` on the tree root for the whole run.
public final class Importer {
    public let tree: UserTree
    public let stdinFD: Int32
    public let blockSize: Int
    public let lockTimeout: Double

    public init(tree: UserTree, stdin: Int32 = STDIN_FILENO, blockSize: Int = 1 << 20, lockTimeout: Double = 2) {
        self.tree = tree
        self.stdinFD = stdin
        self.blockSize = max(blockSize, 4096)
        self.lockTimeout = lockTimeout
    }

    /// Why a FIFO, socket or device is skipped (`.skipped`), through a live mount too.
    public static let unsupportedTypeReason = "not a regular file, directory or symlink"
    /// Why a file is skipped that another file or a symlink took the place of while it was read.
    public static let replacedReason = "replaced by another file while it was imported"

    /// The `user.*` attributes import does not copy (offline or through a live mount):
    /// export's marker of a directory it had not finished, and the ones a mount answers
    /// itself (`VaultFileSystem.classAttribute` and `robotAttributes`). An imported file's
    /// class is `--class` or its directory's default, never its source's
    /// `user.photovault.class` (a copy out of a mount carries one); stored, such an
    /// attribute would only be listed twice on the mount, hidden behind the virtual one.
    public static let notImportedXattrs: Set<String> = [
        PendingDirectory.localMarker, "user.photovault.class", "user.xdg.robots.index", "user.xdg.robots.backup",
    ]

    /// Whether import copies a source's extended attribute `name`.
    public static func importsXattr(_ name: String) -> Bool { name.hasPrefix("user.") && !notImportedXattrs.contains(name) }

    /// The same for a name as listed (bytes, not always UTF-8).
    public static func importsXattr(_ name: [UInt8]) -> Bool {
        name.starts(with: Array("user.".utf8)) && !notImportedXattrs.contains { Array($0.utf8) == name }
    }

    /// Mode of a file read from stdin (there is no source mode to keep).
    public static let stdinMode: mode_t = 0o644

    /// Imports `sources` (local paths, or `["-"]`) into the vault directory `vaultDir`.
    /// `cls` overrides the class of imported files (default: each target directory's
    /// default class). Without `force` an existing file or symlink is never replaced
    /// (`.exists(vault path)`); a directory is never replaced by a non-directory or the
    /// reverse, even with `force`. Stops at the first error; files completed before it stay,
    /// and so do the directories holding them and the directories it finished (an empty
    /// source directory too); the other directories it made, which hold nothing, are
    /// removed, deepest first (`MadeDirectories`). A directory that was there before is
    /// never removed.
    @discardableResult
    public func `import`(sources: [String], into vaultDir: String, class cls: ProtectionClass? = nil, force: Bool = false,
                         progress: @escaping (ProgressEvent) -> Void = { _ in }) throws -> TransferSummary {
        guard !sources.isEmpty else { throw StoreError.invalidArgument("nothing to import") }
        let lock = try TreeLock(root: tree.root, mode: .exclusive, timeout: lockTimeout)
        defer { lock.release() }
        let made = MadeDirectories()
        do {
            let summary = try copy(sources, into: vaultDir, run: Run(importer: self, cls: cls, force: force, made: made,
                                                                     progress: progress))
            made.keepAll()
            return summary
        } catch {
            made.removeEmpty()
            throw error
        }
    }

    /// `import` under the tree lock.
    private func copy(_ sources: [String], into vaultDir: String, run: Run) throws -> TransferSummary {
        var run = run
        let resolver = try VaultResolver(tree: tree)
        if sources == ["-"] {
            let dest = try VaultPath(vaultDir)
            let entry = try resolver.entry(dest, createParents: true, made: run.made.add)
            do { try run.file(from: stdinFD, stat: Optional<stat>.none, to: entry) }
            catch { throw Importer.locate(error, at: "standard input") }
            try AtomicFile.syncDirectory(entry.parent.fd, entry.path.description)
            return run.summary
        }
        guard !sources.contains("-") else { throw StoreError.invalidArgument("'-' (standard input) must be the only source") }
        // The vault's own ciphertext is never a source: it grows while it is walked.
        let treeReal = RealPath.of(tree.root)
        for source in sources {
            if let r = RealPath.of(source), let t = treeReal, r == t || r.hasPrefix(t + "/") {
                throw StoreError.invalidArgument("\(source) is inside this vault's encrypted tree")
            }
        }
        var treeStat = stat()
        if lstat(tree.root, &treeStat) == 0 { run.treeIdentity = (treeStat.st_dev, treeStat.st_ino) }
        // A missing source or a `file/` fails before DEST is made, so that it is not left behind.
        for source in sources { try Importer.checkSource(source) }
        let destDir = try resolver.directory(try VaultPath(vaultDir), create: true, made: run.made.add)
        for source in sources {
            let (dirfd, cname, name, st) = try Importer.openSource(source)
            defer { close(dirfd) }
            let plain = Array(name.utf8)
            let entry = VaultEntry(parent: destDir, name: plain, encoded: tree.names.locate(plain, in: destDir.info, dirfd: destDir.fd))
            let local = Importer.trimmed(source)
            do { try run.entry(dirfd: dirfd, name: cname, stat: st, to: entry, local: local, resolver: resolver) }
            catch { throw Importer.locate(error, at: local) }
        }
        // What landed directly in the destination (its subdirectories synced themselves).
        try AtomicFile.syncDirectory(destDir.fd, vaultDir)
        return run.summary
    }

    /// Opens the local directory `source` is read from; returns it, the name to lstat in it,
    /// the name the source lands under, and its lstat. `notFound` if it does not exist,
    /// ENOTDIR for `file/` (as cp).
    static func openSource(_ source: String) throws -> (Int32, [CChar], String, stat) {
        let (dirPath, name) = try Importer.split(source)
        // `P/` is read as the directory itself ("." in it, opened through the link).
        let follow = Importer.followsLink(source)
        let dirfd = open(follow ? source : dirPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else {
            if follow && errno == ENOENT { throw StoreError.notFound(source) }
            throw StoreError.posix("open \(follow ? source : dirPath)")   // ENOTDIR for `file/`, as cp
        }
        let cname = Array((follow ? "." : name).utf8CString)
        do {
            guard let st = try OfflineSys.lstat(dirfd, cname) else { throw StoreError.notFound(source) }
            return (dirfd, cname, name, st)
        } catch {
            close(dirfd)
            throw error
        }
    }

    /// What an I/O error's line starts with once it names the local file being imported.
    static let locatedPrefix = "cannot import "

    /// An I/O error met while the local `path` was imported, with that path in its message:
    /// the failed call alone ("read: Input/output error") does not say which file of a tree
    /// failed. Its errno and exit status are kept. Other errors are returned as they are
    /// (they name their vault path already), and so is one already located deeper down.
    static func locate(_ error: Error, at path: String) -> Error {
        guard case StoreError.io(let code, let context)? = error as? StoreError, !context.hasPrefix(locatedPrefix) else {
            return error
        }
        return StoreError.io(errno: code, context: "\(locatedPrefix)\(path): \(context)")
    }

    /// `source` without trailing slashes (the local path its entries are named under).
    static func trimmed(_ source: String) -> String {
        var s = source
        while s.count > 1 && s.hasSuffix("/") { s.removeLast() }
        return s
    }

    /// Fails as the import of `source` would fail at its start (missing, `file/`), so that
    /// an import that would copy nothing makes no destination directory.
    public static func checkSource(_ source: String) throws {
        let (dirfd, _, _, _) = try openSource(source)
        close(dirfd)
    }

    /// Whether a source names what it points to, as for `cp -r`: `P/` with a trailing slash
    /// follows a symlink `P` and must be a directory (ENOTDIR otherwise), still landing under
    /// its own name `P`; without the slash a symlink is copied as a symlink.
    public static func followsLink(_ source: String) -> Bool { source.count > 1 && source.hasSuffix("/") }

    /// Local source path → (its directory, its own name). `dir/.`, `..` and `/` are resolved
    /// with realpath so that every source has a real name to land under.
    public static func split(_ source: String) throws -> (String, String) {
        var s = trimmed(source)
        var name = StorePath.basename(s)
        if name.isEmpty || name == "." || name == ".." {
            guard let r = realpath(s, nil) else { throw StoreError.posix("resolve \(source)") }
            s = String(cString: r)
            free(r)
            name = StorePath.basename(s)
        }
        guard !name.isEmpty, s != "/" else { throw StoreError.invalidArgument("cannot import '/' itself; name a directory inside it") }
        return (StorePath.dirname(s), name)
    }

    /// State of one import run.
    struct Run {
        let importer: Importer
        let cls: ProtectionClass?
        let force: Bool
        /// The directories this run made and has not finished.
        let made: MadeDirectories
        let progress: (ProgressEvent) -> Void
        var summary = TransferSummary()
        /// Device and inode of the vault's tree root: a source directory that contains it
        /// skips it (reported), instead of importing ciphertext that grows as it is read.
        var treeIdentity: (dev_t, ino_t)?
        var tree: UserTree { importer.tree }

        init(importer: Importer, cls: ProtectionClass?, force: Bool, made: MadeDirectories,
             progress: @escaping (ProgressEvent) -> Void) {
            self.importer = importer
            self.cls = cls
            self.force = force
            self.made = made
            self.progress = progress
        }

        /// One local entry `name` in `dirfd` (the local path `local`) with its lstat, copied to
        /// `entry`; a directory with everything below it.
        mutating func entry(dirfd: Int32, name: [CChar], stat st: stat, to entry: VaultEntry, local: String,
                            resolver: VaultResolver) throws {
            if OfflineSys.isDirectory(st) {
                try walk(dirfd: dirfd, name: name, stat: st, to: entry, local: local, resolver: resolver)
            } else {
                try leaf(dirfd: dirfd, name: name, stat: st, to: entry)
            }
        }

        /// A regular file, symlink, or something import skips.
        mutating func leaf(dirfd: Int32, name: [CChar], stat st: stat, to entry: VaultEntry) throws {
            if OfflineSys.isRegular(st) {
                // Non-blocking: a FIFO put in the file's place after its lstat made a blocking
                // open wait for a writer, so the import hung. What was opened must be the
                // regular file the lstat saw; anything else is skipped, as it would have been.
                let fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
                guard fd >= 0 || errno == ELOOP else { throw StoreError.posix("open") }   // located by the caller
                guard fd >= 0 else { return skip(entry, Importer.replacedReason) }   // a symlink now
                defer { close(fd) }
                var now = stat()
                guard fstat(fd, &now) == 0 else { throw StoreError.posix("fstat") }
                guard OfflineSys.isRegular(now) else { return skip(entry) }
                guard now.st_dev == st.st_dev, now.st_ino == st.st_ino else { return skip(entry, Importer.replacedReason) }
                let flags = fcntl(fd, F_GETFL)
                guard flags >= 0, fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 else { throw StoreError.posix("fcntl") }
                try file(from: fd, stat: st, to: entry)
            } else if OfflineSys.isSymlink(st) {
                try symlink(dirfd: dirfd, name: name, stat: st, to: entry)
            } else {
                skip(entry)
            }
        }

        /// A FIFO, socket or device is not imported; the run goes on and says so at the end.
        mutating func skip(_ entry: VaultEntry, _ reason: String = Importer.unsupportedTypeReason) {
            summary.skipped.append(entry.path.description)
            progress(.skipped(entry.path.description, reason: reason))
        }

        /// Refuses to replace `entry` unless allowed: never a directory, never without force.
        /// Whether it exists (and is to be replaced).
        @discardableResult
        func checkReplace(_ entry: VaultEntry) throws -> Bool {
            guard let existing = try entry.stat() else { return false }
            if !force || OfflineSys.isDirectory(existing) { throw StoreError.exists(entry.path.description) }
            return true
        }

        /// Whether `entry` is already the local regular file `st` describes (without `force`):
        /// a regular file of the same plaintext size and modification time, as rsync judges
        /// it. A rerun of an interrupted import then continues instead of stopping at the
        /// first file it copied before (`exists`). A damaged size is not the same file.
        func isUnchanged(_ entry: VaultEntry, as st: stat) throws -> Bool {
            guard !force, let there = try entry.stat(), OfflineSys.isRegular(there),
                  let size = try? tree.layout.plaintextSize(ciphertextSize: UInt64(there.st_size)) else { return false }
            return size == UInt64(st.st_size) && OfflineSys.sameModificationTime(
                there.st_mtim, st.st_mtim, resolutionNs: BackingCapabilities.of(entry.parent.fd).mtimeResolutionNs)
        }

        /// Whether `entry` is already a symlink to `target` (without `force`).
        func isUnchangedLink(_ entry: VaultEntry, target: [UInt8]) throws -> Bool {
            guard !force, let there = try entry.stat(), OfflineSys.isSymlink(there),
                  let sealed = try? OfflineSys.readLink(entry.parent.fd, entry.cName) else { return false }
            return (try? LinkTarget.open(sealed, keyring: tree.keyring, treeRoot: tree.root)) == target
        }

        /// An entry already in place: counted, not copied again.
        mutating func unchanged(_ entry: VaultEntry) {
            summary.unchanged += 1
            progress(.unchanged(entry.path.description))
        }

        /// A vault directory being filled from a local one: the local directory's entries,
        /// and the next one to copy.
        struct Frame {
            let entry: VaultEntry
            let stat: stat
            let dir: VaultDirectory
            /// The local source directory (this frame's own descriptor) and its path, for messages.
            let srcfd: Int32
            let local: String
            /// Made by this import (or an interrupted earlier one): it gets its mode when
            /// finished, or `finishAfterFailure` if the import fails inside it.
            let ours: Bool
            var finished = false
            var entries: [OfflineSys.Entry] = []
            var next = 0
        }

        /// Copies the local directory `name` in `dirfd` and everything below it to `entry`,
        /// depth first in the order of each listing. An explicit stack, not recursion: a tree
        /// can be nested deeper than a thread's stack holds frames (a recursion per level
        /// crashed, SIGSEGV, at some 1,500 levels). On an error the directories this run made
        /// that hold nothing are removed, every other one still open is left as a failed
        /// recursion left it (innermost first), and the error is thrown, an I/O error naming
        /// the local entry it met (`Importer.locate`).
        mutating func walk(dirfd: Int32, name: [CChar], stat st: stat, to entry: VaultEntry, local: String,
                           resolver: VaultResolver) throws {
            var stack: [Frame] = []
            do {
                guard let top = try enter(dirfd: dirfd, name: name, stat: st, to: entry, local: local, resolver: resolver) else { return }
                stack.append(top)
                stack[0].entries = try OfflineSys.list(top.srcfd)
                while let i = stack.indices.last {
                    guard stack[i].next < stack[i].entries.count else {
                        do { try leave(&stack[i]) } catch { throw Importer.locate(error, at: stack[i].local) }
                        close(stack[i].srcfd)
                        stack.removeLast()
                        continue
                    }
                    let child = stack[i].entries[stack[i].next]
                    stack[i].next += 1
                    let (srcfd, dir) = (stack[i].srcfd, stack[i].dir)
                    let childLocal = stack[i].local + "/" + child.name
                    do {
                        guard let cst = try OfflineSys.lstat(srcfd, child.cName) else { continue }   // vanished meanwhile
                        let e = VaultEntry(parent: dir, name: child.raw, encoded: tree.names.locate(child.raw, in: dir.info, dirfd: dir.fd))
                        if OfflineSys.isDirectory(cst) {
                            if let sub = try enter(dirfd: srcfd, name: child.cName, stat: cst, to: e, local: childLocal,
                                                   resolver: resolver) {
                                stack.append(sub)
                                stack[stack.count - 1].entries = try OfflineSys.list(sub.srcfd)
                            }
                        } else {
                            try leaf(dirfd: srcfd, name: child.cName, stat: cst, to: e)
                        }
                    } catch { throw Importer.locate(error, at: childLocal) }
                }
            } catch {
                // Before the directories above them get their times (a removal changes its parent's).
                made.removeEmpty()
                for f in stack.reversed() {
                    close(f.srcfd)
                    if f.ours && !f.finished { PendingDirectory.finishAfterFailure(f.dir.fd, from: f.stat) }
                }
                throw error
            }
        }

        /// Makes (or merges into) the vault directory `entry` for the local directory `name`
        /// in `dirfd` and opens the source: the frame the walk fills (pushed before the source
        /// is listed, so that a failure there finishes it as a failed one). Nil when the
        /// directory is skipped (the vault's own encrypted tree).
        mutating func enter(dirfd: Int32, name: [CChar], stat st: stat, to entry: VaultEntry, local: String,
                            resolver: VaultResolver) throws -> Frame? {
            if let (dev, ino) = treeIdentity, st.st_dev == dev, st.st_ino == ino {
                summary.skipped.append(entry.path.description)
                progress(.skipped(entry.path.description, reason: "this vault's own encrypted tree"))
                return nil
            }
            let created: Bool
            if let existing = try entry.stat() {
                // Merged like cp -r; a file or symlink in the way is never replaced by a directory.
                guard OfflineSys.isDirectory(existing) else { throw StoreError.exists(entry.path.description) }
                created = false
            } else {
                // Writable while it is filled; its real mode is set after its children
                // (PendingDirectory: marked until then).
                try resolver.makeDirectory(entry, mode: 0o700, marker: PendingDirectory.storeMarker, made: made.add)
                created = true
            }
            let dir = try resolver.open(entry)
            // One an earlier, interrupted run made is finished as if made now.
            let ours = created || PendingDirectory.isMarked(dir.fd, PendingDirectory.storeMarker)
            summary.directories += 1
            progress(.directory(entry.path.description))
            let srcfd: Int32
            do { srcfd = try OfflineSys.openDirectory(dirfd, name) } catch {
                if ours { PendingDirectory.finishAfterFailure(dir.fd, from: st) }
                throw error
            }
            return Frame(entry: entry, stat: st, dir: dir, srcfd: srcfd, local: local, ours: ours)
        }

        /// All entries of a frame are copied: its directory gets its xattrs and mode, and is synced.
        func leave(_ f: inout Frame) throws {
            try importXattrs(from: f.srcfd, to: f.dir.fd)
            if f.ours { PendingDirectory.finish(f.dir.fd, PendingDirectory.storeMarker, from: f.stat) }
            f.finished = true
            made.finished(f.entry)
            try AtomicFile.syncDirectory(f.dir.fd, f.entry.path.description)
        }

        /// Streams `src` (a regular file, or stdin when `st` is nil) into a temp file in the
        /// target directory, then renames it into place.
        mutating func file(from src: Int32, stat st: stat?, to entry: VaultEntry) throws {
            if let st, try isUnchanged(entry, as: st) { return unchanged(entry) }
            let replacing = try checkReplace(entry)
            let display = entry.path.description
            let dirfd = entry.parent.fd
            let tmp = OfflineSys.temporaryName()
            PartialFile.register(dirfd, Array(tmp.utf8CString))   // a signal removes it (PartialFile)
            defer { PartialFile.clear() }
            let fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw StoreError.posix("create temp file for \(display)") }
            var placed = false
            defer { if !placed { unlinkat(dirfd, tmp, 0) } }
            let content: ContentFile
            do {
                content = try ContentFile.create(fd: fd, layout: tree.layout, keyring: tree.keyring,
                                                 protectionClass: cls ?? entry.parent.info.defaultClass, displayPath: display,
                                                 holeMaps: tree.holeMaps())
            } catch { close(fd); throw error }
            defer { content.close() }
            if replacing { progress(.replacing(display)) }
            progress(.fileStarted(display, size: st.map { UInt64($0.st_size) }))
            let block = importer.blockSize
            let buf = UnsafeMutableRawPointer.allocate(byteCount: block, alignment: 16)
            defer { secureZero(UnsafeMutableRawBufferPointer(start: buf, count: block)); buf.deallocate() }
            var offset: UInt64 = 0
            while true {
                let n = try OfflineSys.readStream(src, buf, block)
                if n > 0 {
                    _ = try content.write(from: buf, count: n, offset: offset)
                    offset += UInt64(n)
                    progress(.fileProgress(display, done: offset))
                }
                if n < block { break }
            }
            if st != nil { try importXattrs(from: src, to: fd) }
            _ = fchmod(fd, st.map { $0.st_mode & 0o7777 } ?? Importer.stdinMode)
            try content.sync()
            if let st = st { OfflineSys.setTimes(fd, from: st) }
            try entry.create {
                try OfflineSys.rename(dirfd, Array(tmp.utf8CString), dirfd, entry.cName, replace: force, display: display)
            }
            placed = true
            summary.files += 1
            summary.bytes += offset
            progress(.file(display, bytes: offset))
        }

        mutating func symlink(dirfd: Int32, name: [CChar], stat st: stat, to entry: VaultEntry) throws {
            let target = try OfflineSys.readLink(dirfd, name)
            if try isUnchangedLink(entry, target: target) { return unchanged(entry) }
            try checkReplace(entry)
            let display = entry.path.description
            let stored: LinkTarget.Stored
            do { stored = try LinkTarget.seal(target, keyring: tree.keyring) }
            catch { throw StoreError.io(errno: ENAMETOOLONG, context: "symlink target of \(display) is longer than \(LinkTarget.maxPlainLength) bytes") }
            let tmp = OfflineSys.temporaryName()
            // One step for a signal (DeferredSignals): the temp link is renamed or removed first,
            // and a target kept in a companion (in the tree's root) is written before the link.
            try DeferredSignals.during {
                var rootFD: Int32 = -1
                if case .companion = stored {
                    rootFD = Glibc.open(tree.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    guard rootFD >= 0 else { throw StoreError.posix("open the tree's root") }
                    do { try LinkTarget.writeCompanion(stored, rootFD: rootFD) } catch { close(rootFD); throw error }
                }
                var placed = false
                defer {
                    if rootFD >= 0 {
                        if !placed { LinkTarget.removeCompanion(ofStored: Array(stored.symlink.utf8), rootFD: rootFD) }
                        close(rootFD)
                    }
                }
                guard symlinkat(stored.symlink, entry.parent.fd, tmp) == 0 else { throw StoreError.posix("symlink \(display)") }
                defer { if !placed { unlinkat(entry.parent.fd, tmp, 0) } }
                OfflineSys.setTimes(entry.parent.fd, tmp, from: st)
                try entry.create {
                    try OfflineSys.rename(entry.parent.fd, Array(tmp.utf8CString), entry.parent.fd, entry.cName,
                                          replace: force, display: display)
                }
                placed = true
            }
            summary.symlinks += 1
            progress(.symlink(display))
        }

        /// Seals the source's `user.*` attributes onto the ciphertext entry (the stored name
        /// and value as FORMAT.md section 8); other namespaces are not copied, nor the
        /// `user.*` names of `notImportedXattrs`.
        func importXattrs(from src: Int32, to dst: Int32) throws {
            for name in try OfflineXattr.names(src) where Importer.importsXattr(name) {
                let value = try OfflineXattr.get(src, name)
                // A failure names the attribute as the source has it, not its sealed name;
                // over the format's limit it is E2BIG, as on the mount (FORMAT.md section 8).
                let context = "set the extended attribute \(String(decoding: name, as: UTF8.self))"
                guard value.count <= XattrCodec.maxValueSize else { throw StoreError.posix(context, E2BIG) }
                let stored = tree.xattrs.storedName(name)
                do { try OfflineXattr.set(dst, stored, tree.xattrs.sealValue(value, storedName: stored)) }
                catch StoreError.io(let e, _) { throw StoreError.posix(context, e) }
            }
        }
    }
}

/// `realpath(3)` as a String; nil when the path cannot be resolved.
public enum RealPath {
    public static func of(_ path: String) -> String? {
        guard let r = realpath(path, nil) else { return nil }
        defer { free(r) }
        return String(cString: r)
    }
}
