import Foundation
import Glibc
import PhotoVaultCrypto

/// An account's login slot, `accounts/<name>.login` (CREDENTIALS.md section 12): the account's
/// payload (master key || tree ID) wrapped under a key derived from the user's *login*
/// password, so that the PAM line (`photovault pam`) opens the vault with the password typed
/// at the login or lock screen. A file of its own beside the record, so the record's format
/// and every record change (passwd, reset) stay as they were.
struct LoginSlot: Equatable {
    static let formatName = "photovault-login-slot"
    static let currentVersion = 1
    static let label = "PhotoVault account login slot"

    var kdf: Argon2Parameters
    var salt: [UInt8]
    var slot: [UInt8]

    private struct Wire: Codable {
        var format: String
        var version: Int
        var kdf: Argon2Parameters
        var salt: String
        var slot: String
    }

    /// AD = label || 0x00 || u32le version || storeID (16) || u16le length || record file name
    /// || u64le opsLimit || u64le memLimit || salt (16) || BLAKE2b-256(the record's recovery slot)
    /// || u8 deviceBound || deviceID (16, zeros when not bound). The recovery slot is fixed for
    /// the account's life (passwd and reset keep it; a removed and re-added account has a new
    /// one), so a login file left from an earlier account of the same name never opens.
    static func ad(kdf: Argon2Parameters, salt: [UInt8], record: AccountRecord, storeID: [UInt8],
                   fileName: String) -> [UInt8] {
        var ad = Array(label.utf8) + [0]
        ad.appendLE(UInt32(currentVersion))
        ad.append(contentsOf: storeID)
        ad.appendLE(UInt16(fileName.utf8.count))
        ad.append(contentsOf: Array(fileName.utf8))
        ad.appendLE(kdf.opsLimit)
        ad.appendLE(kdf.memLimit)
        ad.append(contentsOf: salt)
        ad.append(contentsOf: KeyedHash.hash(record.recoverySlot))
        ad.append(record.deviceBound ? 1 : 0)
        ad.append(contentsOf: record.deviceID ?? [UInt8](repeating: 0, count: AccountRecord.deviceIDSize))
        return ad
    }

    func encoded() -> [UInt8] {
        let w = Wire(format: Self.formatName, version: Self.currentVersion, kdf: kdf,
                     salt: Base64URL.encode(salt), slot: Base64URL.encode(slot))
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys]
        return Array(try! enc.encode(w)) + [10]
    }

    /// nil for anything that is not a well-formed version-1 login slot: the PAM path treats a
    /// damaged or foreign file as no slot (it must never fail a login loudly).
    static func decode(_ bytes: [UInt8]) -> LoginSlot? {
        guard let w = try? JSONDecoder().decode(Wire.self, from: Data(bytes)), w.format == formatName,
              w.version == currentVersion, let salt = Base64URL.decode(w.salt), salt.count == AccountRecord.saltSize,
              let slot = Base64URL.decode(w.slot), slot.count == AccountRecord.slotSize else { return nil }
        return LoginSlot(kdf: w.kdf, salt: salt, slot: slot)
    }
}

extension AccountStore {
    /// Whether the account has a login slot (no password needed; one Argon2id of the name).
    public func hasLoginSlot(user: String) throws -> Bool {
        let name = try AccountName.derive(user: user, config: config)
        _ = try loadRecord(name)
        return access(StorePath.join(layout.accountsDir, name.loginFileName), F_OK) == 0
    }

