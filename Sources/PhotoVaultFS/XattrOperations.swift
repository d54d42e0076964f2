import Glibc
import CFuse
import PhotoVaultCrypto
import PhotoVaultStore

/// Extended attributes: user attributes are sealed by the backend; a few virtual ones are
/// answered here and never stored.
///
/// The virtual attributes answer `getxattr` and `setxattr` by name but are not listed:
/// copy tools that preserve xattrs (`rsync -X`, `cp --preserve=xattr`, `tar --xattrs`) copy
/// what `listxattr` shows, so a listing of only what the user set keeps their round trips
/// exact (copies out of the mount used to carry a class and robots attributes nobody set).
/// A tree from elsewhere that carries them (a copy made by an earlier build) still goes back
/// in, and `rsync -X` still removes from the destination what its source lacks: so a virtual
/// attribute behaves as one that always exists and is derived again on every read: removing
/// it succeeds and changes nothing, writing a robots attribute its own value succeeds,
/// writing it anything else is refused (EPERM), and writing the class attribute changes the
/// class (valid names only).
extension VaultFileSystem {
    public static let classAttribute = "user.photovault.class"
    /// Fixed on every directory: tell indexers (tracker, baloo) and backup tools to keep out
    /// of the plaintext view.
    static let robotAttributes = ["user.xdg.robots.index", "user.xdg.robots.backup"]
    static let robotValue = "false"

    /// The virtual attribute `name` (as the kernel passed it) is, if it is one of `node`'s.
    func virtualName(_ node: Inode, _ name: [UInt8]) -> String? {
        virtualNames(node).first { Array($0.utf8) == name }
    }

    func virtualNames(_ node: Inode) -> [String] {
        guard backend is PlainBackend == false else { return [] }
        if node.isDirectory { return [Self.classAttribute] + Self.robotAttributes }
        if node.isRegular { return [Self.classAttribute] }
        return []
    }

    /// nil: not a virtual attribute of this node.
    func virtualGet(_ node: Inode, _ raw: [UInt8]) throws -> [UInt8]? {
        guard let name = virtualName(node, raw) else { return nil }
        if Self.robotAttributes.contains(name) { return Array(Self.robotValue.utf8) }
        if node.isDirectory {
            return Array((backend.defaultClass(in: try naming(of: node)) ?? .default).name.utf8)
        }
        if let c = node.stateLock.withLock({ node.content }), let cls = c.protectionClass {
            return Array(cls.name.utf8)
        }
        let fd = Glibc.open(Syscall.procPath(try node.fd), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw FSError.last() }
        defer { close(fd) }
        // No header yet (an empty file left by a crash): the class its first write gives it,
        // so that the attribute listed can also be read (rsync -X fails otherwise).
        let cls = try backend.protectionClass(ofFile: fd) ?? classForNewHeader(of: node) ?? .default
        return Array(cls.name.utf8)
    }

    /// false: not a virtual attribute of this node.
    func virtualSet(_ node: Inode, _ raw: [UInt8], _ value: [UInt8], flags: Int32) throws -> Bool {
        guard let name = virtualName(node, raw) else { return false }
        // A virtual attribute always exists, so XATTR_CREATE can never succeed.
        if flags & Int32(XATTR_CREATE) != 0 { throw FSError.exists }
        var text = String(decoding: value, as: UTF8.self)
        while text.last == "\n" || text.last == "\0" { text.removeLast() }
        if Self.robotAttributes.contains(name) {
            // A copy tool writing back what it read is fine; changing the value is not.
            guard text == Self.robotValue else { throw FSError.permissionDenied }
            return true
        }
        guard let cls = ProtectionClass(name: text) else { throw FSError.invalidArgument }
        if node.isDirectory {
            try backend.setDefaultClass(cls, in: try naming(of: node), dirFD: try node.fd)
        } else {
            let c = try acquireContent(node, writes: true)
            defer { releaseContent(node, c, writes: true) }
            // A class change is not a content change: the header rewrite would move the
            // ciphertext's mtime, which is the file's mtime. Put atime and mtime back, as
            // the offline `class set` does (an import that sets the class after copying
            // would otherwise lose the times it preserved).
            let proc = Syscall.procPath(try node.fd)
            do {
                try c.rw.withWriteLock {
                    var before = stat()
                    let known = stat(proc, &before) == 0
                    defer { if known { _ = utimensat(AT_FDCWD, proc, [before.st_atim, before.st_mtim], 0) } }
                    try backend.setProtectionClass(cls, of: c.file)
                }
            } catch {
                // A failed fsync after the header was written: the file holds the new class
                // (the store keeps its header as written), so the inode reports it too.
                if let now = c.file.protectionClass { c.protectionClassChanged(to: now) }
                throw error
            }
            c.protectionClassChanged(to: cls)
        }
        return true
    }

