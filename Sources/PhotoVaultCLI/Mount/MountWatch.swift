import Foundation
import Glibc

/// Notices when the daemon's own mount leaves its mount namespace: `photovault unmount`,
/// `fusermount3 -u`, `umount -l` by another tool, or the daemon's own unmount after a lock.
///
/// The kernel ends a FUSE connection only when the last copy of its mount is gone. Another
/// mount namespace (`unshare -Urm sleep 300`, run by any local user while the vault is
/// mounted, copies every mount), a bind mount or a file still open in a lazily unmounted
/// mount keeps it alive, and the daemon used to go on serving it, every key in memory,
/// after `unmount` had said it succeeded. The watch lets the daemon wipe its keys and end
/// the connection itself then (`MountDaemon.serve`).
///
/// The mount is known by its mount ID (mountinfo's first field), not by its place: another
/// mount at the same mountpoint, or a bind mount of this one elsewhere, is not this mount.
final class MountWatch: @unchecked Sendable {
    let mountID: String
    private let stateLock = NSLock()
    private var stopped = false

    /// The mount ID of the newest `fuse.photovault` mount at `mountpoint` (canonical), in
    /// this process's namespace; nil when there is none.
    init?(mountpoint: String) {
        guard let e = MountInfoEntry.all().last(where: { $0.mountpoint == mountpoint }),
              e.fsType == MountInfoEntry.photoVaultType, let id = e.mountID else { return nil }
        mountID = id
    }

    /// Whether the mount is still in this process's mount namespace. A table read as empty
    /// is a read that failed (every namespace has its root mount), not an unmount: taking it
    /// for one made the daemon wipe its keys and end a mount that was still in use.
    var isPresent: Bool {
        let all = MountInfoEntry.all()
        return all.isEmpty || all.contains { $0.mountID == mountID }
    }

    /// Calls `gone` once, on a thread of its own, when the mount has left the namespace.
    /// The kernel flags /proc/self/mountinfo (POLLPRI) at every change of the mount table;
    /// it is also read once a second, in case a change was missed.
    func start(gone: @escaping @Sendable () -> Void) {
        let t = Thread { [self] in
            let fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
            defer { if fd >= 0 { close(fd) } }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !isStopped {
                // Absent in two readings a moment apart: one reading made while the table
                // changed is not the last word on a mount that ends the daemon.
                if !isPresent && { usleep(100_000); return !isPresent }() {
                    if !isStopped { gone() }
                    return
                }
                guard fd >= 0 else { usleep(500_000); continue }
                // Consume what is there, so that the next POLLPRI is a new change.
                _ = lseek(fd, 0, SEEK_SET)
                while read(fd, &buffer, buffer.count) > 0 {}
                var p = pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)
                _ = poll(&p, 1, 1000)
            }
        }
        t.name = "photovault-mount-watch"
        t.start()
    }

    /// No more calls of `gone` (the daemon is ending anyway). Does not wait for the thread,
    /// which may be the caller.
    func stop() { stateLock.withLock { stopped = true } }

    private var isStopped: Bool { stateLock.withLock { stopped } }
}
