import Glibc
import CFuse
import PhotoVaultCrypto
import PhotoVaultStore

/// Open files and directories: handles, content I/O, listings.
extension VaultFileSystem {
    func handle(_ fi: UnsafeMutablePointer<fuse_file_info>?) -> OpenFile? {
        guard let fi, fi.pointee.fh != 0, let p = UnsafeRawPointer(bitPattern: UInt(fi.pointee.fh)) else { return nil }
        return Unmanaged<OpenFile>.fromOpaque(p).takeUnretainedValue()
    }

    func dirHandle(_ fi: UnsafeMutablePointer<fuse_file_info>?) -> OpenDirectory? {
        guard let fi, fi.pointee.fh != 0, let p = UnsafeRawPointer(bitPattern: UInt(fi.pointee.fh)) else { return nil }
        return Unmanaged<OpenDirectory>.fromOpaque(p).takeUnretainedValue()
    }

    /// The shared content of `node`, opened on first use. Every acquire is paired with
    /// `releaseContent`. Enforces the lock rules for re-opening.
    func acquireContent(_ node: Inode, writes: Bool) throws -> ContentState {
        // During a lock's grace period nothing new reaches a file's content: not an open, and
        // not a truncate by path or a class change, which acquire it without one.
        if opensRefused { throw FSError.locked }
        // No path is built here (it cost about 5 us per open): errors are logged by `fail`
        // with the path the file has when the error happens.
        return try node.stateLock.withLock {
            if let c = node.content, !c.isKeyWiped {
                if let cls = c.protectionClass, !backend.canOpen(cls) { throw FSError.locked }
                // The shared descriptor was opened for an earlier open: check this one's right
                // to write as opening the file would (a daemon without permission override
                // is the only check there is without default_permissions).
                if writes {
                    let proc = Syscall.procPath(try node.fd)
                    if c.writable {
                        guard faccessat(AT_FDCWD, proc, W_OK, AT_EACCESS) == 0 else { throw FSError.last() }
                    } else {
                        // Opened read-only while the file was not writable; it is now.
                        let fd = Glibc.open(proc, O_RDWR | O_CLOEXEC)
                        guard fd >= 0 else { throw FSError.last() }
                        try c.becomeWritable(fd)
                    }
                }
                c.opens += 1
                if writes { c.writers += 1 }
                return c
            }
            // Read-modify-write of chunks needs reads even on write-only opens: O_RDWR.
            let proc = Syscall.procPath(try node.fd)
            var writable = true
            var fd = Glibc.open(proc, O_RDWR | O_CLOEXEC)
            if fd < 0 && !writes && (errno == EACCES || errno == EROFS) {
                fd = Glibc.open(proc, O_RDONLY | O_CLOEXEC)
                writable = false
            }
            guard fd >= 0 else { throw FSError.last() }
            let file: FileContent
            do {
                file = try backend.openContent(fd: fd, classForNewHeader: classForNewHeader(of: node), rootFD: table.rootFD)
            } catch {
                close(fd)
                throw error
            }
            // A wiped predecessor (locked, then unlocked) stays with its old handles.
            let c = ContentState(fd: fd, file: file, writable: writable)
            c.opens = 1
            c.writers = writes ? 1 : 0
            node.content = c
            return c
        }
    }

