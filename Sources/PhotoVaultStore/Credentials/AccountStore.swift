import Glibc
import PhotoVaultCrypto
import Synchronization

/// The store's credential records: create, unlock, change and remove accounts
/// (CREDENTIALS.md). Value type; every call re-reads what it needs from disk, so several
/// instances (threads or processes) can work on one store, with mutations serialised by
/// `AccountsLock`.
public struct AccountStore {
    public let layout: StoreLayout
    public let config: StoreConfig
    /// How long a mutation waits for another one to finish before `.storeBusy`.
    public var lockTimeout: Double = 10
    public var throttle = LoginThrottle()

    /// How many password KEKs (Argon2id of a password) this process has derived: tests count
    /// them to prove a command derives no more than it needs (a stopwatch proves nothing).
    static let passwordKDFRuns = Atomic<Int>(0)

    /// Loads and validates the store config (`.storeNotInitialised`, `.corruptStore`, ...).
    public init(layout: StoreLayout) throws {
        self.layout = layout
        config = try layout.loadConfig()
        var st = stat()
        guard stat(layout.accountsDir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw StoreError.corruptStore("missing directory \(layout.accountsDir)")
        }
    }

    // MARK: queries

    /// Number of accounts (record files); needs no password.
    public func count() throws -> Int {
        guard let dir = opendir(layout.accountsDir) else { throw StoreError.posix("opendir \(layout.accountsDir)") }
        defer { closedir(dir) }
        var n = 0
        while let e = readdir(dir) {
            let name = withUnsafePointer(to: e.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if AccountName.isRecordFileName(name) { n += 1 }
        }
        return n
    }

    /// Whether an account of that name exists; needs no password (one Argon2id of the name).
    /// Only a record that is not there (ENOENT) is "no"; a record that cannot be looked up
    /// (EACCES on `accounts/`, EIO) is that error: it used to be "no such account" (exit 4),
    /// which `user check` tells a script to go and add.
    public func exists(user: String) throws -> Bool {
        let name = try AccountName.derive(user: user, config: config)
        if access(recordPath(name), F_OK) == 0 { return true }
        guard errno == ENOENT else { throw StoreError.posix("look up the account record in \(layout.accountsDir)") }
        return false
    }

    // MARK: add

    /// Creates an account and its (empty) tree; returns the recovery key, to show once.
    /// `deviceBound`: the account opens only with this machine's device secret.
    public func add(user: String, password: SecureBytes, deviceBound: Bool,
                    parameters: Argon2Parameters = .standard) throws -> RecoveryKey {
        // Cheap checks first, so a bad argument does not cost an Argon2id.
        try AccountName.checkNew(user)
        try PasswordPolicy.check(password)
        try AccountRecord.checkCost(parameters, floor: config.kdfFloor)
        let name = try AccountName.derive(user: user, config: config)
        // Cheap early answer; re-checked under the lock.
        if access(recordPath(name), F_OK) == 0 { throw StoreError.accountExists }

        let device = deviceBound ? try DeviceSecret.loadOrCreate(at: DeviceSecret.path()) : nil
        defer { device?.wipe() }
        var record = AccountRecord(kdf: parameters, salt: SecureRandom.bytes(AccountRecord.saltSize),
                                   deviceBound: deviceBound, deviceID: device.map { DeviceSecret.id(of: $0) })
        let recovery = RecoveryKey()
        // The expensive part (Argon2id) runs before taking the lock.
        let kekPassword = try passwordKEK(password, record: record, device: device)
        defer { kekPassword.wipe() }
        let kekRecovery = recoveryKEK(recovery, device: device)
        defer { kekRecovery.wipe() }
        let masterKey = SecureBytes(randomCount: AccountPayload.masterKeySize)
        defer { masterKey.wipe() }

        try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
            if access(recordPath(name), F_OK) == 0 { throw StoreError.accountExists }
            var treeID = SecureRandom.bytes(AccountPayload.treeIDSize)
            while access(layout.userTree(treeID), F_OK) == 0 { treeID = SecureRandom.bytes(AccountPayload.treeIDSize) }
            let payload = AccountPayload.make(masterKey: masterKey, treeID: treeID)
            defer { payload.wipe() }
            record.passwordSlot = SecretBox.wrap(payload, under: kekPassword,
                                                 ad: record.passwordSlotAD(storeID: config.storeID, fileName: name.recordFileName))
            record.recoverySlot = SecretBox.wrap(payload, under: kekRecovery,
                                                 ad: record.recoverySlotAD(storeID: config.storeID, fileName: name.recordFileName))
            // Tree first, record last: a crash in between leaves an empty tree that nothing
            // points to, never a record whose tree is missing. A failure (a full store: ENOSPC
            // on the tree's `.pvdir`; EIO from an fsync) removes the tree made so far, which
            // nothing will ever name: each failed add used to leave one behind.
            let treePath = layout.userTree(treeID)
            let keyring = try UserKeyring(masterKey: masterKey)
            defer { keyring.wipeAll() }
            do {
                try UserTree.initialiseRoot(at: treePath, keyring: keyring)
                try withAccountsDir { dfd in
                    try AtomicFile.place(record.encoded(), in: dfd, name: name.recordFileName, replacing: false)
                    do { try AtomicFile.syncDirectory(dfd, name.recordFileName) } catch {
                        // The record is linked but not known to be on disk, and the recovery key
                        // will not be shown: take it back, so the failed add leaves no account.
                        // (The tree used to be removed under the record, which then named a
                        // missing tree and blocked a new add with 'already exists'.)
                        unlinkat(dfd, name.recordFileName, 0)
                        throw error
                    }
                    LoginThrottle.keepReserve(in: dfd)
                }
            } catch {
                try? TreeRemoval.removeRecursively(treePath)
                if case StoreError.exists = error { throw StoreError.accountExists }
                throw error
            }
        }
        return recovery
    }

