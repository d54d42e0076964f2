import PhotoVaultCrypto

/// Rules for a *new* password (add, change, reset). Existing passwords are never re-judged
/// on unlock, so a later, stricter rule does not lock anybody out.
public enum PasswordPolicy {
    /// Counted in Unicode code points (not bytes, not grapheme clusters): "pässwörd" is 8.
    public static let minimumLength = 8

    public static func check(_ password: SecureBytes) throws {
        let n = codePoints(password)
        guard n > 0 else { throw StoreError.emptyPassword }
        guard n >= minimumLength else { throw StoreError.passwordTooShort(minimum: minimumLength) }
    }

    /// Code points of UTF-8 text = bytes that are not continuation bytes (10xxxxxx). Counted
    /// in place, so the password never leaves secure memory; bytes that are not valid UTF-8
    /// still count once per lead byte.
    static func codePoints(_ password: SecureBytes) -> Int {
        if password.isWiped { return 0 }
        return password.withUnsafeBytes { raw in raw.reduce(0) { $0 + ($1 & 0xC0 == 0x80 ? 0 : 1) } }
    }
}
