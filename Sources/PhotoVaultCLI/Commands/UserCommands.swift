import Foundation
import PhotoVaultCrypto
import PhotoVaultStore

/// `photovault user ...`: the credential store (our Keychain).
enum UserCommands {
    static func add(_ args: ParsedArguments) throws -> Int32 {
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        let user = try args.userName()
        try AccountName.checkNew(user)   // before the password is asked
        if try accounts.exists(user: user) { throw StoreError.accountExists }
        let password = try PasswordInput().password(args, confirm: true)
        defer { password.wipe() }
        let recovery = try accounts.add(user: user, password: password, deviceBound: args.flag("this-device-only"),
                                        parameters: KDFProfile.forNewAccounts)
        defer { recovery.wipe() }
        try showOrUndo(recovery, after: "Created the account '\(DisplayText.escape(user))'\(args.flag("this-device-only") ? " (bound to this device)" : "").\n"
                       + "Recovery key: write it down and keep it apart from this computer. It is shown only once;\n"
                       + "without it a forgotten password cannot be recovered by anyone.\n\n",
                       undone: "the account was not created",
                       ifUndoFails: "run 'photovault user remove \(user) --delete-photos', then add it again") {
            try accounts.remove(user: user, password: password, deletePhotos: true)
        }
        return 0
    }

    /// `show`, and if the key could not be shown: nobody saw it and it is shown only once, so
    /// the new account must not stay (it did, with a key nobody had; a closed pipe even
    /// killed the command without a word). `undo` takes it back; one line says what happened.
    static func showOrUndo(_ recovery: RecoveryKey, after intro: String = "", undone: String, ifUndoFails: String,
                           undo: () throws -> Void) throws {
        do { try show(recovery, after: intro) } catch CLIError.failed(let why) {
            do { try undo() } catch { throw CLIError.failed("\(why), and undoing it failed (\(error)): \(ifUndoFails)") }
            throw CLIError.failed("\(why), so \(undone): run the command again with its output on a terminal or in a file")
        }
    }

