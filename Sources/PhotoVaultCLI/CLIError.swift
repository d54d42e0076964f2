import Glibc
import PhotoVaultStore

/// Failures of the command layer itself (not of the store). Each has its own exit code in
/// `ExitCodes.table`.
public enum CLIError: Error, Equatable, CustomStringConvertible {
    /// A command whose implementation has not been written yet.
    case notImplemented(String)
    /// errno of access("/dev/fuse"): ENOENT when it is missing.
    case noFuseDevice(Int32)
    /// `/dev/fuse` exists but is not the FUSE device (a file bound over it, another node);
    /// what it is instead. Exit code of `noFuseDevice`.
    case notFuseDevice(String)
    case mountpointNotEmptyDirectory(String)
    /// A mountpoint that is missing, not a directory or unreadable (exit code of the above).
    case mountpointUnusable(String, why: String)
    /// A FUSE mount whose daemon is gone (every access fails with ENOTCONN); `fsType` from
    /// mountinfo tells a dead PhotoVault mount from another program's.
    case deadMount(String, fsType: String)
    case alreadyMounted(String)
    /// A mount of a vault that another daemon mounts already (another session's, or at
    /// another mountpoint); where, when known.
    case vaultAlreadyMounted(mountpoint: String?, pid: Int32?)
    /// A mount of a vault whose daemon is still going away after a lock (grace, or files still
    /// open on its detached mount); exit code of `alreadyMounted`.
    case vaultClosing(mountpoint: String, pid: Int32)
    case mountBusy(String)
    /// `mount --allow-other` by a caller other than root where `/etc/fuse.conf` (`conf`) has no
    /// `user_allow_other` line: fusermount3 would refuse it. A usage error, said before the
    /// password is asked.
    case allowOtherNotPermitted(conf: String)
    case notMounted(String)
    /// `unlock` of a mountpoint where no vault is mounted (a lock unmounts it unless it was
    /// mounted with `--on-lock stay`): it says to mount it. Exit code of `notMounted`.
    case notMountedToUnlock(String)
    /// `unmount` of a mountpoint that holds another file system (a tmpfs, another FUSE
    /// program's): left alone.
    case notPhotoVaultMount(String, fsType: String)
    /// `unmount`, `lock` or `unlock` of a PhotoVault mount another OS user made.
    case otherUsersMount(String, uid: uid_t)
    /// An offline writer met the lock of a mount of the same vault it could not go through;
    /// the mountpoint is nil when only the daemon's pid is known (a foreground mount seen
    /// from another session).
    case vaultMounted(user: String, mountpoint: String?, pid: Int32)
    /// `fsck --repair` of a vault that is mounted (found in the runtime registry or holding
    /// the tree's lock): it cannot go through the mount, so the mount must go first.
    case repairWhileMounted(user: String, mountpoint: String?, pid: Int32?)
    /// `import` or `class set` of a vault path whose vault is mounted but locked (`--on-lock
    /// stay`): they would go through the mount, which refuses them; nothing was changed.
    case vaultLockedAtMount(user: String, mountpoint: String)
    /// `user remove` (with or without `--delete-photos`) of an account whose vault is
    /// mounted: nothing removed.
    case removeWhileMounted(user: String, mountpoint: String?, pid: Int32, deletePhotos: Bool)
    case fsckFoundDamage(problems: Int)
    /// `fsck --repair` repaired every problem it found (moved or removed what was damaged):
    /// not a failure, but not a clean check either, so a script can tell.
    case fsckRepaired(problems: Int)
    /// `fsck --repair` left damaged entries in place (it could not move them): the repair is
    /// incomplete, whatever else it did.
    case fsckRepairIncomplete(problems: Int, leftInPlace: Int)
    /// No account of that name in the store at `store` (StoreError.noSuchAccount's exit code):
    /// "no such account in this store" named neither, so a typo in --user or a wrong --store
    /// read alike.
    case noSuchAccount(user: String, store: String)
    case passwordsDoNotMatch
    case noTerminal
    case passwordTooLong(maximum: Int)
    case cannotReadPassword(source: String, errno: Int32)
    case externalPasswordCommandFailed(status: Int32)
    /// A password source that did not answer in time, or said too much (`what` says which).
    case passwordSourceStalled(String)
    /// Any other failure, with a message for the user.
    case failed(String)

    public var exitCode: Int32 {
        switch self {
        case .noFuseDevice, .notFuseDevice: return ExitCodes.noFuseDevice
        case .mountpointNotEmptyDirectory, .mountpointUnusable: return ExitCodes.mountpointNotEmptyDirectory
        case .deadMount: return ExitCodes.deadMount
        case .alreadyMounted, .vaultAlreadyMounted, .vaultClosing: return ExitCodes.alreadyMounted
        case .mountBusy: return ExitCodes.mountBusy
        case .allowOtherNotPermitted: return ExitCodes.usage
        case .notMounted, .notMountedToUnlock, .notPhotoVaultMount: return ExitCodes.notMounted
        case .vaultMounted, .repairWhileMounted, .removeWhileMounted: return ExitCodes.storeBusy
        case .vaultLockedAtMount: return ExitCodes.vaultLocked
        case .fsckFoundDamage: return ExitCodes.fsckFoundDamage
        case .fsckRepaired: return ExitCodes.fsckRepaired
        case .noSuchAccount: return StoreError.noSuchAccount.exitCode
        case .fsckRepairIncomplete: return ExitCodes.fsckRepairIncomplete
        case .passwordsDoNotMatch, .noTerminal, .passwordTooLong, .cannotReadPassword, .externalPasswordCommandFailed,
             .passwordSourceStalled:
            return ExitCodes.passwordNotRead
        case .notImplemented, .failed, .otherUsersMount:
            return ExitCodes.generic
        }
    }

