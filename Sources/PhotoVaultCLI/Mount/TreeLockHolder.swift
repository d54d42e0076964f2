import Foundation
import PhotoVaultStore

/// Which mount holds a user tree's lock, asked after an offline writer got 'store busy' or a
/// second mount of the tree met the first one's mount lock.
/// A mount daemon holds a shared flock on the tree root while mounted (MountDaemon.serve);
/// an offline writer holds an exclusive one, an offline reader a shared one.
enum TreeLockHolder {
    struct Mount {
        let pid: pid_t
        /// nil when not known (a foreground mount of another session).
        let mountpoint: String?
    }

    /// The mount of `store`'s tree `treeTag` holding the lock on `treeRoot`, if a mount holds it.
    static func mount(treeRoot: String, store: String, treeTag: String) -> Mount? {
        let canonicalStore = RuntimeRegistry.canonical(store)
        let registered = RuntimeRegistry().entries()
        // A mount this user's registry shows (it may have come up after the command looked).
        if let e = registered.first(where: { $0.store == canonicalStore && $0.treeTag == treeTag }) {
            return Mount(pid: e.pid, mountpoint: e.mountpoint)
        }
        // Otherwise the kernel's lock table: a mount another session registered elsewhere.
        var st = stat()
        guard stat(treeRoot, &st) == 0 else { return nil }
        for pid in sharedFlockHolders(inode: UInt64(st.st_ino)) {
            if let e = registered.first(where: { $0.pid == pid }) { return Mount(pid: pid, mountpoint: e.mountpoint) }
            // Known by its command line, not its executable: a daemon started before an
            // upgrade runs a binary that is gone.
            let argv = commandLine(pid)
            guard let name = argv.first, StorePath.basename(name) == "photovault" else { continue }
            if argv.count > 1, argv[1] == DaemonLauncher.daemonCommand,
               let settings = MountSettings(arguments: Array(argv.dropFirst(2))),
               RuntimeRegistry.canonical(settings.store) == canonicalStore {
                return Mount(pid: pid, mountpoint: settings.mountpoint)
            }
            if argv.dropFirst().contains("mount") { return Mount(pid: pid, mountpoint: nil) }   // foreground
        }
        return nil
    }

    /// The answer for a mount holding the tree whose mountpoint no longer shows it: its daemon
    /// is going away after a lock, waiting for files still open on its detached mount. "The
    /// vault is mounted at MP: unmount it" was contradicted by 'unmount' ("no vault is
    /// mounted"). nil while the mount is there (or its mountpoint is not known).
    static func closing(_ holder: Mount) -> CLIError? {
        guard let mp = holder.mountpoint, MountInfoEntry.at(mp)?.fsType != MountInfoEntry.photoVaultType else { return nil }
        return .vaultClosing(mountpoint: mp, pid: holder.pid)
    }

    /// Why a mount was refused by the mount lock of another daemon of the same tree.
    static func alreadyMounted(treeRoot: String, store: String, treeTag: String) -> CLIError {
        let holder = mount(treeRoot: treeRoot, store: store, treeTag: treeTag)
        return holder.flatMap(closing) ?? .vaultAlreadyMounted(mountpoint: holder?.mountpoint, pid: holder?.pid)
    }

    /// Pids holding a shared flock on an inode, from /proc/locks
    /// (`1: FLOCK  ADVISORY  READ 4242 fe:00:1234 0 EOF`; waiters are marked `->`). Only the
    /// inode is compared: the device /proc/locks prints is the superblock's, which is not
    /// st_dev on every filesystem (btrfs subvolumes); the caller checks who the pid is.
    static func sharedFlockHolders(inode: UInt64) -> [pid_t] {
        guard let bytes = try? FileIO.readFile("/proc/locks", limit: 1 << 22) else { return [] }
        var out: [pid_t] = []
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count >= 6, f[1] == "FLOCK", f[3] == "READ", let pid = pid_t(f[4]), pid > 0,
                  let ino = f[5].split(separator: ":").last, UInt64(ino) == inode else { continue }
            out.append(pid)
        }
        return out
    }

    static func commandLine(_ pid: pid_t) -> [String] {
        guard let bytes = try? FileIO.readFile("/proc/\(pid)/cmdline", limit: 1 << 16) else { return [] }
        return bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    }
}
