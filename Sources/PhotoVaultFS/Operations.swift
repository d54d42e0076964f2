import Glibc
import CFuse
import PhotoVaultCrypto
import PhotoVaultStore

/// Name and attribute operations. Each takes the request and replies exactly once.
extension VaultFileSystem {
    // MARK: - Helpers

    /// How a log line names node `node`: `withPath` of its plaintext path where paths may be
    /// logged (a foreground mount, `logsPlaintextPaths`), `without` otherwise, so that no
    /// file name reaches the system log of a background mount. Log lines that name a node ask here.
    func logPhrase(_ node: UInt64, _ withPath: (String) -> String, otherwise without: String) -> String {
        options.logsPlaintextPaths ? withPath(table.path(of: node)) : without
    }

    func fail(_ req: fuse_req_t?, _ error: Error, _ what: @autoclosure () -> String) {
        let e = FSError.from(error)
        if case .integrity(let detail) = e {
            if options.logsPlaintextPaths {
                log("EIO: \(what()): \(detail)")
            } else {
                log("EIO: a file of this vault failed authentication (names stay out of the system log; "
                    + "'photovault fsck' names the damaged files)")
            }
        } else if Self.isKeyMemoryFailure(error) {
            // ENOMEM alone would not say that the limit, not the machine, is short of memory.
            log("ENOMEM: " + (options.logsPlaintextPaths ? "\(what()): " : "") + CryptoError.memoryNotLockedMessage)
        } else if options.debug {
            log("\(what()): \(e)")
        }
        fuse_reply_err(req, e.errno)
    }

    static func isKeyMemoryFailure(_ error: Error) -> Bool {
        error as? StoreError == .keyMemoryNotLocked || error as? CryptoError == .memoryNotLocked
    }

    /// The naming context of directory `dir`, read from its `.pvdir` the first time. One that
    /// cannot be read (EIO, EACCES, EMFILE) is logged once per directory: every request
    /// that needs it (a lookup, a create, a rename) fails, and `fail` logs such errors only
    /// with debug on. A damaged one is logged by `fail` itself. A listing logs its own line
    /// each time (`logging: false` here).
    func naming(of dir: Inode, logging: Bool = true) throws -> DirectoryNaming {
        guard dir.isDirectory else { throw FSError.notDirectory }
        var firstFailure = false
        do {
            return try dir.stateLock.withLock {
                if let n = dir.naming { return n }
                do {
                    let n = try backend.naming(forDirectory: try dir.fd)
                    dir.naming = n
                    return n
                } catch {
                    if case .integrity = FSError.from(error) {} else if logging && !dir.namingFailureLogged {
                        dir.namingFailureLogged = true
                        firstFailure = true
                    }
                    throw error
                }
            }
        } catch {
            // Logged outside the inode's lock: the path takes the table's.
            if firstFailure {
                let e = FSError.from(error)
                log("the directory's \(DirectoryInfo.fileName) cannot be read (\(String(cString: strerror(e.errno)))): "
                    + logPhrase(dir.nodeID, { "requests in \($0) fail" }, otherwise: "requests in it fail")
                    + " (logged once per directory)")
            }
            throw error
        }
    }

    /// Who a new entry belongs to when the daemon creates it for someone else: with
    /// `--allow-other` a daemon running as root serves several users, and what one of them
    /// creates must be theirs, as on a local file system (the daemon creates it as root).
    /// The group follows a setgid parent, as the backing file system already made it.
    struct Ownership {
        let uid: uid_t
        let gid: gid_t   // gid_t.max: keep the one the backing file system gave

        func apply(to backing: [UInt8], in dirFD: Int32) {
            _ = Syscall.fchownat(dirFD, backing, uid, gid)
        }
    }

    func ownership(_ req: fuse_req_t?, _ parent: Inode) -> Ownership? {
        guard entriesBelongToCallers, let ctx = fuse_req_ctx(req)?.pointee, ctx.uid != 0 else { return nil }
        var st = stat()
        let setgid = (try? parent.fd).map { fstatat($0, "", &st, PV_AT_EMPTY_PATH) == 0 } == true && st.st_mode & S_ISGID != 0
        return Ownership(uid: ctx.uid, gid: setgid ? gid_t.max : ctx.gid)
    }