    public var description: String {
        switch self {
        case .notImplemented(let c): return "'\(c)' is not implemented yet"
        case .noFuseDevice(let e) where e == ENOENT:
            return "/dev/fuse is missing: FUSE is not available on this system (modprobe fuse?)"
        case .noFuseDevice(let e):
            return "cannot use /dev/fuse: \(String(cString: strerror(e))) (it is normally crw-rw-rw- root:root)"
        case .notFuseDevice(let what):
            return "/dev/fuse is \(what), not the FUSE device (character device 10,229, normally crw-rw-rw- root:root)"
        case .mountpointNotEmptyDirectory(let p): return "the mountpoint \(p) is not an empty directory"
        case .mountpointUnusable(let p, let why): return "the mountpoint \(p) \(why): an empty directory is needed"
        case .deadMount(let p, let type) where type == MountInfoEntry.photoVaultType:
            return "\(p) holds a dead PhotoVault mount (its daemon is gone): run 'photovault unmount \(p)' "
                + "(or 'fusermount3 -u \(p)'), then mount again"
        case .deadMount(let p, let type):
            return "\(p) holds a dead \(type) mount (its program is gone): run 'fusermount3 -u \(p)' first"
        case .alreadyMounted(let p): return "a vault is already mounted at \(p)"
        case .vaultAlreadyMounted(let mp?, _): return "this vault is already mounted at \(mp): unmount it there first"
        case .vaultAlreadyMounted(nil, let pid?):
            return "this vault is already mounted (photovault process \(pid), another session): unmount it there first"
        case .vaultAlreadyMounted(nil, nil): return "this vault is already mounted elsewhere: unmount it there first"
        case .vaultClosing(let mp, let pid):
            return "the vault at \(mp) is still closing after a lock (photovault process \(pid) waits for the files "
                + "open there to be closed): try again once 'photovault status' no longer lists it"
        case .mountBusy(let p): return "\(p) is busy: close the files open there and try again"
        case .allowOtherNotPermitted(let conf):
            return "--allow-other needs the line 'user_allow_other' in \(conf) for users other than root "
                + "(an administrator adds it); mount without --allow-other, or ask for that line"
        case .notMounted(let p): return "no vault is mounted at \(p)"
        case .notMountedToUnlock(let p):
            return "no vault is mounted at \(p) (a lock unmounts it): mount it with 'photovault mount \(p)'"
        case .otherUsersMount(let p, let uid):
            return "the vault at \(p) is mounted by another user (uid \(uid)): only they can unmount, lock or unlock it"
        case .notPhotoVaultMount(let p, let type):
            return "no vault is mounted at \(p): it holds a \(type) mount, which photovault leaves alone"
        case .vaultMounted(let u, let mp?, _): return "the vault of \(u) is mounted at \(mp): run this command on the mount or unmount first"
        case .vaultMounted(let u, nil, let pid):
            return "the vault of \(u) is mounted (photovault process \(pid)): run this command on the mount or unmount first"
        case .repairWhileMounted(let u, let mp?, _):
            return "the vault of \(u) is mounted at \(mp): unmount it before 'fsck --repair' (the mount must be its only writer)"
        case .repairWhileMounted(let u, nil, let pid):
            return "the vault of \(u) is mounted" + (pid.map { " (photovault process \($0))" } ?? "")
                + ": unmount it before 'fsck --repair' (the mount must be its only writer)"
        case .removeWhileMounted(let u, let mp, let pid, let deletePhotos):
            return "the vault of \(u) is mounted " + (mp.map { "at \($0)" } ?? "(photovault process \(pid))")
                + ": unmount it before 'user remove\(deletePhotos ? " --delete-photos" : "")' (nothing was removed)"
        case .vaultLockedAtMount(let u, let mp):
            return "the vault of \(u) is mounted at \(mp) and locked: run 'photovault unlock \(mp)' and then this command "
                + "again (it goes through the mount; nothing was changed)"
        case .fsckFoundDamage(let n): return "fsck found \(n) problem\(n == 1 ? "" : "s")"
        case .fsckRepaired(let n):
            return "fsck found \(n) problem\(n == 1 ? "" : "s") and repaired \(n == 1 ? "it" : "all of them"); a new check finds none"
        case .fsckRepairIncomplete(let n, let left):
            return "fsck found \(n) problem\(n == 1 ? "" : "s"); repair left \(left) damaged entr\(left == 1 ? "y" : "ies") in place"
        case .noSuchAccount(let u, let store):
            // Raw: PhotoVaultCLI.describe escapes the whole line once (DisplayText).
            return "no such account '\(u)' in the store at \(store)"
        case .passwordsDoNotMatch: return "passwords do not match"
        case .noTerminal:
            return "no terminal to ask the password on; use --passfile, --password-stdin or --extpass"
        case .passwordTooLong(let m): return "the password is longer than \(m) bytes"
        case .cannotReadPassword(let s, let e): return "cannot read the password from \(s): \(String(cString: strerror(e)))"
        case .externalPasswordCommandFailed(let st): return "the --extpass command failed (exit status \(st))"
        case .passwordSourceStalled(let what): return what
        case .failed(let m): return m
        }
    }
}
