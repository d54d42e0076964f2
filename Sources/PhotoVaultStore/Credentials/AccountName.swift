import Foundation
import PhotoVaultCrypto

/// The file name of an account record: `hex(Argon2id(NFC(user name) as UTF-8,
/// salt = config.accountNameSalt, config.accountNameKDF), 32 bytes) + ".rec"`
/// (CREDENTIALS.md, "Record file name").
///
/// The user name itself is never written anywhere. `user check` must answer without a
/// password, so a name has to be derivable from the user name alone; a salted, slow hash is
/// the most that is possible: each guess of a user name costs one Argon2id.
public struct AccountName: Equatable, Sendable {
    public static let recordExtension = ".rec"
    public static let throttleExtension = ".throttle"
    public static let hashSize = 32

    /// 64 lowercase hex digits.
    public let stem: String

    public var recordFileName: String { stem + AccountName.recordExtension }
    public var throttleFileName: String { stem + AccountName.throttleExtension }

    init(stem: String) { self.stem = stem }

    /// Derives the name. Throws `.emptyUsername` for an empty (or all-ignorable) name.
    public static func derive(user: String, config: StoreConfig) throws -> AccountName {
        var bytes = try normalisedBytes(user)
        defer { secureZero(&bytes) }
        let hash = try bytes.withUnsafeBytes { raw in
            try PasswordKDF.derive(password: raw, salt: config.accountNameSalt, parameters: config.accountNameKDF)
        }
        defer { hash.wipe() }
        return AccountName(stem: hash.withUnsafeBytes { Base64Hex.hex(Array($0)) })
    }

    /// Unicode NFC, so the same name typed through different input methods (precomposed
    /// "é" or "e" + combining accent) finds the same record. No case folding, no trimming:
    /// "Alice" and "alice" are different accounts.
    static func normalisedBytes(_ user: String) throws -> [UInt8] {
        let bytes = Array(user.precomposedStringWithCanonicalMapping.utf8)
        guard !bytes.isEmpty else { throw StoreError.emptyUsername }
        return bytes
    }

    /// Whether a directory entry of `accounts/` is an account record.
    static func isRecordFileName(_ name: String) -> Bool {
        guard name.hasSuffix(recordExtension) else { return false }
        let stem = name.dropLast(recordExtension.count)
        return stem.utf8.count == hashSize * 2 && stem.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