    /// A file without a header yet gets one on its first write, as a new file does, with
    /// `ProtectionClass.forHeaderlessFile` (FORMAT.md section 4): its directory's default
    /// class, or with several hard links (whose directories may disagree) the strictest
    /// class — not the default of whichever directory it was last looked up in. nil if the
    /// directory is unknown.
    func classForNewHeader(of node: Inode) -> ProtectionClass? {
        var st = stat()
        let links = (try? node.fd).map { fstatat($0, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 } == true ? UInt64(st.st_nlink) : 1
        guard let directory = table.parent(of: node).flatMap({ try? naming(of: $0) }).flatMap({ backend.defaultClass(in: $0) }) else {
            return nil
        }
        return ProtectionClass.forHeaderlessFile(links: links, directoryDefault: directory)
    }

    func releaseContent(_ node: Inode, _ c: ContentState, writes: Bool) {
        let last: Bool = node.stateLock.withLock {
            c.opens -= 1
            if writes { c.writers -= 1 }
            guard c.opens == 0 else { return false }
            if node.content === c { node.content = nil }
            return true
        }
        if last { c.close() }
    }

    /// Creates backing file `backing` in `p` with fresh content; returns it acquired once for writing.
    func createFile(_ p: Inode, _ backing: [UInt8], plain: [UInt8], mode: mode_t,
                    owner: Ownership?) throws -> (Inode, stat, ContentState) {
        let pfd = try p.fd
        let fd = Syscall.openat(pfd, backing, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, mode & 0o7777)
        guard fd >= 0 else { throw FSError.last() }
        owner?.apply(to: backing, in: pfd)
        let file: FileContent
        do {
            file = try backend.createContent(fd: fd, protectionClass: backend.defaultClass(in: try naming(of: p)), rootFD: table.rootFD)
        } catch {
            close(fd)
            _ = Syscall.unlinkat(pfd, backing, 0)
            throw error
        }
        let opath = Syscall.openat(pfd, backing, PV_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        var st = stat()
        guard opath >= 0, fstatat(opath, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
            let e = errno
            if opath >= 0 { close(opath) }
            try? file.close()
            _ = Syscall.unlinkat(pfd, backing, 0)
            throw FSError.posix(e)
        }
        let node: Inode
        do { node = try table.insert(fd: opath, st: st, parent: p, backing: backing, name: plain) } catch {
            try? file.close()
            _ = Syscall.unlinkat(pfd, backing, 0)
            throw error
        }
        let c = ContentState(fd: fd, file: file, writable: true)
        c.opens = 1
        c.writers = 1
        node.stateLock.withLock { node.content = c }
        return (node, st, c)
    }

    private func install(_ h: OpenFile, _ fi: UnsafeMutablePointer<fuse_file_info>) {
        // An open file keeps its node's descriptor: unlinked, it has no name to reopen it by.
        table.descriptors.pin(h.inode)
        fi.pointee.fh = UInt64(UInt(bitPattern: Unmanaged.passRetained(h).toOpaque()))
        // All changes go through us, so the kernel's page cache stays valid across opens.
        fi.pointee.keep_cache = 1
        // FLUSH has nothing to do here (writes reach the backing file before they are
        // acknowledged; locks are the kernel's), so spare every close() that round trip.
        // The kernel ignores this with the writeback cache, where flush is then a no-op.
        fi.pointee.noflush = 1
        // A write-only handle skips the page cache (MountOptions.directWrites).
        if writeOnlyBypassesCache && fi.pointee.flags & O_ACCMODE == O_WRONLY {
            fi.pointee.direct_io = 1
        }
    }

    // MARK: - Regular files

    func open(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let fi else { fuse_reply_err(req, EINVAL); return }
        do {
            let node = try table.require(ino)
            guard node.isRegular else { throw node.isDirectory ? FSError.isDirectory : FSError.posix(ENXIO) }
            let flags = fi.pointee.flags
            // O_TRUNC truncates even with O_RDONLY, as on Linux (the kernel has checked write
            // permission; with atomic O_TRUNC it leaves the truncation to this open).
            let truncates = flags & O_TRUNC != 0
            let writes = flags & O_ACCMODE != O_RDONLY || truncates
            let c = try acquireContent(node, writes: writes)
            if truncates {
                do { try c.truncate(to: 0) } catch { releaseContent(node, c, writes: writes); throw error }
                if DeviceIO.requestDropsSetID && SetIDBits.takeDropped() { modeChangedUnderneath(ino) }
            }
            // O_APPEND needs nothing here: the kernel sets every such write's offset to the
            // end of file itself, and WRITEs that carry dirty mmap pages must land where
            // their offset says, whichever handle the kernel sends them through.
            install(OpenFile(inode: node, content: c, writes: writes), fi)
            fuse_reply_open(req, fi)
        } catch {
            fail(req, error, "open \(table.path(of: ino))")
        }
    }

    func create(_ req: fuse_req_t?, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ mode: mode_t,
                _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let fi else { fuse_reply_err(req, EINVAL); return }
        let name = Self.bytes(cname)
        do {
            if opensRefused { throw FSError.locked }
            let p = try table.require(parent)
            let flags = fi.pointee.flags
            try makingName(name, in: p) { b in
                do {
                    let (node, st, c) = try createFile(p, b, plain: name, mode: mode, owner: ownership(req, p))
                    install(OpenFile(inode: node, content: c, writes: true), fi)
                    var e = entry(node, st)
                    fuse_reply_create(req, &e, fi)
                } catch FSError.posix(EEXIST) where flags & O_EXCL == 0 {
                    // Raced with another creator: open the existing file instead.
                    var e = try lookupBacking(p, b, plain: name)
                    guard let node = table.get(e.ino) else { throw FSError.notFound }
                    let c: ContentState
                    do { c = try acquireContent(node, writes: true) } catch { table.forget(e.ino, 1); throw error }
                    do {
                        if flags & O_TRUNC != 0 {
                            try c.truncate(to: 0)
                            if DeviceIO.requestDropsSetID && SetIDBits.takeDropped() { modeChangedUnderneath(e.ino) }
                        }
                        e.attr = try attributes(of: node)
                    } catch {
                        // Nothing is installed yet: give back the content and the lookup.
                        releaseContent(node, c, writes: true)
                        table.forget(e.ino, 1)
                        throw error
                    }
                    install(OpenFile(inode: node, content: c, writes: true), fi)
                    fuse_reply_create(req, &e, fi)
                }
            }
        } catch {
            fail(req, error, "create \(childPath(parent, name))")
        }
    }

    func read(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ off: off_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let h = handle(fi) else { fuse_reply_err(req, EBADF); return }
        let buf = UnsafeMutableRawPointer.allocate(byteCount: max(size, 1), alignment: 16)
        // The reply is plaintext: zeroed before the memory goes back to the allocator, so
        // freed heap does not keep photos after their pages leave the cache (or after a lock).
        var used = size
        defer { secureZero(UnsafeMutableRawBufferPointer(start: buf, count: used)); buf.deallocate() }
        do {
            let n = try h.content.read(into: buf, count: size, offset: Int64(off))
            used = n
            fuse_reply_buf(req, buf.assumingMemoryBound(to: CChar.self), n)
        } catch {
            fail(req, error, "read \(table.path(of: ino)) at \(off)")
        }
    }

    func write(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ data: UnsafePointer<CChar>?, _ size: Int, _ off: off_t,
               _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let h = handle(fi), let data else { fuse_reply_err(req, EBADF); return }
        // The data is plaintext in libfuse's request buffer, which each worker thread keeps for
        // its next request and frees unzeroed when it ends: zeroed once sealed (after the reply,
        // which does not wait for it), as read replies are, so the daemon keeps no copy of a
        // photo it was given. libfuse reads the buffer no more once this returns (no splice:
        // the session's device I/O is `DeviceIO`'s read).
        defer { secureZero(UnsafeMutableRawBufferPointer(start: UnsafeMutableRawPointer(mutating: data), count: size)) }
        do {
            let n = try h.content.write(from: UnsafeRawPointer(data), count: size, offset: Int64(off))
            if DeviceIO.requestDropsSetID && SetIDBits.takeDropped() { modeChangedUnderneath(ino) }
            fuse_reply_write(req, n)
        } catch {
            fail(req, error, "write \(table.path(of: ino)) at \(off)")
        }
    }

    func flush(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        fuse_reply_err(req, 0)
    }

    func release(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        if let fi, let p = UnsafeRawPointer(bitPattern: UInt(fi.pointee.fh)) {
            let h = Unmanaged<OpenFile>.fromOpaque(p).takeRetainedValue()
            fi.pointee.fh = 0
            releaseContent(h.inode, h.content, writes: h.writes)
            table.descriptors.unpin(h.inode)
        }
        fuse_reply_err(req, 0)
    }

    func fsync(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ datasync: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let h = handle(fi) else { fuse_reply_err(req, EBADF); return }
        do {
            try h.content.sync(dataOnly: datasync != 0)
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "fsync \(table.path(of: ino))")
        }
    }

    /// fallocate(2). Mode 0 extends the file with sealed zeros (the space is promised, so no
    /// hole), FALLOC_FL_KEEP_SIZE reserves the ciphertext's space past the end;
    /// FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE, as the kernel requires) and FALLOC_FL_ZERO_RANGE
    /// make the range holes (FORMAT.md section 5). Collapsing, inserting and unsharing ranges
    /// are not supported (EOPNOTSUPP), as on tmpfs.
    func fallocate(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ mode: Int32, _ off: off_t, _ length: off_t,
                   _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let h = handle(fi) else { fuse_reply_err(req, EBADF); return }
        do {
            let keep = mode & FALLOC_FL_KEEP_SIZE_VALUE != 0
            let zeroing = mode & ~FALLOC_FL_KEEP_SIZE_VALUE
            guard zeroing == 0 || zeroing == FALLOC_FL_PUNCH_HOLE_VALUE || zeroing == FALLOC_FL_ZERO_RANGE_VALUE else {
                throw FSError.notSupported
            }
            guard zeroing != FALLOC_FL_PUNCH_HOLE_VALUE || keep else { throw FSError.notSupported }
            guard off >= 0, length > 0 else { throw FSError.invalidArgument }
            guard off <= off_t.max - length else { throw FSError.posix(EFBIG) }
            if zeroing != 0 {
                try h.content.zeroRange(offset: Int64(off), length: Int64(length), keepSize: keep)
            } else {
                try h.content.allocate(offset: Int64(off), length: Int64(length), keepSize: keep)
            }
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "fallocate \(table.path(of: ino)) at \(off)")
        }
    }

