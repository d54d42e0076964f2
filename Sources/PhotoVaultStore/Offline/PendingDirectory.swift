import Glibc

/// Directories import and export make: 0700 while they are filled (so that they stay
/// writable), their source's mode and times set after their entries. A directory not
/// finished yet carries a marker xattr, set when it is made, so that a later run can tell
/// it from a directory the user already had, whose mode is never changed:
///
/// * after its entries, a marked (or just made) directory gets its mode and times and
///   loses the marker;
/// * when the run fails inside it, it still gets them if that mode leaves it `rwx` for its
///   owner (a second run must be able to enter and fill it); it keeps the marker;
/// * a later run that reaches a marked directory (import or export into the same DEST,
///   `--force` or not) finishes it as one it made.
///
/// The store's marker is a fixed tag outside the `user.pv.` names of sealed attributes
/// (the mount hides it, fsck ignores it, it names nothing); the local one is a plain
/// `user.` attribute. A filesystem without user xattrs gets no marker: there only the run
/// that made a directory can finish it.
public enum PendingDirectory {
    /// On a ciphertext directory of the store.
    public static let storeMarker = "user.pvincomplete"
    /// On a local directory export made.
    public static let localMarker = "user.photovault.incomplete"

    /// Whether a directory may get its final mode before it is complete.
    public static func keepsOwnerAccess(_ mode: mode_t) -> Bool { mode & 0o700 == 0o700 }

    static func mark(_ fd: Int32, _ marker: String) { try? OfflineXattr.set(fd, marker, [1]) }

    static func isMarked(_ fd: Int32, _ marker: String) -> Bool { OfflineXattr.exists(fd, marker) }

    /// The source's mode and times, after the directory's entries; the marker goes.
    static func finish(_ fd: Int32, _ marker: String, from st: stat) {
        _ = fchmod(fd, st.st_mode & 0o7777)
        OfflineSys.setTimes(fd, from: st)
        OfflineXattr.remove(fd, marker)
    }

    /// After a failure inside the directory: its mode and times where that is safe; the
    /// marker stays for the next run.
    static func finishAfterFailure(_ fd: Int32, from st: stat) {
        guard keepsOwnerAccess(st.st_mode) else { return }
        _ = fchmod(fd, st.st_mode & 0o7777)
        OfflineSys.setTimes(fd, from: st)
    }
}
