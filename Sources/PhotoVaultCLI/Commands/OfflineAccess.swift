import Foundation
import PhotoVaultCrypto
import PhotoVaultStore

/// Opens a user's tree for the offline commands (import, export, fsck, class), and finds a
/// live mount of the same vault so that changes go through the running daemon instead.
enum OfflineAccess {
    static func openTree(_ args: ParsedArguments) throws -> UserTree { try open(args).tree }

    /// An opened account: its tree, and what is needed to find a mount of it.
    struct Vault {
        let tree: UserTree
        let user: String
        let store: String
        let treeTag: String
        /// A live mount of the same account by this OS user (from its runtime registry).
        let mountEntry: RuntimeRegistry.Entry?
        var mount: String? { mountEntry?.mountpoint }

        /// The mount writes must go through, if any, once it can take them. A daemon going away
        /// after a lock (waiting for files still open on its detached mount) is still
        /// registered, but its mountpoint is an ordinary directory again: an import "through the
        /// live mount" wrote its photos there in plaintext, outside the vault. Such a daemon is
        /// waited for a little, as `mount` waits for it (`vaultClosing` if it stays); once it is
        /// gone the command works offline (nil). A mount in its lock grace (files open for writing may finish, no new open succeeds,
        /// then it unmounts) is waited for the same way. A mount locked with `--on-lock stay`
        /// is refused (`MountRoute.requireUnlocked`).
        func writableMount() throws -> String? {
            guard let e = mountEntry else { return nil }
            let state = MountFlow.lockState(e.mountpoint)
            if MountInfoEntry.at(e.mountpoint)?.fsType == MountInfoEntry.photoVaultType,
               state != LockController.State.grace.rawValue, state != LockController.State.closing.rawValue {
                try MountRoute.requireUnlocked(e.mountpoint, user: user, state: state)
                return e.mountpoint
            }
            try MountFlow.waitForClosingDaemon(e)
            if RuntimeRegistry.isRunning(e.pid, startTime: e.startTime) {
                throw CLIError.vaultClosing(mountpoint: e.mountpoint, pid: e.pid)
            }
            return nil
        }

        /// Where this vault is mounted: by this session (`mount`), else by any daemon holding
        /// its tree (another session's, found by its lock as `writing` finds it); nil when not
        /// mounted or only a foreground daemon's pid is known.
        var anyMountpoint: String? {
            mount ?? TreeLockHolder.mount(treeRoot: tree.root, store: store, treeTag: treeTag)?.mountpoint
        }

        /// Runs an offline writer. Its exclusive tree lock ends in 'store busy' when anything
        /// else holds the tree; when that is a mount of this vault the command could not go
        /// through (another session's runtime directory, or one that came up meanwhile), the
        /// error says so and where, instead of blaming another command.
        func writing<T>(_ body: () throws -> T) throws -> T {
            do { return try body() } catch StoreError.storeBusy {
                guard let holder = TreeLockHolder.mount(treeRoot: tree.root, store: store, treeTag: treeTag) else {
                    throw StoreError.storeBusy
                }
                throw TreeLockHolder.closing(holder) ?? CLIError.vaultMounted(user: user, mountpoint: holder.mountpoint, pid: holder.pid)
            }
        }
    }

    /// Opens the account; also finds a live mount of the same account by this OS user, if
    /// any (only known once the password gave the tree ID).
    static func open(_ args: ParsedArguments) throws -> Vault {
        let layout = StoreLayout(root: args.storePath)
        let config = try layout.loadConfig()
        // What the drive under the store can do, before anything is read or written there:
        // the fallbacks (NoReplace, a drive without xattrs) go by it (docs/STORAGE.md).
        BackingCapabilities.of(path: args.storePath)
        let user = try args.userName()
        // 'no such account' before the password is asked for (or a passfile read, an
        // --extpass command run): it used to come only after the password was typed.
        let accounts = try AccountStore(layout: layout)
        try UserCommands.requireAccount(accounts, user)
        let password = try PasswordInput().password(args)
        defer { password.wipe() }
        let opened = try accounts.open(user: user, password: password)
        defer { opened.masterKey.wipe() }
        let tag = RuntimeRegistry.treeTag(opened.treeID)
        let mount = liveMounts(store: args.storePath).first { $0.treeTag == tag }
        return Vault(tree: UserTree(root: opened.treePath, keyring: try opened.keyring(), layout: config.layout),
                     user: user, store: args.storePath, treeTag: tag, mountEntry: mount)
    }