    /// Prints `intro`, then `    KEY\n\n` straight from secure memory: no copy of the key is
    /// made. A failed write is thrown (`.failed`): the user has not seen the key. SIGPIPE is
    /// ignored meanwhile, so a closed pipe is that error (EPIPE) rather than a silent death.
    static func show(_ recovery: RecoveryKey, after intro: String = "") throws {
        let previous = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previous) }
        do {
            guard fflush(stdout) == 0 else { throw StoreError.posix("fflush") }
            try Array(intro.utf8).withUnsafeBytes { if $0.count > 0 { try OfflineSys.writeStream(1, $0.baseAddress!, $0.count) } }
            try "    \n\n".utf8CString.withUnsafeBytes { text in
                try OfflineSys.writeStream(1, text.baseAddress!, 4)
                try recovery.withFormatted { try OfflineSys.writeStream(1, $0.baseAddress!, $0.count) }
                try OfflineSys.writeStream(1, text.baseAddress! + 4, 2)
            }
        } catch {
            let e = (error as? StoreError)?.errno ?? EIO
            throw CLIError.failed("the recovery key could not be shown (writing to standard output: \(String(cString: strerror(e))))")
        }
    }

    static func passwd(_ args: ParsedArguments) throws -> Int32 { try passwd(args, input: PasswordInput()) }

    /// `input`: where the secrets are read (tests give a pty as the terminal).
    static func passwd(_ args: ParsedArguments, input: PasswordInput) throws -> Int32 {
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        let user = try args.userName()
        try requireAccount(accounts, user)
        let old = try input.password(args, prompt: "Current password: ")
        defer { old.wipe() }
        if args.value("new-passfile") != nil {
            // Nobody types anything: the check and the change run in one go under the lock.
            let new = try input.newPassword(args)
            defer { new.wipe() }
            try accounts.changePassword(user: user, old: old, new: new)
        } else {
            // A wrong current password is said before the new one is typed twice for nothing
            // (as gocryptfs -passwd does). What it unwraps is kept in secure memory for the
            // change, so its Argon2id runs once; an account changed meanwhile is refused.
            let change = try accounts.beginPasswordChange(user: user, current: old)
            defer { change.wipe() }
            old.wipe()
            let new = try TerminalRestore.holding(change.secret) { try input.newPassword(args) }
            defer { new.wipe() }
            try accounts.finishPasswordChange(change, new: new)
        }
        print("Password changed for '\(DisplayText.escape(user))'. No photo was re-encrypted; the recovery key is unchanged.")
        return 0
    }

    static func resetPassword(_ args: ParsedArguments) throws -> Int32 { try resetPassword(args, input: PasswordInput()) }

    static func resetPassword(_ args: ParsedArguments, input: PasswordInput) throws -> Int32 {
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        let user = try args.userName()
        try requireAccount(accounts, user)
        let typed = try input.recoveryKey(args)
        defer { typed.wipe() }
        // A mistyped key (its checksum) or one that does not open this account is said now,
        // not after the new password has been typed twice for nothing (as passwd does).
        let key = try RecoveryKey.parse(typed)
        defer { key.wipe() }
        typed.wipe()
        try accounts.checkRecoveryKey(user: user, recoveryKey: key)
        let new = try TerminalRestore.holding(key.bytes) { try input.newPassword(args) }
        defer { new.wipe() }
        try accounts.resetPassword(user: user, recoveryKey: key, new: new)
        print("New password set for '\(DisplayText.escape(user))'.")
        return 0
    }

    static func remove(_ args: ParsedArguments) throws -> Int32 {
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        let user = try args.userName()
        try requireAccount(accounts, user)
        let password = try PasswordInput().password(args)
        defer { password.wipe() }
        let deletePhotos = args.flag("delete-photos")
        // A mount of the vault holds its tree: say so, not 'locked by another command; try again'.
        try accounts.remove(user: user, password: password, deletePhotos: deletePhotos) { root, treeID in
            TreeLockHolder.mount(treeRoot: root, store: args.storePath, treeTag: RuntimeRegistry.treeTag(treeID))
                .map { TreeLockHolder.closing($0)
                    ?? CLIError.removeWhileMounted(user: user, mountpoint: $0.mountpoint, pid: $0.pid, deletePhotos: deletePhotos) }
        }
        print(deletePhotos ? "Removed the account '\(DisplayText.escape(user))' and its photos."
                           : "Removed the account '\(DisplayText.escape(user))'. Its encrypted photos stay in the store, unreadable without the account.")
        return 0
    }

    /// 'no such account' before any password or recovery key is asked for: it was said only
    /// after the secrets had been typed (or, without a terminal, never: 'no terminal').
    /// `user check` tells the same without a password, so nothing is given away.
    static func requireAccount(_ accounts: AccountStore, _ user: String) throws {
        guard try accounts.exists(user: user) else { throw CLIError.noSuchAccount(user: user, store: accounts.layout.root) }
    }

    static func list(_ args: ParsedArguments) throws -> Int32 {
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        let n = try accounts.count()
        print("\(n) account\(n == 1 ? "" : "s") (names are not stored in clear, by design)")
        let conflicted = try accounts.conflictedAccounts()
        if conflicted > 0 {
            print(UserCommands.conflictLine(conflicted))
        }
        return 0
    }

    /// What `user list` (and `fsck`, for its account) says of records in conflict.
    static func conflictLine(_ n: Int) -> String {
        "\(n == 1 ? "1 account's record is" : "\(n) accounts' records are") in conflict: its password was changed on two devices "
            + "and the sync engine kept both versions. Either password opens the vault; 'photovault passwd' settles it "
            + "(CREDENTIALS.md, 'Records in conflict')"
    }

    static func check(_ args: ParsedArguments) throws -> Int32 {
        let user = try args.userName()
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        guard try AccountStore(layout: StoreLayout(root: args.storePath)).exists(user: user) else {
            throw CLIError.noSuchAccount(user: user, store: args.storePath)
        }
        return 0   // prints nothing, as its help says: the exit status is the answer
    }
}
