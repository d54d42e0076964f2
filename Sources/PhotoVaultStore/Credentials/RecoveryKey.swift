import PhotoVaultCrypto

/// The 32-byte recovery key created with an account and shown to the user once
/// (CREDENTIALS.md, "Recovery key").
///
/// Written as RFC 4648 base32 (alphabet A–Z 2–7, no padding): 52 characters for the key
/// (the last one carries the final key bit and 4 zero bits), then 4 characters of checksum (the first
/// 20 bits of BLAKE2b-256("PhotoVault recovery key checksum" || key)), in 14 groups of 4
/// joined by '-'. Parsing ignores case, '-' and white space, and rejects a typo through the
/// checksum before any key is tried.
public final class RecoveryKey: @unchecked Sendable {
    public static let size = 32
    static let keyCharacters = 52
    static let checksumCharacters = 4
    static let groupSize = 4
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    public let bytes: SecureBytes

    /// A fresh random key.
    public convenience init() { self.init(bytes: SecureBytes(randomCount: RecoveryKey.size)) }

    init(bytes: SecureBytes) {
        precondition(bytes.count == RecoveryKey.size)
        self.bytes = bytes
    }

    public func wipe() { bytes.wipe() }

    /// e.g. `ABCD-EFGH-...-WXYZ` (14 groups). Show it once; it is not stored anywhere.
    /// The text is as secret as the key: `withFormatted` keeps it in locked memory, zeroed
    /// after use; this String (for tests and comparisons) cannot be wiped.
    public var formatted: String {
        withFormatted { String(decoding: $0, as: UTF8.self) }
    }

    /// The formatted text in secure memory for the duration of `body` (printing it with
    /// `write(2)`), then zeroed.
    public func withFormatted<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var chars = bytes.withUnsafeBytes { RecoveryKey.base32($0) }
        chars += RecoveryKey.checksum(bytes)
        defer { secureZero(&chars) }
        let groups = chars.count / RecoveryKey.groupSize
        let text = SecureBytes(count: chars.count + groups - 1)
        defer { text.wipe() }
        text.withUnsafeMutableBytes { out in
            var j = 0
            for (i, c) in chars.enumerated() {
                if i > 0 && i % RecoveryKey.groupSize == 0 { out[j] = UInt8(ascii: "-"); j += 1 }
                out[j] = c; j += 1
            }
        }
        return try text.withUnsafeBytes(body)
    }

    /// Parses a typed recovery key. Throws `.invalidArgument` for a wrong length, a
    /// character outside the alphabet, or a checksum mismatch (a typo).
    public static func parse(_ text: String) throws -> RecoveryKey {
        var bytes = Array(text.utf8)
        defer { secureZero(&bytes) }
        return try bytes.withUnsafeBytes { try parse($0) }
    }

    /// Same, from secure memory (as the CLI reads it from a terminal or a file).
    public static func parse(_ text: SecureBytes) throws -> RecoveryKey {
        try text.withUnsafeBytes { try parse($0) }
    }

    static func parse(_ text: UnsafeRawBufferPointer) throws -> RecoveryKey {
        // Never grows past its reserved capacity: a growing array frees its old buffer
        // without zeroing it, which left key characters on the heap when more than 57 were
        // typed or pasted. Longer input is only counted, for the error message.
        let capacity = keyCharacters + checksumCharacters + 1
        var chars = [UInt8]()
        chars.reserveCapacity(capacity)
        defer { secureZero(&chars) }
        var count = 0
        for c in text {
            let upper: UInt8
            switch c {
            case UInt8(ascii: "-"), UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): continue
            case UInt8(ascii: "a")...UInt8(ascii: "z"): upper = c - 32
            default: upper = c
            }
            count += 1
            if chars.count < capacity { chars.append(upper) }
        }
        guard count == keyCharacters + checksumCharacters else {
            throw StoreError.invalidArgument("a recovery key has \(keyCharacters + checksumCharacters) letters and digits (14 groups of 4); this one has \(count)")
        }
        var acc: UInt32 = 0
        var bits = 0
        var out = [UInt8]()
        out.reserveCapacity(size)
        defer { secureZero(&out) }
        for c in chars[0..<keyCharacters] {
            guard let v = alphabet.firstIndex(of: c) else {
                throw StoreError.invalidArgument("a recovery key contains only the letters A-Z and the digits 2-7")
            }
            acc = (acc << 5 | UInt32(v)) & 0xffff
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
            }
        }
        // 52 * 5 = 260 bits: the 4 bits left over must be zero in a key we wrote.
        guard out.count == size, bits == 4, acc & 0xf == 0 else {
            throw StoreError.invalidArgument("the recovery key is mistyped (its checksum does not match)")
        }
        let key = SecureBytes(consuming: &out)
        guard constantTimeEqual(checksum(key), Array(chars[keyCharacters...])) else {
            key.wipe()
            throw StoreError.invalidArgument("the recovery key is mistyped (its checksum does not match)")
        }
        return RecoveryKey(bytes: key)
    }

    /// KEK_rk = BLAKE2b-256(key = recovery key, "PhotoVault recovery KEK"). The recovery key
    /// has 256 bits of entropy, so no password hashing is needed.
    func keyEncryptionKey() -> SecureBytes {
        let label = Array("PhotoVault recovery KEK".utf8)
        return label.withUnsafeBytes { KeyedHash.secret(key: bytes, parts: [$0]) }
    }

    static func checksum(_ key: SecureBytes) -> [UInt8] {
        let label = Array("PhotoVault recovery key checksum".utf8)
        let h = key.withUnsafeBytes { k in label.withUnsafeBytes { KeyedHash.hash(key: nil, parts: [$0, k], outputLength: 32) } }
        let v = UInt32(h[0]) << 12 | UInt32(h[1]) << 4 | UInt32(h[2]) >> 4   // first 20 bits
        return (0..<checksumCharacters).map { alphabet[Int(v >> UInt32(5 * (checksumCharacters - 1 - $0)) & 31)] }
    }

    static func base32(_ raw: UnsafeRawBufferPointer) -> [UInt8] {
        // Room for the checksum too: an array that grows frees its old buffer unzeroed.
        var out = [UInt8]()
        out.reserveCapacity((raw.count * 8 + 4) / 5 + checksumCharacters)
        var acc: UInt32 = 0
        var bits = 0
        for b in raw {
            acc = (acc << 8 | UInt32(b)) & 0xffff
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(alphabet[Int(acc >> UInt32(bits) & 31)])
            }
        }
        if bits > 0 { out.append(alphabet[Int(acc << UInt32(5 - bits) & 31)]) }
        acc = 0
        return out
    }
}
