import Glibc

/// What Linux does to a regular file's setuid and setgid bits when a caller without
/// CAP_FSETID writes or truncates it (`setattr_should_drop_suidgid`): setuid goes, and setgid
/// too when the group may execute the file. (Setgid without group execute marks mandatory
/// locking; the kernel drops it only for a caller outside the file's group, which a FUSE
/// file system is not told, so it stays.) The mount never honours either bit (`nosuid`), but
/// it keeps them as written and drops them as a local file system would, so that copies
/// (`cp -a`, `rsync -a`, `tar`) and checks of them see what they expect.
public enum SetIDBits {
    /// The permission bits of `mode` after such a write.
    public static func afterUnprivilegedWrite(_ mode: mode_t) -> mode_t {
        var m = mode & 0o7777
        m &= ~S_ISUID
        if mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP { m &= ~S_ISGID }
        return m
    }

    /// Drops the bits from the file open as `fd`, whose attributes are `st`, if it has any to
    /// drop (no system call otherwise).
    public static func drop(on fd: Int32, _ st: stat) throws {
        guard st.st_mode & S_IFMT == S_IFREG else { return }
        let kept = afterUnprivilegedWrite(st.st_mode)
        guard kept != st.st_mode & 0o7777 else { return }
        guard fchmod(fd, kept) == 0 else { throw StoreError.posix("fchmod") }
        pthread_setspecific(droppedKey, UnsafeRawPointer(bitPattern: 1))
    }

    /// Whether `drop` changed a file's mode on this thread since the last call. A FUSE kernel
    /// refreshes its cached mode after a truncate (the reply carries the attributes) but not
    /// after a write or an O_TRUNC open, so the mount tells it then (`VaultFileSystem`).
    public static func takeDropped() -> Bool {
        guard pthread_getspecific(droppedKey) != nil else { return false }
        pthread_setspecific(droppedKey, nil)
        return true
    }

    private static let droppedKey: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "pthread_key_create")
        return key
    }()
}