    static func bytes(_ name: UnsafePointer<CChar>?) -> [UInt8] {
        guard let name else { return [] }
        return Array(UnsafeRawBufferPointer(start: name, count: strlen(name)))
    }

    func childPath(_ parent: UInt64, _ name: [UInt8]) -> String {
        let p = table.path(of: parent)
        return (p == "/" ? "" : p) + "/" + String(decoding: name, as: UTF8.self)
    }

    /// `st_blksize` of regular files. `cp` sizes its buffer by it: with the backing file's
    /// 4 KiB it writes 128 KiB per request, with 256 KiB it writes 256 KiB (half the round
    /// trips; photo import 1.48x -> 1.68x gocryptfs, daemon CPU -13 %). Larger gains nothing
    /// for `cp` and makes programs that buffer by it (Python's `open`) read more than asked.
    static let preferredIOSize = blksize_t(256 << 10)

    /// The attributes the user sees: backing attributes with the plaintext size.
    func presented(_ st: stat, _ node: Inode) -> stat {
        var a = st
        a.st_ino = ino_t(node.shownIno)   // unique across the backing file systems (Inode)
        if node.isRegular {
            a.st_blksize = Self.preferredIOSize
            let open = node.stateLock.withLock { node.content }
            if let c = open, let s = try? c.size() {
                a.st_size = off_t(s)
            } else {
                a.st_size = off_t(backend.plaintextSize(backingSize: Int64(st.st_size)))
            }
        } else if node.isSymlink, let raw = try? Syscall.readlink(try node.fd),
                  let plain = try? backend.openLinkTarget(raw, rootFD: table.rootFD) {
            a.st_size = off_t(plain.count)
        }
        return a
    }

    func attributes(of node: Inode) throws -> stat {
        var st = stat()
        guard fstatat(try node.fd, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { throw FSError.last() }
        return presented(st, node)
    }

    func entry(_ node: Inode, _ st: stat) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = node.nodeID
        e.generation = 0
        e.attr = presented(st, node)
        e.attr_timeout = timeout
        e.entry_timeout = timeout
        return e
    }

    /// The backing name for a new entry `name` in `p` (writing a long name's companion),
    /// handed to `body`, which makes the entry. If `body` fails and no entry of that name
    /// exists, the companion is removed again: a refused create leaves nothing behind. (The
    /// kernel holds the parent directory's lock across a create, so no other creator of the
    /// same name can be between the two.)
    func makingName<T>(_ name: [UInt8], in p: Inode, _ body: ([UInt8]) throws -> T) throws -> T {
        let nm = try naming(of: p)
        let pfd = try p.fd
        let b = try backend.prepareName(name, in: nm, dirFD: pfd)
        do {
            return try body(b)
        } catch {
            var st = stat()
            if Syscall.fstatat(pfd, b, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT {
                backend.nameRemoved(b, in: nm, dirFD: pfd)
            }
            throw error
        }
    }

    /// Looks up backing entry `backing` of `parent` and counts one kernel reference
    /// (`listing`: for readdirplus, see `InodeTable.insert`).
    func lookupBacking(_ parent: Inode, _ backing: [UInt8], plain: [UInt8], listing: Bool = false) throws -> fuse_entry_param {
        let pfd = try parent.fd
        var st = stat()
        // A listing keeps descriptors only while the cache has room (`DescriptorCache.adopt`).
        // Past that (a folder of more files than the cache holds, or a tree of them), each
        // entry's descriptor was opened only to be closed again: a stat of the name is the
        // same lookup without the open and the close. The node is reopened by that name
        // when used (and must then still be this file: `DescriptorCache.reopen`).
        if listing && !table.descriptors.hasRoom {
            guard Syscall.fstatat(pfd, backing, &st, AT_SYMLINK_NOFOLLOW) == 0 else { throw FSError.last() }
            let node = try table.insert(fd: -1, st: st, parent: parent, backing: backing, name: plain, listing: true)
            return entry(node, st)
        }
        let fd = Syscall.openat(pfd, backing, PV_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw FSError.last() }
        guard fstatat(fd, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
            let e = errno; close(fd); throw FSError.posix(e)
        }
        let node = try table.insert(fd: fd, st: st, parent: parent, backing: backing, name: plain, listing: listing)
        return entry(node, st)
    }

    // MARK: - Lookup and attributes

    func lookup(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        let name = Self.bytes(cname)
        do {
            let p = try table.require(parent)
            let b = try backend.backingName(name, in: try naming(of: p), dirFD: try p.fd)
            var e = try lookupBacking(p, b, plain: name)
            fuse_reply_entry(req, &e)
        } catch FSError.posix(ENOENT) {
            // Negative entry: the kernel caches the absence (cp and rsync probe a lot).
            var e = fuse_entry_param()
            e.entry_timeout = timeout
            fuse_reply_entry(req, &e)
        } catch {
            fail(req, error, "lookup \(childPath(parent, name))")
        }
    }

    func forget(_ ino: fuse_ino_t, _ n: UInt64) {
        table.forget(ino, n)
    }

    /// `fi` is set when the kernel asks on behalf of an open file. With the writeback cache it
    /// does so before accepting a `write()` into its cache once the attributes were invalidated
    /// (as `lock()` does): refusing a handle whose key is wiped is what makes such a write
    /// fail at once, as a written-through one would, instead of failing at writeback.
    func getattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        do {
            if let h = handle(fi), h.content.isKeyWiped { throw FSError.locked }
            var st = try attributes(of: try table.require(ino))
            fuse_reply_attr(req, &st, timeout)
        } catch {
            fail(req, error, "getattr \(table.path(of: ino))")
        }
    }

