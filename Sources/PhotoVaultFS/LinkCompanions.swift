import Glibc
import PhotoVaultStore

/// Symlinks whose target is kept in a companion file in the tree's root (`LinkTarget`): the
/// companion goes when the symlink's last link goes, by unlink or by a rename over it. A
/// rename or a hard link needs nothing (the companion is the root's, wherever the link is).
extension VaultFileSystem {
    /// A backing symlink about to be removed or replaced, kept open to see whether a link is left.
    struct HeldSymlink {
        let fd: Int32
        let stored: [UInt8]
    }

    /// Entry `backing` of `dirFD` if it is a symlink whose target lives in a companion; nil
    /// otherwise (one readlinkat, which fails at once for anything but a symlink).
    func holdSymlinkWithCompanion(_ dirFD: Int32, _ backing: [UInt8]) -> HeldSymlink? {
        var buf = [UInt8](repeating: 0, count: 256)
        let n = Syscall.withCName(backing) { name in
            buf.withUnsafeMutableBufferPointer { p in
                p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { Glibc.readlinkat(dirFD, name, $0, p.count) }
            }
        }
        guard n > 0, n < buf.count, LinkTarget.companionName(ofStored: Array(buf[0..<n])) != nil else { return nil }
        let fd = Syscall.openat(dirFD, backing, PV_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        return HeldSymlink(fd: fd, stored: Array(buf[0..<n]))
    }

    /// After the unlink or rename: removes the companion if the symlink has no link left.
    func releaseHeldSymlink(_ held: HeldSymlink?) {
        guard let held else { return }
        var st = stat()
        if fstatat(held.fd, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 && st.st_nlink == 0 {
            backend.linkTargetRemoved(held.stored, rootFD: table.rootFD)
        }
        close(held.fd)
    }
}
