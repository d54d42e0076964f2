import Glibc
import PhotoVaultStore

/// Files with holes keep their hole map in a companion in the tree's root (`HoleMapFile`):
/// it goes when the file's last link goes, by unlink or by a rename over it. A rename or a
/// hard link needs nothing (the map is named by the file ID, not by a path). Only a tree
/// that has such maps pays the extra open and pread per removal (`mayHaveCompanionsOfFiles`).
extension VaultFileSystem {
    /// A regular file about to lose a link, kept open to see whether a link is left.
    struct HeldFile {
        let fd: Int32
        let companions: [String]
    }

    func holdFileWithCompanions(_ dirFD: Int32, _ backing: [UInt8]) -> HeldFile? {
        guard backend.mayHaveCompanionsOfFiles(rootFD: table.rootFD) else { return nil }
        let fd = Syscall.openat(dirFD, backing, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_nlink == 1 else { close(fd); return nil }
        let names = backend.companionsOfFile(fd, rootFD: table.rootFD)
        guard !names.isEmpty else { close(fd); return nil }
        return HeldFile(fd: fd, companions: names)
    }

    /// After the unlink or rename: removes the companions if the file has no link left.
    func releaseHeldFile(_ held: HeldFile?) {
        guard let held else { return }
        var st = stat()
        if fstat(held.fd, &st) == 0 && st.st_nlink == 0 {
            backend.fileRemoved(companions: held.companions, rootFD: table.rootFD)
        }
        close(held.fd)
    }
}
