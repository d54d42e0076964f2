import Glibc
import CFuse

/// The `fuse_lowlevel_ops` table. Every entry is a capture-free closure (so it converts
/// to a C function pointer) that finds the filesystem through the session's userdata.
/// They live inside a type, not at top level, so no actor isolation applies to them.
enum FuseOps {
    @inline(__always)
    static func fs(_ req: fuse_req_t?) -> VaultFileSystem {
        VaultFileSystem.from(fuse_req_userdata(req)!)
    }

    /// Runs one request behind the wipe gate: once `wipeAll()` has run, every key is gone
    /// and requests are refused instead of touching wiped memory. Every request but the
    /// ones desktop panels, disk monitors and shells poll on their own (statfs, and stat of
    /// a path: lookup, getattr, access, readlink of a symlink on the way, and reading
    /// extended attributes, as `ls -l`, `getfattr` and file managers' property queries do)
    /// counts as activity for `--idle`: polling must not keep a vault unlocked. Listing a
    /// folder, opening a file or changing anything (setxattr included) counts.
    @inline(__always)
    static func serve(_ req: fuse_req_t?, activity: Bool = true, _ body: (VaultFileSystem) -> Void) {
        let fs = fs(req)
        if activity { fs.onActivity?() }
        fs.gate.withReadLock {
            if fs.isWiped {
                fuse_reply_err(req, EACCES)
            } else {
                body(fs)
            }
        }
        // Outside the gate: closing waits until the requests in flight have ended.
        if fs.table.descriptors.hasRetired { fs.closeRetiredDescriptors() }
    }

    static func table() -> fuse_lowlevel_ops {
        var o = fuse_lowlevel_ops()
        o.`init` = { userdata, conn in
            guard let userdata, let conn else { return }
            VaultFileSystem.from(userdata).configure(conn)
        }
        o.lookup = { req, parent, name in FuseOps.serve(req, activity: false) { $0.lookup(req, parent, name) } }
        o.forget = { req, ino, n in
            FuseOps.fs(req).forget(ino, n)
            fuse_reply_none(req)
        }
        o.forget_multi = { req, count, forgets in
            let f = FuseOps.fs(req)
            if let forgets {
                for i in 0..<count { f.forget(forgets[i].ino, forgets[i].nlookup) }
            }
            fuse_reply_none(req)
        }
        o.getattr = { req, ino, fi in FuseOps.serve(req, activity: false) { $0.getattr(req, ino, fi) } }
        o.setattr = { req, ino, attr, valid, fi in FuseOps.serve(req) { $0.setattr(req, ino, attr, valid, fi) } }
        o.readlink = { req, ino in FuseOps.serve(req, activity: false) { $0.readlink(req, ino) } }
        o.mknod = { req, parent, name, mode, rdev in FuseOps.serve(req) { $0.mknod(req, parent, name, mode, rdev) } }
        o.mkdir = { req, parent, name, mode in FuseOps.serve(req) { $0.mkdir(req, parent, name, mode) } }
        o.unlink = { req, parent, name in FuseOps.serve(req) { $0.unlink(req, parent, name) } }
        o.rmdir = { req, parent, name in FuseOps.serve(req) { $0.rmdir(req, parent, name) } }
        o.symlink = { req, link, parent, name in FuseOps.serve(req) { $0.symlink(req, link, parent, name) } }
        o.rename = { req, parent, name, newparent, newname, flags in
            FuseOps.serve(req) { $0.rename(req, parent, name, newparent, newname, flags) }
        }
        o.link = { req, ino, newparent, newname in FuseOps.serve(req) { $0.link(req, ino, newparent, newname) } }
        o.open = { req, ino, fi in FuseOps.serve(req) { $0.open(req, ino, fi) } }
        o.read = { req, ino, size, off, fi in FuseOps.serve(req) { $0.read(req, ino, size, off, fi) } }
        o.write = { req, ino, buf, size, off, fi in FuseOps.serve(req) { $0.write(req, ino, buf, size, off, fi) } }
        o.flush = { req, ino, fi in FuseOps.fs(req).flush(req, ino, fi) }
        // Closing needs no key: always served, so handles and descriptors are freed after a wipe.
        o.release = { req, ino, fi in FuseOps.fs(req).release(req, ino, fi) }
        o.fsync = { req, ino, datasync, fi in FuseOps.serve(req) { $0.fsync(req, ino, datasync, fi) } }
        o.opendir = { req, ino, fi in FuseOps.serve(req) { $0.opendir(req, ino, fi) } }
        o.readdir = { req, ino, size, off, fi in FuseOps.serve(req) { $0.readdir(req, ino, size, off, fi, plus: false) } }
        o.readdirplus = { req, ino, size, off, fi in FuseOps.serve(req) { $0.readdir(req, ino, size, off, fi, plus: true) } }
        o.releasedir = { req, _, fi in FuseOps.fs(req).releasedir(req, fi) }
        o.fsyncdir = { req, ino, datasync, _ in FuseOps.serve(req) { $0.fsyncdir(req, ino, datasync) } }
        o.statfs = { req, _ in FuseOps.serve(req, activity: false) { $0.statfs(req) } }
        o.setxattr = { req, ino, name, value, size, flags in FuseOps.serve(req) { $0.setxattr(req, ino, name, value, size, flags) } }
        o.getxattr = { req, ino, name, size in FuseOps.serve(req, activity: false) { $0.getxattr(req, ino, name, size) } }
        o.listxattr = { req, ino, size in FuseOps.serve(req, activity: false) { $0.listxattr(req, ino, size) } }
        o.removexattr = { req, ino, name in FuseOps.serve(req) { $0.removexattr(req, ino, name) } }
        o.access = { req, ino, mask in FuseOps.serve(req, activity: false) { $0.access(req, ino, mask) } }
        o.create = { req, parent, name, mode, fi in FuseOps.serve(req) { $0.create(req, parent, name, mode, fi) } }
        o.lseek = { req, ino, off, whence, fi in FuseOps.serve(req) { $0.lseek(req, ino, off, whence, fi) } }
        o.fallocate = { req, ino, mode, off, length, fi in FuseOps.serve(req) { $0.fallocate(req, ino, mode, off, length, fi) } }
        return o
    }
}

