import CSodium

/// Argon2id cost parameters, stored with every credential record.
public struct Argon2Parameters: Equatable, Sendable, Codable {
    public var opsLimit: UInt64
    public var memLimit: UInt64   // bytes

    public init(opsLimit: UInt64, memLimit: UInt64) {
        self.opsLimit = opsLimit
        self.memLimit = memLimit
    }

    /// Default for new accounts (see docs/FORMAT.md for the measured unlock time).
    public static let standard = Argon2Parameters(opsLimit: 3, memLimit: 256 * 1024 * 1024)
    /// The floor: records with weaker parameters are refused (an attacker lowered them).
    public static let floor = Argon2Parameters(opsLimit: 2, memLimit: 64 * 1024 * 1024)
    /// Cheap parameters for tests only; refused unless the floor is lowered explicitly.
    public static let testing = Argon2Parameters(opsLimit: 1, memLimit: 8 * 1024 * 1024)

    public func isAtLeast(_ other: Argon2Parameters) -> Bool {
        opsLimit >= other.opsLimit && memLimit >= other.memLimit
    }
}

public enum PasswordKDF {
    public static let saltSize = Int(crypto_pwhash_SALTBYTES)   // 16

    /// Argon2id13: password -> 32-byte key in secure memory.
    public static func derive(password: UnsafeRawBufferPointer, salt: [UInt8], parameters: Argon2Parameters) throws -> SecureBytes {
        Sodium.ensureInitialised()
        guard salt.count == saltSize else { throw CryptoError.invalidLength(expected: saltSize, got: salt.count) }
        // Callers bound the cost first (records, store config); this keeps a value no caller
        // checked from trapping in the conversion below.
        guard let memLimit = Int(exactly: parameters.memLimit) else {
            throw CryptoError.libsodiumFailure("Argon2id memory limit \(parameters.memLimit) is out of range")
        }
        let out = SecureBytes(count: 32)
        var empty: CChar = 0
        let pw = password.baseAddress?.assumingMemoryBound(to: CChar.self) ?? withUnsafeMutablePointer(to: &empty) { UnsafePointer($0) }
        let rc: Int32 = out.withUnsafeMutableBytes { o in
            salt.withUnsafeBytes { s in
                crypto_pwhash(o.baseAddress!.assumingMemoryBound(to: UInt8.self), 32,
                              pw, UInt64(password.count),
                              s.baseAddress!.assumingMemoryBound(to: UInt8.self),
                              parameters.opsLimit, memLimit, crypto_pwhash_ALG_ARGON2ID13)
            }
        }
        guard rc == 0 else { out.wipe(); throw CryptoError.libsodiumFailure("crypto_pwhash failed (out of memory?)") }
        return out
    }

    public static func derive(password: SecureBytes, salt: [UInt8], parameters: Argon2Parameters) throws -> SecureBytes {
        try password.withUnsafeBytes { try derive(password: $0, salt: salt, parameters: parameters) }
    }
}