    /// Adds (or replaces) the login slot: checks the vault `password` (counted and throttled
    /// as every open is), then wraps the account's payload under `loginPassword`. Written
    /// under the accounts lock, only if the record is still the one the password opened.
    public func addLoginSlot(user: String, password: SecureBytes, loginPassword: SecureBytes,
                             parameters: Argon2Parameters) throws {
        guard PasswordPolicy.codePoints(loginPassword) > 0 else { throw StoreError.emptyPassword }
        try AccountRecord.checkCost(parameters, floor: config.kdfFloor)
        let (name, record, payload, _) = try unlock(user: user, password: password)
        defer { payload.wipe() }
        let salt = SecureRandom.bytes(AccountRecord.saltSize)
        let device = try deviceSecret(for: record)
        defer { device?.wipe() }
        let kek = try loginKEK(loginPassword, kdf: parameters, salt: salt, device: device)
        defer { kek.wipe() }
        let slot = LoginSlot(kdf: parameters, salt: salt,
                             slot: SecretBox.wrap(payload, under: kek, ad: LoginSlot.ad(
                                kdf: parameters, salt: salt, record: record, storeID: config.storeID,
                                fileName: name.recordFileName)))
        try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
            guard try loadRecord(name).recoverySlot == record.recoverySlot else { throw StoreError.accountChangedMeanwhile }
            try withAccountsDir { dfd in
                try AtomicFile.place(slot.encoded(), in: dfd, name: name.loginFileName, mode: 0o600, replacing: true)
                try AtomicFile.syncDirectory(dfd, name.loginFileName)
            }
        }
    }

    /// Removes the login slot after checking the vault `password`. False if there was none.
    @discardableResult
    public func removeLoginSlot(user: String, password: SecureBytes) throws -> Bool {
        let (name, _, payload, _) = try unlock(user: user, password: password)
        payload.wipe()
        return try AccountsLock.withLock(accountsDir: layout.accountsDir, timeout: lockTimeout) {
            try withAccountsDir { dfd in
                guard unlinkat(dfd, name.loginFileName, 0) == 0 else {
                    if errno == ENOENT { return false }
                    throw StoreError.posix("unlink \(name.loginFileName)")
                }
                try AtomicFile.syncDirectory(dfd, name.loginFileName)
                return true
            }
        }
    }

    /// The PAM path: opens the account with a password typed at the login or lock screen,
    /// through its login slot, else as its vault password. Never waits for the throttle and
    /// never counts: a login password that fits no slot is no guess at the vault password
    /// (CREDENTIALS.md section 12). nil when nothing fits or anything is amiss (no account, a
    /// damaged slot, another device); the caller says nothing either way.
    public func openWithLoginPassword(user: String, password: SecureBytes) -> OpenedAccount? {
        guard PasswordPolicy.codePoints(password) > 0,
              let name = try? AccountName.derive(user: user, config: config),
              let record = try? loadRecord(name) else { return nil }
        let device: SecureBytes?
        do { device = try deviceSecret(for: record) } catch { return nil }
        defer { device?.wipe() }
        var payload: SecureBytes? = nil
        if let slot = loadLoginSlot(name), (try? AccountRecord.checkCost(slot.kdf, floor: config.kdfFloor)) != nil,
           let kek = try? loginKEK(password, kdf: slot.kdf, salt: slot.salt, device: device) {
            payload = try? SecretBox.unwrap(slot.slot, under: kek, ad: LoginSlot.ad(
                kdf: slot.kdf, salt: slot.salt, record: record, storeID: config.storeID, fileName: name.recordFileName))
            kek.wipe()
        }
        if payload == nil, (try? AccountRecord.checkCost(record.kdf, floor: config.kdfFloor)) != nil,
           let kek = try? passwordKEK(password, record: record, device: device) {
            payload = try? SecretBox.unwrap(record.passwordSlot, under: kek,
                                            ad: record.passwordSlotAD(storeID: config.storeID, fileName: name.recordFileName))
            kek.wipe()
        }
        guard let p = payload else { return nil }
        defer { p.wipe() }
        guard let (mk, treeID) = try? AccountPayload.split(p) else { return nil }
        return OpenedAccount(treeID: treeID, masterKey: mk, treePath: layout.userTree(treeID))
    }

    func loadLoginSlot(_ name: AccountName) -> LoginSlot? {
        guard let fd = try? FileIO.openRegular(AT_FDCWD, StorePath.join(layout.accountsDir, name.loginFileName),
                                               O_RDONLY, what: "login slot", misshapen: { _ in .corruptRecord("not a regular file") })
        else { return nil }
        defer { close(fd) }
        guard let bytes = try? FileIO.readAll(fd, limit: AccountRecord.maximumFileSize) else { return nil }
        return LoginSlot.decode(bytes)
    }

    /// KEK_login = Argon2id(login password, slot salt, slot cost), bound to the device secret
    /// for a device-bound account as KEK_pw is.
    private func loginKEK(_ password: SecureBytes, kdf: Argon2Parameters, salt: [UInt8], device: SecureBytes?) throws -> SecureBytes {
        let kek: SecureBytes
        do { kek = try PasswordKDF.derive(password: password, salt: salt, parameters: kdf) }
        catch { throw StoreError.io(errno: ENOMEM, context: "Argon2id (\(kdf.memLimit >> 20) MiB) failed: \(error)") }
        guard let d = device else { return kek }
        defer { kek.wipe() }
        return DeviceSecret.bind(kek, to: d)
    }
}