    /// The mountpoint of a live mount of this store by this OS user, if exactly one exists.
    /// (Which account it shows is only known after the password; the caller checks.)
    static func liveMounts(store: String) -> [RuntimeRegistry.Entry] {
        let s = RuntimeRegistry.canonical(store)
        return RuntimeRegistry().entries().filter { $0.store == s }
    }

    /// A path under a dead PhotoVault mount (its daemon gone: ENOTCONN) is `.deadMount`
    /// (exit 25). `class` took it for a vault path and looked it up in the default store:
    /// "no PhotoVault store at ~/.local/share/photovault/store (run 'photovault init')".
    static func refuseDeadMount(_ path: String) throws {
        var st = stat()
        guard stat(path, &st) != 0, errno == ENOTCONN else { return }
        var dir = path.hasPrefix("/") ? path : StorePath.join(FileManager.default.currentDirectoryPath, path)
        while true {
            if let m = MountInfoEntry.at(dir), m.fsType == MountInfoEntry.photoVaultType {
                throw CLIError.deadMount(m.mountpoint, fsType: m.fsType)
            }
            let parent = StorePath.dirname(dir)
            if parent == dir { return }
            dir = parent
        }
    }

    /// A path on a live mount (the argument is an existing absolute path under a mountpoint).
    static func isOnLiveMount(_ path: String) -> Bool { vaultPath(onLiveMount: path) != nil }

    /// The vault path (`/2024/a.jpg`) of a path on a live mount, symlinks resolved; nil for a
    /// path on no live mount. Any PhotoVault mount the kernel lists counts, not only those of
    /// this runtime registry (which it used): one made from another session (cron, sudo, another
    /// XDG_RUNTIME_DIR) was taken for a vault path ("not found: /tmp"), and the offline
    /// writers' advice for such a mount, "run this command on the mount", then looped.
    static func vaultPath(onLiveMount path: String) -> String? {
        let c = RuntimeRegistry.canonical(path)
        // Not from a registry: a daemon going away after a lock stays registered while its
        // mountpoint is an ordinary directory again.
        let mountpoints = MountInfoEntry.all().filter { $0.fsType == MountInfoEntry.photoVaultType }.map(\.mountpoint)
        // The innermost one, should a vault be mounted inside another.
        guard let mp = mountpoints.filter({ c == $0 || c.hasPrefix($0 + "/") }).max(by: { $0.count < $1.count }) else {
            return nil
        }
        let rel = String(c.dropFirst(mp.count))
        return rel.isEmpty ? "/" : rel
    }

    static func progressLine(_ s: TransferSummary, verb: String, seconds: Double) -> String {
        let mb = Double(s.bytes) / 1_048_576
        return "\(verb) " + [count(s.files, "file"), count(s.directories, "directory", "directories"),
                             count(s.symlinks, "symlink")].joined(separator: ", ")
            + String(format: ", %.1f MiB in %.1f s (%.1f MiB/s)", mb, seconds, seconds > 0 ? mb / seconds : 0)
            + unchangedNote(s.unchanged)
    }

    /// "1 file", "2 files" (it said "1 files").
    static func count(_ n: Int, _ one: String, _ many: String? = nil) -> String {
        "\(n) \(n == 1 ? one : many ?? one + "s")"
    }

    /// The summary's part for the entries a rerun found in place (`.unchanged`).
    static func unchangedNote(_ n: Int) -> String {
        n == 0 ? "" : "; \(n) already in place (same size and modification time), left as \(n == 1 ? "it was" : "they were")"
    }
}
