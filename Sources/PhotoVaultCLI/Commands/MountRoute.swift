import Foundation
import PhotoVaultCrypto
import PhotoVaultFS
import PhotoVaultStore
import CLinux

/// Writes of `import` and `class set` sent through a live mount of the same account instead
/// of the store (docs/OFFLINE.md): the daemon caches directory IDs and headers, so while it
/// runs it must stay the only writer of the tree (it holds a lock that keeps offline writers
/// out). Everything here works on plaintext paths under the mountpoint and keeps the offline
/// semantics; the mount encrypts whatever is written, temp files included.
enum MountRoute {
    static let classAttribute = VaultFileSystem.classAttribute
    /// Temp file of `import -`. Any plaintext name is encrypted by the mount, so this one is
    /// an ordinary (visible) entry, not a hidden `.pvtmp-` one; the random part keeps it from
    /// clashing with a real file or another import.
    static let tempPrefix = ".photovault-import-"

    /// Where a vault path is on the mount. VaultPath refuses `.` and `..`, so the result
    /// never leaves the mount.
    static func path(_ mp: String, _ vp: VaultPath) -> String { vp.isRoot ? mp : mp + vp.description }

    /// What is routed through a mount needs it unlocked. A mount locked with `--on-lock stay`
    /// refuses new `complete` files and class changes of `complete` ones: an import failed
    /// halfway with cp's "Permission denied" (exit 1), leaving the directories it had made,
    /// though the password given opens the vault. Refused before anything is made (exit 23).
    /// `state`: the daemon's (`MountFlow.lockState`).
    static func requireUnlocked(_ mp: String, user: String, state: String?) throws {
        guard state == LockController.State.locked.rawValue else { return }
        throw CLIError.vaultLockedAtMount(user: user, mountpoint: mp)
    }

    /// Creates the missing directories of `vp`, mode 0700 as the offline import does (the
    /// mount gives each its parent's default class, as offline). An existing component must
    /// be a directory: the kernel would follow a symlink of the vault, which may point out
    /// of it, and write plaintext there (the offline import refuses it the same way). Each
    /// directory made here has its parent fsync'ed after it (a failure is thrown), as offline.
    static func makeDirectories(_ mp: String, _ vp: VaultPath) throws {
        var current = VaultPath.root
        for name in vp.components {
            current = current.appending(name)
            let p = path(mp, current)
            if mkdir(p, 0o700) == 0 {
                // The new entry lasts once its parent is synced (a crash could undo it).
                try AtomicFile.syncParent(of: p)
                continue
            }
            guard errno == EEXIST else { throw StoreError.posix("mkdir \(current)") }
            var st = stat()
            guard lstat(p, &st) == 0, OfflineSys.isDirectory(st) else {
                throw StoreError.io(errno: ENOTDIR, context: current.description)
            }
        }
    }

    /// `class set` on a file or directory of the mount. Never follows a symlink (setxattr
    /// would, possibly out of the vault): like offline, anything else is refused.
    static func setClass(_ path: [CChar], _ cls: ProtectionClass, display: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            throw errno == ENOENT ? StoreError.notFound(display) : StoreError.posix("stat \(display)")
        }
        guard OfflineSys.isRegular(st) || OfflineSys.isDirectory(st) else {
            throw StoreError.invalidArgument("\(display) is neither a file nor a directory")
        }
        guard lsetxattr(path, classAttribute, cls.name, cls.name.utf8.count, 0) == 0 else {
            throw StoreError.posix("set the class of \(display)")
        }
    }

    /// The class of a file or directory on the mount; nil for a symlink or anything else,
    /// which has none (offline prints `-` for them too). The xattr is read without
    /// following a symlink, which would report its target's class.
    static func className(_ path: [CChar], display: String) throws -> String? {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            throw errno == ENOENT ? StoreError.notFound(display) : StoreError.posix("stat \(display)")
        }
        guard OfflineSys.isRegular(st) || OfflineSys.isDirectory(st) else { return nil }
        var buf = [UInt8](repeating: 0, count: 64)
        let n = lgetxattr(path, classAttribute, &buf, buf.count)
        guard n >= 0 else { throw StoreError.posix("read the class of \(display)") }
        return String(decoding: buf[0..<n], as: UTF8.self)
    }
}