    func getxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ size: Int) {
        let name = Self.bytes(cname)
        do {
            let node = try table.require(ino)
            let value: [UInt8]
            if let v = try virtualGet(node, name) {
                value = v
            } else {
                // A drive without xattrs (exFAT: EOPNOTSUPP; rclone: EIO) holds none but the
                // virtual ones.
                guard backing.xattrs else { throw FSError.posix(ENODATA) }
                let bname = try backend.sealXattrName(name)
                value = try backend.openXattrValue(try Self.readXattr(try node.fd, bname), name: name)
            }
            if size == 0 {
                fuse_reply_xattr(req, value.count)
            } else if value.count > size {
                throw FSError.rangeTooSmall
            } else {
                value.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), value.count) }
            }
        } catch {
            fail(req, error, "getxattr \(table.path(of: ino)) \(Self.shown(name))")
        }
    }

    func setxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ cname: UnsafePointer<CChar>?,
                  _ cvalue: UnsafePointer<CChar>?, _ size: Int, _ flags: Int32) {
        let name = Self.bytes(cname)
        do {
            let node = try table.require(ino)
            let value = cvalue.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            if try virtualSet(node, name, value, flags: flags) {
                fuse_reply_err(req, 0)
                return
            }
            // What a local file system without xattrs answers (exFAT, vfat).
            guard backing.xattrs else { throw FSError.posix(EOPNOTSUPP) }
            let bname = try backend.sealXattrName(name)
            let sealed = try backend.sealXattrValue(value, name: name)
            let proc = Syscall.procPath(try node.fd)
            let rc = sealed.withUnsafeBytes { CFuse.setxattr(proc, Self.cName(bname), $0.baseAddress, sealed.count, flags) }
            guard rc == 0 else { throw FSError.last() }
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "setxattr \(table.path(of: ino)) \(Self.shown(name))")
        }
    }

    func listxattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int) {
        do {
            let node = try table.require(ino)
            // Only what the user set: the virtual attributes are read by name (see above).
            var names: [[UInt8]] = []
            var damaged = false
            var listsTrusted: Bool?   // asked once, when the first trusted.* name comes
            for b in backing.xattrs ? try Self.listXattrs(try node.fd) : [] {
                if let plain = backend.openXattrName(b) {
                    if plain.starts(with: Self.trustedPrefix) {
                        if listsTrusted == nil { listsTrusted = CallerCapabilities.holds(CallerCapabilities.sysAdmin, req) }
                        if listsTrusted == false { continue }
                    }
                    names.append(plain)
                } else if b.starts(with: Self.storedPrefix) {
                    damaged = true   // one of ours whose name fails authentication: hidden
                }
            }
            if damaged { logDamagedXattrName(node, ino) }
            var out: [UInt8] = []
            for n in names { out += n + [0] }
            if size == 0 {
                fuse_reply_xattr(req, out.count)
            } else if out.count > size {
                throw FSError.rangeTooSmall
            } else {
                out.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), out.count) }
            }
        } catch {
            fail(req, error, "listxattr \(table.path(of: ino))")
        }
    }

    func removexattr(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        let name = Self.bytes(cname)
        do {
            let node = try table.require(ino)
            // Nothing to remove: the value is derived again on the next read (see above).
            if virtualName(node, name) != nil {
                fuse_reply_err(req, 0)
                return
            }
            guard backing.xattrs else { throw FSError.posix(ENODATA) }
            let bname = try backend.sealXattrName(name)
            guard CFuse.removexattr(Syscall.procPath(try node.fd), Self.cName(bname)) == 0 else { throw FSError.last() }
            fuse_reply_err(req, 0)
        } catch {
            fail(req, error, "removexattr \(table.path(of: ino)) \(Self.shown(name))")
        }
    }

    private static let storedPrefix = Array(XattrCodec.storedPrefix.utf8)
    /// Listed only to callers holding CAP_SYS_ADMIN (`CallerCapabilities`).
    private static let trustedPrefix = Array("trusted.".utf8)

    /// An attribute the listing hides because its name fails authentication (fsck reports
    /// it `xattrDamaged`): one line per inode, the path only where paths may be logged.
    private func logDamagedXattrName(_ node: Inode, _ ino: fuse_ino_t) {
        let first = node.stateLock.withLock { () -> Bool in
            defer { node.xattrNameFailureLogged = true }
            return !node.xattrNameFailureLogged
        }
        guard first else { return }
        log("an extended attribute whose name fails authentication is not listed: "
            + logPhrase(ino, { $0 }, otherwise: "a file of this vault (names stay out of the system log; 'photovault fsck' names it)")
            + " (logged once per file)")
    }

    /// An attribute name for a log line.
    static func shown(_ name: [UInt8]) -> String { String(decoding: name, as: UTF8.self) }

    /// A name's bytes as a C string.
    static func cName(_ name: [UInt8]) -> [CChar] { name.map { CChar(bitPattern: $0) } + [0] }

    static func readXattr(_ fd: Int32, _ raw: [UInt8]) throws -> [UInt8] {
        let path = Syscall.procPath(fd)
        let name = cName(raw)
        while true {
            let n = CFuse.getxattr(path, name, nil, 0)
            guard n >= 0 else { throw FSError.last() }
            var buf = [UInt8](repeating: 0, count: max(n, 1))
            let m = buf.withUnsafeMutableBytes { CFuse.getxattr(path, name, $0.baseAddress, $0.count) }
            if m < 0 && errno == ERANGE { continue }   // grew in between
            guard m >= 0 else { throw FSError.last() }
            return Array(buf[0..<m])
        }
    }

    static func listXattrs(_ fd: Int32) throws -> [[UInt8]] {
        let path = Syscall.procPath(fd)
        while true {
            let n = CFuse.listxattr(path, nil, 0)
            guard n >= 0 else { throw FSError.last() }
            if n == 0 { return [] }
            var buf = [CChar](repeating: 0, count: n)
            let m = buf.withUnsafeMutableBufferPointer { CFuse.listxattr(path, $0.baseAddress, $0.count) }
            if m < 0 && errno == ERANGE { continue }
            guard m >= 0 else { throw FSError.last() }
            return buf[0..<m].split(separator: 0).map { $0.map { UInt8(bitPattern: $0) } }
        }
    }
}