    // MARK: open

    /// Unlocks an account with its password. Waits first if earlier attempts failed
    /// (`throttle`). The caller wipes the returned master key.
    public func open(user: String, password: SecureBytes) throws -> OpenedAccount {
        let (_, _, payload) = try unlock(user: user, password: password)
        defer { payload.wipe() }
        let (mk, treeID) = try AccountPayload.split(payload)
        // The record opens but its photos are gone (deleted or never copied with the store):
        // say so, instead of a later "open users/...: No such file or directory".
        var st = stat()
        let found = stat(layout.userTree(treeID), &st) == 0
        guard found, (st.st_mode & S_IFMT) == S_IFDIR else {
            // A file (or a FIFO, a device, a dangling symlink) in its place is not "missing".
            let what = found || errno != ENOENT || lstat(layout.userTree(treeID), &st) == 0 ? "is not a directory" : "is missing"
            mk.wipe()
            throw StoreError.corruptStore("this account's encrypted tree (users/\(Base64Hex.hex(treeID))) \(what)")
        }
        return OpenedAccount(treeID: treeID, masterKey: mk, treePath: layout.userTree(treeID))
    }

    // MARK: password change

    /// Rewraps the master key under a new password (new salt). The master key, tree ID,
    /// every derived key and the recovery key stay the same. `parameters` defaults to the
    /// record's current cost (raised to `.standard` if it no longer meets the floor).
    public func changePassword(user: String, old: SecureBytes, new: SecureBytes,
                               parameters: Argon2Parameters? = nil) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        guard PasswordPolicy.codePoints(old) > 0 else { throw StoreError.emptyPassword }
        try PasswordPolicy.check(new)
        let name = try AccountName.derive(user: user, config: config)
        // The throttle's wait (up to 30 s) comes before the store-wide lock, not under it;
        // the account's attempt lock, before both.
        try AttemptLock.withLock(accountsDir: layout.accountsDir, name: name) {
            throttle.waitBeforeAttempt(accountsDir: layout.accountsDir, name: name)
            try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
                let record = try loadRecord(name)
                let payload = try unlockPasswordSlot(record, name: name, password: old, throttleWaited: true)
                defer { payload.wipe() }
                try rewrapPasswordSlot(record, name: name, payload: payload, password: new, parameters: parameters)
            }
        }
    }

    /// The first half of a password change whose new password is still to be typed: checks
    /// the current password (throttled, as `changePassword`) and keeps what it unwraps, so
    /// that `finishPasswordChange` needs no second Argon2id of it. Takes no lock: typing may
    /// take minutes. The caller wipes the result (also on every error path).
    public func beginPasswordChange(user: String, current: SecureBytes) throws -> PendingPasswordChange {
        let (name, record, payload) = try unlock(user: user, password: current)
        return PendingPasswordChange(name: name, record: record, payload: payload)
    }

    /// The second half: under the store's lock, re-reads the record and rewraps the kept key
    /// under `new`. A record that is no longer the one the current password opened (another
    /// passwd or reset-password, or a remove and a new add, happened meanwhile) is not
    /// overwritten: `.accountChangedMeanwhile`, and nothing changes. Overwriting would undo
    /// that change (a reset by the owner, say) or, after a remove and add, point the new
    /// account at the old one's key; re-checking instead would need the old password kept
    /// and a second Argon2id, the very cost this split saves, and could still not tell the
    /// user that someone else changed their account. A removed account is `.noSuchAccount`.
    public func finishPasswordChange(_ change: PendingPasswordChange, new: SecureBytes,
                                     parameters: Argon2Parameters? = nil) throws {
        try PasswordPolicy.check(new)
        try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
            let record = try loadRecord(change.name)
            guard record == change.record else { throw StoreError.accountChangedMeanwhile }
            try rewrapPasswordSlot(record, name: change.name, payload: change.payload, password: new, parameters: parameters)
        }
    }

    /// Lost password: unwraps with the recovery key and sets a new password. The recovery key
    /// keeps working afterwards. A device-bound account can only be reset on its device.
    /// A mistyped or foreign recovery key → `.invalidArgument` (with a message saying which).
    public func resetPassword(user: String, recoveryKey: String, new: SecureBytes,
                              parameters: Argon2Parameters? = nil) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        try PasswordPolicy.check(new)
        let key = try RecoveryKey.parse(recoveryKey)
        defer { key.wipe() }
        try resetPassword(user: user, recoveryKey: key, new: new, parameters: parameters)
    }

    /// Same, with the recovery key as read into secure memory (`PasswordInput.recoveryKey`).
    public func resetPassword(user: String, recoveryKey: SecureBytes, new: SecureBytes,
                              parameters: Argon2Parameters? = nil) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        try PasswordPolicy.check(new)
        let key = try RecoveryKey.parse(recoveryKey)
        defer { key.wipe() }
        try resetPassword(user: user, recoveryKey: key, new: new, parameters: parameters)
    }

    /// Same, with an already parsed key (not wiped here).
    public func resetPassword(user: String, recoveryKey key: RecoveryKey, new: SecureBytes,
                              parameters: Argon2Parameters? = nil) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        try PasswordPolicy.check(new)
        let name = try AccountName.derive(user: user, config: config)
        try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
            let record = try loadRecord(name)
            let payload = try unlockRecoverySlot(record, name: name, key: key)
            defer { payload.wipe() }
            throttle.recordSuccess(accountsDir: layout.accountsDir, name: name)
            try rewrapPasswordSlot(record, name: name, payload: payload, password: new, parameters: parameters)
        }
    }

    /// Whether `key` opens the account (`.invalidArgument` "that recovery key does not open
    /// this account", `.wrongDevice`, `.noSuchAccount`), changing nothing: the CLI says so
    /// before the new password is typed twice. Cheap: the recovery slot needs no Argon2id
    /// (only the record's name does).
    public func checkRecoveryKey(user: String, recoveryKey key: RecoveryKey) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        let name = try AccountName.derive(user: user, config: config)
        try unlockRecoverySlot(loadRecord(name), name: name, key: key).wipe()
    }

    // MARK: remove

    /// Removes the account (its record; with `deletePhotos` also its whole tree). Refused with
    /// `.storeBusy` while the tree is mounted, either way. Requires the password. The record goes first, so the account disappears atomically; a crash
    /// before the tree is gone leaves ciphertext nothing can open any more.
    /// `busyTree` names a mount that holds the tree (given its root and tree ID); nil when it
    /// knows none (then a busy lock is `.storeBusy`).
    public func remove(user: String, password: SecureBytes, deletePhotos: Bool,
                       busyTree: (_ root: String, _ treeID: [UInt8]) -> Error? = { _, _ in nil }) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        guard PasswordPolicy.codePoints(password) > 0 else { throw StoreError.emptyPassword }
        let name = try AccountName.derive(user: user, config: config)
        try AttemptLock.withLock(accountsDir: layout.accountsDir, name: name) {
            throttle.waitBeforeAttempt(accountsDir: layout.accountsDir, name: name)   // before the lock, as above
            try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
                let record = try loadRecord(name)
                let payload = try unlockPasswordSlot(record, name: name, password: password, throttleWaited: true)
                defer { payload.wipe() }
                let (mk, treeID) = try AccountPayload.split(payload)
                mk.wipe()
                // A tree that is gone already (lost, never copied with the store) has nothing to
                // delete or lock: the account is removed all the same.
                var st = stat()
                let treeExists = lstat(layout.userTree(treeID), &st) == 0 || errno != ENOENT
                // A mounted tree is not deleted under its daemon, nor is its account removed: the
                // mount would go on taking photos into a tree nobody could open once it is
                // unmounted (without --delete-photos that used to succeed). Its mount lock is taken
                // first (.storeBusy, and nothing removed, while it is mounted) and held to the end.
                let root = layout.userTree(treeID)
                // A busy lock held by a mount that is known now (its registry entry, or its daemon's
                // flock on the root) is said at once: waiting out the lock timeout first kept every
                // other account's change (add, passwd, remove) waiting on the store's lock as long.
                func locking<L>(_ take: (_ timeout: Double) throws -> L) throws -> L {
                    do { return try take(0) } catch StoreError.storeBusy {
                        if let mounted = busyTree(root, treeID) { throw mounted }
                        do { return try take(lockTimeout) } catch StoreError.storeBusy { throw busyTree(root, treeID) ?? StoreError.storeBusy }
                    }
                }
                var mountLock: TreeLock? = nil
                if treeExists {
                    // Without --delete-photos the tree stays as it was: a `.pvmount` made now would
                    // date the removal on the tree and so tell which tree lost its account.
                    // A .pvmount that cannot be opened (misshapen) is one no daemon can mount either.
                    do { mountLock = try locking { try TreeLock.mount(root: root, timeout: $0, create: deletePhotos) } }
                    catch StoreError.io where !deletePhotos {} catch StoreError.corruptStore where !deletePhotos {}
                }
                defer { mountLock?.release() }
                // Nor under an offline command (import, export, fsck, class) that works in it: they
                // hold the tree root's flock for their whole run, so its exclusive lock waits for
                // them, then keeps new ones out until the tree is gone. Without --delete-photos a
                // shared lock waits for the writers alone (import, class set, fsck --repair): an
                // import used to finish into a tree whose account was removed under it, reporting
                // success for photos nothing can open any more. (A root its owner cannot open, as
                // after a chmod 000 through the mount, does not keep an account from going.)
                var treeLock: TreeLock? = nil
                if treeExists {
                    do { treeLock = try locking { try TreeLock(root: root, mode: deletePhotos ? .exclusive : .shared, timeout: $0) } }
                    catch StoreError.io where !deletePhotos {}
                }
                defer { treeLock?.release() }
                try withAccountsDir { dfd in
                    guard unlinkat(dfd, name.recordFileName, 0) == 0 else { throw StoreError.posix("unlink \(name.recordFileName)") }
                    unlinkat(dfd, name.throttleFileName, 0)
                    // The account is gone now; a failed fsync does not bring it back, but a crash
                    // might, so its photos are then kept (a record naming a deleted tree opens to
                    // nothing).
                    try syncOrReport(dfd, name.recordFileName, done: "the account is removed",
                                     afterCrash: deletePhotos ? "it may be back (its photos were kept for that reason)" : "it may be back")
                }
                if deletePhotos {
                    // The account is gone whatever happens here: a failure must say so, not look
                    // like a removal that did not happen ('no such account' on the retry).
                    do { try TreeRemoval.removeRecursively(layout.userTree(treeID)) } catch let StoreError.io(e, context) {
                        throw StoreError.io(errno: e, context: "the account is removed, but deleting its photos stopped at \(context)")
                    }
                }
            }
        }
    }

    // MARK: internals

    func recordPath(_ name: AccountName) -> String { StorePath.join(layout.accountsDir, name.recordFileName) }

    private func withAccountsDir<R>(_ body: (Int32) throws -> R) throws -> R {
        let dfd = Glibc.open(layout.accountsDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw StoreError.posix("open \(layout.accountsDir)") }
        defer { close(dfd) }
        return try body(dfd)
    }

    func loadRecord(_ name: AccountName) throws -> AccountRecord {
        // A FIFO in its place is never waited on, a symlink never followed out of the store.
        // O_NOATIME: a record's access time would say when its account was last opened, and
        // next to the `.pvmount` and root times of a tree mounted then, which tree is whose
        // (FORMAT.md section 10). Without ownership of the file (EPERM) it is read without.
        func open(_ flags: Int32) throws -> Int32 {
            try FileIO.openRegular(AT_FDCWD, recordPath(name), flags, what: "account record",
                                   misshapen: { _ in .corruptRecord("not a regular file") })
        }
        let fd: Int32
        do {
            do { fd = try open(O_RDONLY | FileIO.noAtime) }
            catch StoreError.io(let e, _) where e == EPERM { fd = try open(O_RDONLY) }
        } catch StoreError.io(let e, _) where e == ENOENT {
            throw StoreError.noSuchAccount
        }
        defer { close(fd) }
        let bytes: [UInt8]
        do { bytes = try FileIO.readAll(fd, limit: AccountRecord.maximumFileSize) }
        catch StoreError.corruptStore { throw StoreError.corruptRecord("larger than \(AccountRecord.maximumFileSize) bytes") }
        return try AccountRecord.decode(bytes)
    }

    /// The device secret a record needs, or nil if it is not device-bound. Never creates the
    /// secret: a bound record with no secret on this machine, or with another one, was
    /// bound on another device → `.wrongDevice` (told apart by the stored device ID).
    func deviceSecret(for record: AccountRecord) throws -> SecureBytes? {
        guard record.deviceBound else { return nil }
        guard let secret = try DeviceSecret.load(at: DeviceSecret.path()) else { throw StoreError.wrongDevice }
        guard let want = record.deviceID, constantTimeEqual(DeviceSecret.id(of: secret), want) else {
            secret.wipe()
            throw StoreError.wrongDevice
        }
        return secret
    }

    /// `open` without the tree: the record's name, the record, and its unwrapped payload
    /// (which the caller wipes).
    private func unlock(user: String, password: SecureBytes) throws -> (AccountName, AccountRecord, SecureBytes) {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        guard PasswordPolicy.codePoints(password) > 0 else { throw StoreError.emptyPassword }
        let name = try AccountName.derive(user: user, config: config)
        let record = try loadRecord(name)
        return (name, record, try unlockPasswordSlot(record, name: name, password: password))
    }

    /// Floor check, device check, throttle wait, Argon2id, count, unwrap. Returns the payload.
    /// `throttleWaited`: the caller waited already, before taking the accounts lock. Waiting
    /// under the lock made one account's wrong guesses (up to 30 s each) turn every other
    /// account's add, passwd, reset and remove into 'store busy' for as long as they went on.
    private func unlockPasswordSlot(_ record: AccountRecord, name: AccountName, password: SecureBytes,
                                    throttleWaited: Bool = false) throws -> SecureBytes {
        // A caller that waited holds the account's attempt lock already (a second one, on
        // another description, would wait for the first).
        guard throttleWaited else {
            return try AttemptLock.withLock(accountsDir: layout.accountsDir, name: name) {
                try judgePasswordSlot(record, name: name, password: password, throttleWaited: false)
            }
        }
        return try judgePasswordSlot(record, name: name, password: password, throttleWaited: true)
    }

    /// `unlockPasswordSlot`'s work, under the account's attempt lock.
    private func judgePasswordSlot(_ record: AccountRecord, name: AccountName, password: SecureBytes,
                                   throttleWaited: Bool) throws -> SecureBytes {
        try AccountRecord.checkCost(record.kdf, floor: config.kdfFloor)
        let device = try deviceSecret(for: record)
        defer { device?.wipe() }
        if !throttleWaited { throttle.waitBeforeAttempt(accountsDir: layout.accountsDir, name: name) }
        let kek = try passwordKEK(password, record: record, device: device)
        defer { kek.wipe() }
        // Counted as a failure before it is judged, and not judged if that cannot be written:
        // a wrong password is then counted however the disk is (full, failing).
        try throttle.countAttempt(accountsDir: layout.accountsDir, name: name)
        do {
            let payload = try SecretBox.unwrap(record.passwordSlot, under: kek,
                                               ad: record.passwordSlotAD(storeID: config.storeID, fileName: name.recordFileName))
            throttle.recordSuccess(accountsDir: layout.accountsDir, name: name)
            return payload
        } catch {
            // Wrong password, or a record edited/renamed/copied: the AEAD cannot tell which.
            // Already counted.
            throw StoreError.wrongPassword
        }
    }

    /// Device check, recovery KEK, unwrap. Returns the payload (which the caller wipes).
    private func unlockRecoverySlot(_ record: AccountRecord, name: AccountName, key: RecoveryKey) throws -> SecureBytes {
        let device = try deviceSecret(for: record)
        defer { device?.wipe() }
        let kek = recoveryKEK(key, device: device)
        defer { kek.wipe() }
        do {
            return try SecretBox.unwrap(record.recoverySlot, under: kek,
                                        ad: record.recoverySlotAD(storeID: config.storeID, fileName: name.recordFileName))
        } catch {
            throw StoreError.invalidArgument("that recovery key does not open this account")
        }
    }

    private func rewrapPasswordSlot(_ old: AccountRecord, name: AccountName, payload: SecureBytes,
                                    password: SecureBytes, parameters: Argon2Parameters?) throws {
        let cost: Argon2Parameters
        if let p = parameters {
            try AccountRecord.checkCost(p, floor: config.kdfFloor)
            cost = p
        } else if (try? AccountRecord.checkCost(old.kdf, floor: config.kdfFloor)) != nil {
            cost = old.kdf
        } else {
            cost = Argon2Parameters.standard.isAtLeast(config.kdfFloor) ? .standard : config.kdfFloor
        }
        var record = old
        record.kdf = cost
        record.salt = SecureRandom.bytes(AccountRecord.saltSize)
        let device = try deviceSecret(for: record)
        defer { device?.wipe() }
        let kek = try passwordKEK(password, record: record, device: device)
        defer { kek.wipe() }
        record.passwordSlot = SecretBox.wrap(payload, under: kek,
                                             ad: record.passwordSlotAD(storeID: config.storeID, fileName: name.recordFileName))
        try withAccountsDir { dfd in
            try AtomicFile.place(record.encoded(), in: dfd, name: name.recordFileName, mode: 0o600, replacing: true)
            // The new record is in place: the new password works from here on. A failed
            // directory fsync does not undo that (it used to be reported as a failed change).
            try syncOrReport(dfd, name.recordFileName, done: "the new password is in effect",
                             afterCrash: "the old password may be the one that works again")
        }
    }

    /// The directory fsync after a change that took effect: a failure is `.notConfirmedOnDisk`.
    private func syncOrReport(_ dfd: Int32, _ entry: String, done: String, afterCrash: String) throws {
        do { try AtomicFile.syncDirectory(dfd, entry) } catch {
            throw StoreError.notConfirmedOnDisk(done: done, afterCrash: afterCrash, errno: (error as? StoreError)?.errno ?? EIO)
        }
    }

    /// KEK_pw = Argon2id(password, salt, cost), then bound to the device secret if any.
    private func passwordKEK(_ password: SecureBytes, record: AccountRecord, device: SecureBytes?) throws -> SecureBytes {
        let kek: SecureBytes
        Self.passwordKDFRuns.add(1, ordering: .relaxed)
        do { kek = try PasswordKDF.derive(password: password, salt: record.salt, parameters: record.kdf) }
        catch { throw StoreError.io(errno: ENOMEM, context: "Argon2id (\(record.kdf.memLimit >> 20) MiB) failed: \(error)") }
        guard let d = device else { return kek }
        defer { kek.wipe() }
        return DeviceSecret.bind(kek, to: d)
    }

    private func recoveryKEK(_ key: RecoveryKey, device: SecureBytes?) -> SecureBytes {
        let kek = key.keyEncryptionKey()
        guard let d = device else { return kek }
        defer { kek.wipe() }
        return DeviceSecret.bind(kek, to: d)
    }
}