extension VaultFileSystem {
    /// FUSE `init`: negotiate capabilities with the kernel.
    func configure(_ conn: UnsafeMutablePointer<fuse_conn_info>) {
        let capable = conn.pointee.capable
        var want = conn.pointee.want
        // Splice buys nothing: every byte is encrypted or decrypted in user space.
        want &= ~UInt32(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE)
        // Always READDIRPLUS, never the kernel's "auto" mode: auto sends plus only for the
        // first batch of a listing and then one LOOKUP per remaining entry, which a file
        // manager or thumbnailer (list, then open every file) pays for thousands of times.
        if capable & UInt32(FUSE_CAP_READDIRPLUS) != 0 {
            want |= UInt32(FUSE_CAP_READDIRPLUS)
        }
        want &= ~UInt32(FUSE_CAP_READDIRPLUS_AUTO)
        if options.writebackCache && capable & UInt32(FUSE_CAP_WRITEBACK_CACHE) != 0 {
            want |= UInt32(FUSE_CAP_WRITEBACK_CACHE)
        } else {
            want &= ~UInt32(FUSE_CAP_WRITEBACK_CACHE)
        }
        if capable & UInt32(FUSE_CAP_ATOMIC_O_TRUNC) != 0 { want |= UInt32(FUSE_CAP_ATOMIC_O_TRUNC) }
        conn.pointee.want = want
        conn.pointee.max_write = 1 << 20
        conn.pointee.max_readahead = 1 << 20
        // Must equal the max_read mount option (libfuse checks).
        if options.maxRead > 0 { conn.pointee.max_read = UInt32(options.maxRead) }
        // Room for several read-ahead windows in flight (MountOptions.maxBackground). libfuse
        // caps it at 65535 and, with congestion_threshold left 0, sends three quarters of it
        // as the threshold; the kernel caps both at fuse's max_user_bgreq for a user's mount.
        if options.maxBackground > 0 { conn.pointee.max_background = UInt32(options.maxBackground) }
    }
}

extension VaultFileSystem {
    /// The filesystem behind libfuse's userdata pointer (`fuse_session_new`'s): requests,
    /// `init` and the /dev/fuse hooks (`DeviceIO`) all find it this way.
    @inline(__always)
    static func from(_ userdata: UnsafeMutableRawPointer) -> VaultFileSystem {
        Unmanaged<VaultFileSystem>.fromOpaque(userdata).takeUnretainedValue()
    }
}
