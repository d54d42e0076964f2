import Glibc
import CLinux

/// Giving a finished temp file or directory its name only if that name is free, on every
/// file system: renameat2(RENAME_NOREPLACE) where the file system has it (`BackingCapabilities`),
/// else a look-up of the name and a plain rename.
///
/// The look-up and the rename are two steps, so the fallback is only as exclusive as the
/// caller's writers are: inside a vault tree only one writer works at a time (the mount
/// daemon, whose kernel holds the directory's lock across a create or rename, or an offline
/// writer holding the tree's exclusive lock), and `createIfAbsent` takes a lock of its own.
/// Either way the new entry appears whole (a rename), never half-written, so crash safety
/// is the same as with the flag.
public enum NoReplace {
    /// Renames `from` in `fromDir` to `to` in `toDir` unless `to` exists. Returns 0, or -1 with
    /// errno set as renameat2 would: EEXIST when the name is taken.
    public static func rename(_ fromDir: Int32, _ from: UnsafePointer<CChar>, _ toDir: Int32,
                              _ to: UnsafePointer<CChar>) -> Int32 {
        if BackingCapabilities.of(toDir).renameNoReplace {
            return pv_renameat2(fromDir, from, toDir, to, UInt32(PV_RENAME_NOREPLACE))
        }
        var st = stat()
        if fstatat(toDir, to, &st, AT_SYMLINK_NOFOLLOW) == 0 { errno = EEXIST; return -1 }
        guard errno == ENOENT else { return -1 }
        return renameat(fromDir, from, toDir, to)
    }

    /// `rename` for a temp file `tmp` of directory `dirfd` whose name `name` nobody serialises
    /// (the store config, an account record, the device secret): link(2) where there are hard
    /// links (atomic, and the temp stays for the caller to remove); else the rename above,
    /// holding an exclusive flock on the directory itself for the look-up and the rename, so
    /// that two processes making the same name at once (two `init`s) cannot both succeed.
    /// Nothing else in PhotoVault flocks these directories (the tree locks are on tree roots
    /// and files). Returns 0, or -1 with errno (EEXIST when the name is taken).
    public static func createIfAbsent(tmp: String, name: String, in dirfd: Int32, lockTimeout: Double = 10) -> Int32 {
        let caps = BackingCapabilities.of(dirfd)
        if caps.hardLinks { return linkat(dirfd, tmp, dirfd, name, 0) }
        // `dirfd` may be O_PATH, on which flock fails with EBADF: a descriptor of our own.
        let lfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard lfd >= 0 else { return -1 }
        defer { close(lfd) }
        if caps.fileLocks {
            var waited = 0.0
            while flock(lfd, LOCK_EX | LOCK_NB) != 0 {
                let e = errno
                if e == EINTR { continue }
                guard e == EWOULDBLOCK, waited < lockTimeout else { errno = e == EWOULDBLOCK ? EBUSY : e; return -1 }
                usleep(20_000); waited += 0.02
            }
        }
        return rename(dirfd, tmp, dirfd, name)
    }
}
