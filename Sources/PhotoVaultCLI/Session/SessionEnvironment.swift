import Glibc

/// The user's session environment for a photovault started outside the session: mount(8)
/// gives its helpers no HOME, PATH or XDG_RUNTIME_DIR (an fstab line, with mount.fuse3's
/// `setuid=USER` running photovault as that user), and pam_exec gives only the PAM variables.
enum SessionEnvironment {
    /// Without XDG_RUNTIME_DIR the mount would register in /tmp/photovault-UID, where the
    /// user's session (whose XDG_RUNTIME_DIR is /run/user/UID) does not look: `photovault
    /// status`, `lock` and `unlock` would not find it. The user's own /run/user/UID is taken
    /// when it is there and theirs; the session bus in it too, for the screen-saver lock.
    static func adoptUserRuntimeDirectory() {
        guard getenv("XDG_RUNTIME_DIR") == nil else { return }
        let runtime = "/run/user/\(getuid())"
        guard RuntimeRegistry.isUsableRuntimeDirectory(runtime) else { return }
        setenv("XDG_RUNTIME_DIR", runtime, 1)
        var st = stat()
        if getenv("DBUS_SESSION_BUS_ADDRESS") == nil, stat(runtime + "/bus", &st) == 0 {
            setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=\(runtime)/bus", 1)
        }
    }
}
