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
    public static let loginExtension = ".login"
    public static let hashSize = 32

    /// 64 lowercase hex digits.
    public let stem: String

    public var recordFileName: String { stem + AccountName.recordExtension }
    public var throttleFileName: String { stem + AccountName.throttleExtension }
    public var loginFileName: String { stem + AccountName.loginExtension }

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

    /// Rules for a *new* user name (add), judged before any hashing. Like the password
    /// rules they are not applied when opening, so an account made before them still opens.
    /// No trimming is done (CREDENTIALS.md §2), so a name that begins or ends with white
    /// space, or is nothing else, would be an account that the same name typed without it
    /// never finds; a control character (a newline, an escape sequence) would be printed to
    /// the terminal by every message naming the account. Both are refused, not altered.
    public static func checkNew(_ user: String) throws {
        guard !user.isEmpty else { throw StoreError.emptyUsername }
        let scalars = user.unicodeScalars
        if scalars.allSatisfy(\.properties.isWhitespace) {
            throw StoreError.invalidArgument("the user name is only white space")
        }
        if scalars.first!.properties.isWhitespace || scalars.last!.properties.isWhitespace {
            throw StoreError.invalidArgument("the user name begins or ends with white space")
        }
        if scalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw StoreError.invalidArgument("the user name contains a control character (a tab, a newline, an escape)")
        }
    }

    /// Whether a directory entry of `accounts/` is an account record.
    static func isRecordFileName(_ name: String) -> Bool {
        guard name.hasSuffix(recordExtension) else { return false }
        let stem = name.dropLast(recordExtension.count)
        return stem.utf8.count == hashSize * 2 && stem.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
