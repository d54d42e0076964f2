import PhotoVaultCrypto

/// An account unlocked by its password: the master key and the tree it owns.
/// The caller wipes `masterKey` (or calls `wipe()`) once the keyring is built.
public struct OpenedAccount {
    public let treeID: [UInt8]
    public let masterKey: SecureBytes
    /// `users/<hex tree ID>` inside the store.
    public let treePath: String

    /// Every class key and name key of the account (see `UserKeyring`).
    public func keyring() -> UserKeyring { UserKeyring(masterKey: masterKey) }

    public func wipe() { masterKey.wipe() }
}