    /// SEEK_DATA / SEEK_HOLE (the kernel handles the other whences), from the file's hole map.
    func lseek(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ off: off_t, _ whence: Int32, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let h = handle(fi) else { fuse_reply_err(req, EBADF); return }
        do {
            guard whence == SEEK_DATA_VALUE || whence == SEEK_HOLE_VALUE else { throw FSError.invalidArgument }
            guard off >= 0 else { throw FSError.posix(ENXIO) }
            fuse_reply_lseek(req, off_t(try h.content.seek(from: Int64(off), data: whence == SEEK_DATA_VALUE)))
        } catch {
            fail(req, error, "lseek \(table.path(of: ino))")
        }
    }

    // MARK: - Directories

    func opendir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let fi else { fuse_reply_err(req, EINVAL); return }
        do {
            let node = try table.require(ino)
            let d = OpenDirectory(inode: node, entries: try listing(of: node, for: "opendir"))
            table.descriptors.pin(node)   // until releasedir, as an open file's
            fi.pointee.fh = UInt64(UInt(bitPattern: Unmanaged.passRetained(d).toOpaque()))
            fuse_reply_open(req, fi)
        } catch {
            fail(req, error, "opendir \(table.path(of: ino))")
        }
    }

    /// One line for a listing that fails because `what` cannot be read (EIO, EACCES, EMFILE).
    private func logListingFails(_ operation: String, _ what: String, _ node: Inode, _ e: FSError, _ tail: String = "") {
        log("\(operation): \(what) cannot be read (\(String(cString: strerror(e.errno)))): "
            + logPhrase(node.nodeID, { "listing \($0) fails" }, otherwise: "the listing fails") + tail)
    }

    /// The plaintext entries of directory `node` now, with "." and "..".
    /// `operation` (opendir, readdir) names the request in the log line of a failed listing.
    private func listing(of node: Inode, for operation: String) throws -> [OpenDirectory.Entry] {
        let nm: DirectoryNaming
        do { nm = try naming(of: node, logging: false) } catch {
            // A `.pvdir` that fails authentication is logged by `fail`; one that cannot be read
            // (EIO, EACCES, EMFILE) was logged only with debug on, so a listing failed unseen.
            let e = FSError.from(error)
            if case .integrity = e { throw e }
            logListingFails(operation, "the directory's \(DirectoryInfo.fileName)", node, e)
            throw e
        }
        var entries: [OpenDirectory.Entry] = []
        var st = stat()
        let fd = try node.fd
        _ = fstatat(fd, "..", &st, AT_SYMLINK_NOFOLLOW)
        // d_ino as stat shows st_ino. An entry lies on its directory's file system (but for a
        // mount point, whose d_ino is that of the directory it covers, as on any Linux mount).
        entries.append(.init(name: [0x2e, 0], backing: [], ino: node.shownIno, type: UInt8(DT_DIR)))
        entries.append(.init(name: [0x2e, 0x2e, 0], backing: [], ino: table.shownIno(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino)),
                             type: UInt8(DT_DIR)))
        for ent in try Syscall.listDirectory(fd) {
            let decoded: DecodedName
            do { decoded = try backend.plainName(ent.name, in: nm, dirFD: fd) } catch {
                // A name that cannot be read now (its long-name companion gives EIO, EACCES,
                // EMFILE) is not a damaged one: leaving it out would make `rsync --delete` or
                // a sync tool delete its copy of a file that is only unreadable for the moment.
                let e = FSError.from(error)
                logListingFails(operation, "a directory entry's name", node, e, " rather than leave the entry out")
                throw e
            }
            switch decoded {
            case .visible(let plain):
                entries.append(.init(name: plain + [0], backing: ent.name, ino: table.shownIno(dev: node.dev, ino: ent.ino),
                                     type: ent.type))
            case .hidden:
                continue
            case .corrupt:
                // A long name unlinked or renamed since the listing lost its companion with
                // it: gone, not damaged.
                var gone = stat()
                if Syscall.fstatat(fd, ent.name, &gone, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT { continue }
                log(logPhrase(node.nodeID, { "skipping an entry of \($0) whose name fails authentication: \(String(decoding: ent.name, as: UTF8.self))" },
                              otherwise: "skipping a directory entry whose name fails authentication ('photovault fsck' names it)"))
            }
        }
        return entries
    }

    func readdir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ off: off_t,
                 _ fi: UnsafeMutablePointer<fuse_file_info>?, plus: Bool) {
        guard let d = dirHandle(fi) else { fuse_reply_err(req, EBADF); return }
        let buf = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
        defer { buf.deallocate() }
        let entries: [OpenDirectory.Entry]
        do { entries = try d.entries(at: Int(off)) { try listing(of: d.inode, for: "readdir") } } catch {
            fail(req, error, "readdir \(table.path(of: ino))")
            return
        }
        var rem = size
        var i = Int(off)
        while i >= 0 && i < entries.count {
            let ent = entries[i]
            let p = buf + (size - rem)
            // readdirplus looks each entry up (one kernel reference each). An entry removed
            // since opendir is skipped; any other failure (EMFILE, EIO) ends this reply, and
            // is the reply when it is the first entry, so a listing never drops names silently.
            var e = fuse_entry_param()
            var counted = false
            if plus && !ent.backing.isEmpty {
                do {
                    e = try lookupBacking(d.inode, ent.backing, plain: Array(ent.name.dropLast()), listing: true)
                    counted = true
                } catch FSError.posix(ENOENT) {
                    i += 1
                    continue
                } catch {
                    if rem == size { fail(req, error, "readdir \(table.path(of: ino))"); return }
                    break
                }
            } else {
                e.attr.st_ino = ino_t(ent.ino)
                e.attr.st_mode = mode_t(ent.type) << 12
            }
            let used: Int = ent.name.withUnsafeBufferPointer { nb in
                nb.baseAddress!.withMemoryRebound(to: CChar.self, capacity: nb.count) { cname in
                    plus ? fuse_add_direntry_plus(req, p, rem, cname, &e, off_t(i + 1))
                         : fuse_add_direntry(req, p, rem, cname, &e.attr, off_t(i + 1))
                }
            }
            if used > rem {
                if counted { table.forget(e.ino, 1) }
                break
            }
            rem -= used
            i += 1
        }
        fuse_reply_buf(req, buf, size - rem)
    }

    func releasedir(_ req: fuse_req_t?, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        if let fi, let p = UnsafeRawPointer(bitPattern: UInt(fi.pointee.fh)) {
            let d = Unmanaged<OpenDirectory>.fromOpaque(p).takeRetainedValue()
            fi.pointee.fh = 0
            table.descriptors.unpin(d.inode)
        }
        fuse_reply_err(req, 0)
    }

    func fsyncdir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ datasync: Int32) {
        guard let node = table.get(ino) else { fuse_reply_err(req, ENOENT); return }
        let fd: Int32
        do { fd = openat(try node.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
            fuse_reply_err(req, FSError.from(error).errno)
            return
        }
        guard fd >= 0 else { fuse_reply_err(req, errno); return }
        let rc = datasync != 0 ? fdatasync(fd) : Glibc.fsync(fd)
        let e = rc == 0 ? 0 : errno
        close(fd)
        fuse_reply_err(req, e)
    }
}

let FALLOC_FL_KEEP_SIZE_VALUE: Int32 = 0x01
let FALLOC_FL_PUNCH_HOLE_VALUE: Int32 = 0x02
let FALLOC_FL_ZERO_RANGE_VALUE: Int32 = 0x10
