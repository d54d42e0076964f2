import PhotoVaultCrypto

/// An account unlocked by its password: the master key and the tree it owns.
/// The caller wipes `masterKey` (or calls `wipe()`) once the keyring is built.
public struct OpenedAccount {
    public let treeID: [UInt8]
    public let masterKey: SecureBytes
    /// `users/<hex tree ID>` inside the store.
    public let treePath: String

    /// Every class key and name key of the account (see `UserKeyring`); throws
    /// `CryptoError.memoryNotLocked` when they find no locked memory.
    public func keyring() throws -> UserKeyring { try UserKeyring(masterKey: masterKey) }

    public func wipe() { masterKey.wipe() }
}

/// A password change between its two halves (`AccountStore.beginPasswordChange` and
/// `finishPasswordChange`): the unwrapped payload (master key and tree ID) in secure memory,
/// and the record it came from. `wipe()` it on every path; it also wipes itself when freed.
public final class PendingPasswordChange {
    let name: AccountName
    let record: AccountRecord
    let payload: SecureBytes
    /// The record file the current password opened: the record, or a sync engine's copy of it.
    let version: String

    init(name: AccountName, record: AccountRecord, payload: SecureBytes, version: String) {
        self.name = name
        self.record = record
        self.payload = payload
        self.version = version
    }

    /// The secret held, to be zeroed by a signal handler too (never copy it out).
    public var secret: SecureBytes { payload }

    public func wipe() { payload.wipe() }

    deinit { payload.wipe() }
}
