import Glibc

/// `/dev/fuse` as `mount` needs it: the FUSE character device (misc 10,229) that this
/// process may open. Checked before the password is asked.
enum FuseDevice {
    static let path = "/dev/fuse"
    static let major: UInt64 = 10
    static let minor: UInt64 = 229

    static func check() throws {
        var st = stat()
        guard stat(path, &st) == 0 else { throw CLIError.noFuseDevice(errno) }
        // A regular file or directory bound over it, or a node with other numbers, passed the
        // access() check and libfuse then failed with its own raw line ("fuse: mount failed:
        // Invalid argument", "failed to open /dev/fuse: No such device or address"), exit 1.
        if let what = misfit(mode: st.st_mode, rdev: UInt64(st.st_rdev)) { throw CLIError.notFuseDevice(what) }
        guard access(path, R_OK | W_OK) == 0 else { throw CLIError.noFuseDevice(errno) }
    }

    /// What the node is, when it is not the FUSE device; nil when it is.
    static func misfit(mode: mode_t, rdev: UInt64) -> String? {
        let (maj, min) = ((rdev >> 8) & 0xfff | (rdev >> 32) & ~0xfff, rdev & 0xff | (rdev >> 12) & ~0xff)
        switch mode & S_IFMT {
        case S_IFCHR: return maj == major && min == minor ? nil : "character device \(maj),\(min)"
        case S_IFREG: return "a regular file"
        case S_IFDIR: return "a directory"
        case S_IFBLK: return "block device \(maj),\(min)"
        case S_IFIFO: return "a FIFO"
        case S_IFSOCK: return "a socket"
        default: return "not a device"
        }
    }
}