    func setattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ attr: UnsafeMutablePointer<stat>?,
                 _ valid: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        do {
            let node = try table.require(ino)
            guard let a = attr?.pointee else { throw FSError.invalidArgument }
            let fd = try node.fd
            let proc = Syscall.procPath(fd)
            if valid & FUSE_SET_ATTR_MODE != 0 {
                guard !node.isSymlink else { throw FSError.notSupported }
                // Setuid and setgid are kept as given, on files too: the mount is `nosuid`, so they
                // never act, and writes drop them as on a local file system (`DeviceIO`).
                guard chmod(proc, a.st_mode & 0o7777) == 0 else { throw FSError.last() }
            }
            if valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID) != 0 {
                let uid = valid & FUSE_SET_ATTR_UID != 0 ? a.st_uid : uid_t.max
                let gid = valid & FUSE_SET_ATTR_GID != 0 ? a.st_gid : gid_t.max
                guard fchownat(fd, "", uid, gid, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { throw FSError.last() }
            }
            if valid & FUSE_SET_ATTR_SIZE != 0 {
                guard node.isRegular else { throw node.isDirectory ? FSError.isDirectory : FSError.invalidArgument }
                if let h = handle(fi) {
                    try h.content.truncate(to: Int64(a.st_size))
                } else {
                    let c = try acquireContent(node, writes: true)
                    defer { releaseContent(node, c, writes: true) }
                    try c.truncate(to: Int64(a.st_size))
                }
            }
            if valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW) != 0 {
                var tv = [timespec(tv_sec: 0, tv_nsec: Int(UTIME_OMIT_VALUE)), timespec(tv_sec: 0, tv_nsec: Int(UTIME_OMIT_VALUE))]
                if valid & FUSE_SET_ATTR_ATIME_NOW != 0 { tv[0].tv_nsec = Int(UTIME_NOW_VALUE) }
                else if valid & FUSE_SET_ATTR_ATIME != 0 { tv[0] = a.st_atim }
                if valid & FUSE_SET_ATTR_MTIME_NOW != 0 { tv[1].tv_nsec = Int(UTIME_NOW_VALUE) }
                else if valid & FUSE_SET_ATTR_MTIME != 0 { tv[1] = a.st_mtim }
                // /proc/self/fd/N of an PV_O_PATH fd names the file itself, symlinks included.
                guard utimensat(AT_FDCWD, proc, tv, 0) == 0 else { throw FSError.last() }
            }
            var st = try attributes(of: node)
            fuse_reply_attr(req, &st, timeout)
        } catch {
            fail(req, error, "setattr \(table.path(of: ino))")
        }
    }

    func access(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ mask: Int32) {
        do {
            let node = try table.require(ino)
            guard faccessat(AT_FDCWD, Syscall.procPath(try node.fd), mask, 0) == 0 else { throw FSError.last() }
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "access \(table.path(of: ino))")
        }
    }

    func statfs(_ req: fuse_req_t?) {
        var sv = statvfs()
        if fstatvfs(table.rootFD, &sv) != 0 {
            fuse_reply_err(req, errno)
        } else {
            sv.f_namemax = 255
            fuse_reply_statfs(req, &sv)
        }
    }

    // MARK: - Creating and removing names

    func mkdir(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ mode: mode_t) {
        let name = Self.bytes(cname)
        do {
            let p = try table.require(parent)
            let nm = try naming(of: p)
            let pfd = try p.fd
            var e = try makingName(name, in: p) { b in
                try backend.makeDirectory(named: b, in: pfd, parent: nm, mode: mode & 0o7777)
                ownership(req, p)?.apply(to: b, in: pfd)
                return try lookupBacking(p, b, plain: name)
            }
            fuse_reply_entry(req, &e)
        } catch {
            fail(req, error, "mkdir \(childPath(parent, name))")
        }
    }

    func rmdir(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        let name = Self.bytes(cname)
        do {
            let p = try table.require(parent)
            let nm = try naming(of: p)
            let pfd = try p.fd
            let b = try backend.backingName(name, in: nm, dirFD: pfd)
            try backend.removeDirectory(named: b, in: pfd)
            backend.nameRemoved(b, in: nm, dirFD: pfd)
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "rmdir \(childPath(parent, name))")
        }
    }

    func unlink(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        let name = Self.bytes(cname)
        do {
            let p = try table.require(parent)
            let nm = try naming(of: p)
            let pfd = try p.fd
            let b = try backend.backingName(name, in: nm, dirFD: pfd)
            let held = holdSymlinkWithCompanion(pfd, b)
            let heldFile = held == nil ? holdFileWithCompanions(pfd, b) : nil
            guard Syscall.unlinkat(pfd, b, 0) == 0 else {
                let e = errno
                releaseHeldSymlink(held)
                releaseHeldFile(heldFile)
                throw FSError.posix(e)
            }
            releaseHeldSymlink(held)
            releaseHeldFile(heldFile)
            backend.nameRemoved(b, in: nm, dirFD: pfd)
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "unlink \(childPath(parent, name))")
        }
    }

    func symlink(_ req: fuse_req_t?, _ link: UnsafePointer<CChar>?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        let name = Self.bytes(cname)
        do {
            // A drive without symlinks (exFAT: ENOSYS; an rclone mount: EIO) refuses them as
            // the kernel's exfat and vfat do.
            guard backing.symlinks else { throw FSError.posix(EPERM) }
            let p = try table.require(parent)
            let sealed = try backend.sealLinkTarget(Self.bytes(link), rootFD: table.rootFD)
            var made = false
            defer { if !made { backend.linkTargetRemoved(sealed, rootFD: table.rootFD) } }
            let pfd = try p.fd
            var e = try makingName(name, in: p) { b in
                guard Syscall.symlinkat(sealed, pfd, b) == 0 else { throw FSError.last() }
                made = true
                ownership(req, p)?.apply(to: b, in: pfd)
                return try lookupBacking(p, b, plain: name)
            }
            fuse_reply_entry(req, &e)
        } catch {
            fail(req, error, "symlink \(childPath(parent, name))")
        }
    }

    func readlink(_ req: fuse_req_t?, _ ino: fuse_ino_t) {
        do {
            let node = try table.require(ino)
            guard node.isSymlink else { throw FSError.invalidArgument }
            var plain = try backend.openLinkTarget(try Syscall.readlink(try node.fd), rootFD: table.rootFD)
            plain.append(0)
            plain.withUnsafeBufferPointer { p in
                p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { _ = fuse_reply_readlink(req, $0) }
            }
        } catch {
            fail(req, error, "readlink \(table.path(of: ino))")
        }
    }

    func link(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ newparent: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        let name = Self.bytes(cname)
        do {
            // Where the drive has no hard links, or links whose two names do not share one
            // inode number (sshfs): EPERM, as the kernel's exfat and vfat answer.
            guard backing.hardLinks else { throw FSError.posix(EPERM) }
            let node = try table.require(ino)
            let p = try table.require(newparent)
            let fd = try node.fd, pfd = try p.fd
            try makingName(name, in: p) { b in
                let rc = Syscall.withCName(b) { linkat(AT_FDCWD, Syscall.procPath(fd), pfd, $0, AT_SYMLINK_FOLLOW) }
                guard rc == 0 else { throw FSError.last() }
            }
            var st = stat()
            guard fstatat(fd, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { throw FSError.last() }
            table.addLookup(node)
            var e = entry(node, st)
            fuse_reply_entry(req, &e)
        } catch {
            fail(req, error, "link \(childPath(newparent, name))")
        }
    }

    func rename(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?,
                _ newparent: fuse_ino_t, _ cnewname: UnsafePointer<CChar>?, _ flags: UInt32) {
        let name = Self.bytes(cname), newname = Self.bytes(cnewname)
        do {
            guard flags & ~UInt32(RENAME_NOREPLACE_VALUE | RENAME_EXCHANGE_VALUE) == 0 else { throw FSError.invalidArgument }
            let p = try table.require(parent), np = try table.require(newparent)
            let nm = try naming(of: p)
            let pfd = try p.fd, npfd = try np.fd
            let ob = try backend.backingName(name, in: nm, dirFD: pfd)
            // A drive whose renamed directories lose the files just written in them (rclone's
            // VFS cache until its upload is done; rclone then leaves the remote directory
            // under its old name) moves no directory: EXDEV, on which mv and file managers
            // copy and delete instead, as between two file systems.
            if !backing.renamedDirectoryKeepsNewFiles {
                var st = stat()
                if Syscall.fstatat(pfd, ob, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_mode & S_IFMT == S_IFDIR {
                    throw FSError.posix(EXDEV)
                }
            }
            var replaced: HeldSymlink? = nil
            var replacedFile: HeldFile? = nil
            let nb = try makingName(newname, in: np) { nb in
                // A symlink or a file with holes renamed over loses a link: its companion may have to go.
                if flags == 0 && !(p === np && ob == nb) {
                    replaced = holdSymlinkWithCompanion(npfd, nb)
                    if replaced == nil { replacedFile = holdFileWithCompanions(npfd, nb) }
                }
                if backingRename(pfd, ob, npfd, nb, flags) != 0 {
                    let e = errno
                    releaseHeldSymlink(replaced)
                    releaseHeldFile(replacedFile)
                    replaced = nil
                    replacedFile = nil
                    // A directory may replace an empty one (rename(2)); the backing target still
                    // holds its .pvdir, so the kernel says ENOTEMPTY/EEXIST (sshfs: EPERM, the
                    // SFTP server's failure having no errno).
                    guard flags == 0, e == ENOTEMPTY || e == EEXIST || (e == EPERM && bothDirectories(pfd, ob, npfd, nb))
                    else { throw FSError.posix(e) }
                    try replaceEmptyDirectory(pfd, ob, npfd, nb)
                }
                return nb
            }
            releaseHeldSymlink(replaced)
            releaseHeldFile(replacedFile)
            if flags & UInt32(RENAME_EXCHANGE_VALUE) == 0 && !(p === np && ob == nb) {
                backend.nameRemoved(ob, in: nm, dirFD: pfd)
            }
            var st = stat()
            if Syscall.fstatat(npfd, nb, &st, AT_SYMLINK_NOFOLLOW) == 0 { table.renamed(st, parent: np, backing: nb, name: newname) }
            if flags & UInt32(RENAME_EXCHANGE_VALUE) != 0, Syscall.fstatat(pfd, ob, &st, AT_SYMLINK_NOFOLLOW) == 0 {
                table.renamed(st, parent: p, backing: ob, name: name)
            }
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "rename \(childPath(parent, name)) -> \(childPath(newparent, newname))")
        }
    }

    /// rename(2) of backing entries with the caller's flags, on a file system that may not
    /// take them (`BackingCapabilities`: exFAT, NTFS, sshfs refuse both with EINVAL).
    /// NOREPLACE then checks and renames (`NoReplace`: the kernel holds both directories'
    /// locks across this request, and the daemon is the tree's only writer); EXCHANGE has no
    /// such fallback and is refused with EINVAL, as those file systems refuse it themselves.
    private func backingRename(_ oldDir: Int32, _ ob: [UInt8], _ newDir: Int32, _ nb: [UInt8], _ flags: UInt32) -> Int32 {
        if flags == 0 { return Syscall.renameat2(oldDir, ob, newDir, nb, 0) }
        let caps = backing
        if flags & UInt32(RENAME_EXCHANGE_VALUE) != 0 && !caps.renameExchange { errno = EINVAL; return -1 }
        if flags == UInt32(RENAME_NOREPLACE_VALUE) && !caps.renameNoReplace {
            return Syscall.withCName(ob) { o in Syscall.withCName(nb) { n in NoReplace.rename(oldDir, o, newDir, n) } }
        }
        return Syscall.renameat2(oldDir, ob, newDir, nb, flags)
    }

    /// Moves directory `ob` over directory `nb`, which is empty in the plaintext view: swap the
    /// two atomically, then remove the old target (now under the source name). If the old
    /// target is not empty after all, swap back and fail as rename(2) does.
    private func replaceEmptyDirectory(_ oldDir: Int32, _ ob: [UInt8], _ newDir: Int32, _ nb: [UInt8]) throws {
        guard backing.renameExchange else {
            return try replaceEmptyDirectoryWithoutExchange(oldDir, ob, newDir, nb)
        }
        guard Syscall.renameat2(oldDir, ob, newDir, nb, UInt32(RENAME_EXCHANGE_VALUE)) == 0 else { throw FSError.last() }
        do {
            try backend.removeDirectory(named: ob, in: oldDir)
        } catch {
            _ = Syscall.renameat2(oldDir, ob, newDir, nb, UInt32(RENAME_EXCHANGE_VALUE))
            throw error
        }
    }

    private func bothDirectories(_ oldDir: Int32, _ ob: [UInt8], _ newDir: Int32, _ nb: [UInt8]) -> Bool {
        var a = stat(), b = stat()
        return Syscall.fstatat(oldDir, ob, &a, AT_SYMLINK_NOFOLLOW) == 0 && Syscall.fstatat(newDir, nb, &b, AT_SYMLINK_NOFOLLOW) == 0
            && a.st_mode & S_IFMT == S_IFDIR && b.st_mode & S_IFMT == S_IFDIR
    }

    /// The same without RENAME_EXCHANGE: the old target goes aside under a temp name and is
    /// removed (put back if it is not empty after all), then the source takes its name. A
    /// crash in between leaves the source under its old name and at most a `.pvtmp-`
    /// directory holding only a `.pvdir` (fsck removes it); the target was empty, so
    /// nothing is lost. (Removing it before the move, not after, is what keeps a target
    /// that turns out not to be empty from ever sitting under a temp name.) If the final
    /// rename fails, the source stays where it was and the empty target is gone.
    private func replaceEmptyDirectoryWithoutExchange(_ oldDir: Int32, _ ob: [UInt8], _ newDir: Int32, _ nb: [UInt8]) throws {
        let aside = Array((AtomicFile.tempPrefix + Base64Hex.random(8)).utf8)
        guard Syscall.renameat2(newDir, nb, newDir, aside, 0) == 0 else { throw FSError.last() }
        do {
            try backend.removeDirectory(named: aside, in: newDir)
        } catch {
            _ = Syscall.renameat2(newDir, aside, newDir, nb, 0)
            throw error
        }
        guard Syscall.renameat2(oldDir, ob, newDir, nb, 0) == 0 else { throw FSError.last() }
    }

    func mknod(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ mode: mode_t, _ rdev: dev_t) {
        let name = Self.bytes(cname)
        do {
            if mode & S_IFMT == S_IFREG && opensRefused { throw FSError.locked }   // as create, in the grace
            let p = try table.require(parent)
            var e = try makingName(name, in: p) { b -> fuse_entry_param in
                if mode & S_IFMT == S_IFREG {
                    let (node, st, content) = try createFile(p, b, plain: name, mode: mode, owner: ownership(req, p))
                    releaseContent(node, content, writes: true)
                    return entry(node, st)
                }
                let pfd = try p.fd
                guard Syscall.mknodat(pfd, b, mode, rdev) == 0 else { throw FSError.last() }
                ownership(req, p)?.apply(to: b, in: pfd)
                return try lookupBacking(p, b, plain: name)
            }
            fuse_reply_entry(req, &e)
        } catch {
            fail(req, error, "mknod \(childPath(parent, name))")
        }
    }
}

// Linux values that Glibc does not import as Swift constants (UTIME_*: PhotoVaultStore).
let RENAME_NOREPLACE_VALUE: Int32 = 1
let RENAME_EXCHANGE_VALUE: Int32 = 2
