import Glibc
import CLinux

/// Who may change a store's directories, judged as ssh's StrictModes judges `~/.ssh`
/// (FORMAT.md section 2). Another user who made the store path first (mode 0777, theirs)
/// could otherwise move `photovault.conf` away (the next mount offers a new store), swap
/// `accounts/` or watch the throttle counts, and `init`, `user add` and `mount` used the
/// store as it was.
///
/// * The store directory, `accounts/` and `users/` must be the caller's and writable by
///   nobody else (no group or other write bit).
/// * Every directory above the store, up to `/`, must be the caller's or root's, and
///   writable by nobody else, unless it has the sticky bit (as /tmp has): then others can
///   add entries there but not rename or remove the store.
///
/// The path is judged as it resolves (symlinks followed), as the store is used.
///
/// On a drive whose modes are set for the whole drive at mount time (FAT, exFAT and NTFS,
/// also through exfat-fuse or ntfs-3g, which mount with allow_other and default_permissions:
/// the modes shown are the ones the kernel enforces) the fix is a mount option, and the
/// message says so.
public enum StoreTrust {
    /// Throws `.untrustedStore` naming the first directory that fails, what is wrong with it
    /// and how to fix it. Directories that do not exist (yet) are not judged.
    public static func check(root: String, euid: uid_t = geteuid()) throws {
        guard let resolved = deepestExisting(root) else { return }
        let (existing, isRoot) = resolved
        if isRoot {
            try judge(existing, st: try lookUp(existing), euid: euid, isStore: true)
            for sub in ["accounts", "users"] {
                let p = StorePath.join(existing, sub)
                var st = stat()
                guard stat(p, &st) == 0 else { continue }
                try judge(p, st: st, euid: euid, isStore: true)
            }
        }
        var dir = isRoot ? StorePath.dirname(existing) : existing
        while true {
            try judge(dir, st: try lookUp(dir), euid: euid, isStore: false)
            if dir == "/" { break }
            dir = StorePath.dirname(dir)
        }
    }

    /// The resolved path of `root` (true) or, when it does not exist, of its deepest existing
    /// ancestor (false); nil when not even `/` resolves.
    static func deepestExisting(_ root: String) -> (String, Bool)? {
        var p = root.hasPrefix("/") ? root : currentDirectory() + "/" + root
        var isRoot = true
        while true {
            if let r = realpath(p, nil) {
                defer { free(r) }
                return (String(cString: r), isRoot)
            }
            if p == "/" || p.isEmpty { return nil }
            p = StorePath.dirname(p)
            isRoot = false
        }
    }

    private static func currentDirectory() -> String {
        guard let c = getcwd(nil, 0) else { return "/" }
        defer { free(c) }
        return String(cString: c)
    }

    private static func lookUp(_ path: String) throws -> stat {
        var st = stat()
        guard stat(path, &st) == 0 else { throw StoreError.posix("look up \(path)") }
        return st
    }

    private static func judge(_ path: String, st: stat, euid: uid_t, isStore: Bool) throws {
        let what = isStore ? "the store directory \(path)" : "\(path), a directory above the store,"
        let owners: [uid_t] = isStore ? [euid] : [euid, 0]
        if !owners.contains(st.st_uid) {
            let mine = isStore ? "yours" : "yours or root's"
            throw StoreError.untrustedStore(
                "\(what) belongs to uid \(st.st_uid), not to you (uid \(euid)): another user could change the store; "
                + "use a store path whose directories are \(mine) (or, as root, 'chown \(euid) \(path)')")
        }
        let sticky = st.st_mode & S_ISVTX != 0
        if st.st_mode & 0o022 != 0 && (isStore || !sticky) {
            let kind = fileSystemKind(path)
            let who = st.st_mode & 0o002 != 0 ? "every user" : "its group"
            let fix = kind == .modesFromMountOptions
                ? "mount that drive with umask=077 (its modes are set for the whole drive when it is mounted), "
                  + "or run 'chmod go-w \(path)' where the drive keeps modes"
                : "run 'chmod go-w \(path)'"
            throw StoreError.untrustedStore(
                "\(what) can be written by \(who) (mode \(String(st.st_mode & 0o7777, radix: 8))): another user could "
                + "change the store; \(fix)")
        }
    }

    enum FileSystemKind { case ordinary, modesFromMountOptions }

    /// What the modes of the file system holding `path` mean (statfs's f_type).
    static func fileSystemKind(_ path: String) -> FileSystemKind {
        let fd = open(path, pv_o_path() | O_CLOEXEC)
        guard fd >= 0 else { return .ordinary }
        defer { close(fd) }
        switch pv_fs_type(fd) {
        // MSDOS, EXFAT, NTFS, FUSE (exfat-fuse, ntfs-3g; for sshfs and the like a mount
        // option, umask= or the server's modes, is the fix too)
        case 0x4d44, 0x2011_BAB0, 0x5346_544e, 0x6573_5546: return .modesFromMountOptions
        default: return .ordinary
        }
    }
}
