import CSodium

/// Deterministic, authenticated encryption of names (an SIV construction from libsodium
/// primitives), bound to the directory that holds them.
///
///   padded = name || zero bytes up to a multiple of 16 (names never contain NUL)
///   siv    = BLAKE2b-192(key = macKey, "PVname\x01" || domain(16) || padded)
///   ct     = XChaCha20(key = encKey, nonce = siv) XOR padded
///   sealed = siv(24) || ct
///
/// The same name in the same directory always gives the same bytes (lookups need no
/// scan); the same name in another directory (another `domain`) gives other bytes; any
/// change to `sealed` fails the SIV check on decryption.
public struct NameCipher: Sendable {
    public static let sivSize = 24
    public static let blockSize = 16
    private let macKey: SecureBytes
    private let encKey: SecureBytes
    private static let label: [UInt8] = Array("PVname".utf8) + [1]

    public init(macKey: SecureBytes, encKey: SecureBytes) {
        self.macKey = macKey
        self.encKey = encKey
    }

    public func seal(_ name: [UInt8], domain: [UInt8]) -> [UInt8] {
        precondition(domain.count == 16)
        var padded = name
        let padLen = (NameCipher.blockSize - name.count % NameCipher.blockSize) % NameCipher.blockSize
        padded.append(contentsOf: [UInt8](repeating: 0, count: name.count == 0 ? NameCipher.blockSize : padLen))
        let siv = siv(padded, domain: domain)
        var out = siv
        out.append(contentsOf: [UInt8](repeating: 0, count: padded.count))
        out.withUnsafeMutableBytes { o in
            padded.withUnsafeBytes { p in
                encKey.withUnsafeBytes { k in
                    _ = crypto_stream_xchacha20_xor(o.baseAddress!.assumingMemoryBound(to: UInt8.self) + NameCipher.sivSize,
                                                    p.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(padded.count),
                                                    o.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                    k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        return out
    }

    public func open(_ sealed: [UInt8], domain: [UInt8]) throws -> [UInt8] {
        precondition(domain.count == 16)
        let ctLen = sealed.count - NameCipher.sivSize
        guard ctLen > 0, ctLen % NameCipher.blockSize == 0 else { throw CryptoError.authenticationFailed }
        var padded = [UInt8](repeating: 0, count: ctLen)
        padded.withUnsafeMutableBytes { p in
            sealed.withUnsafeBytes { s in
                encKey.withUnsafeBytes { k in
                    _ = crypto_stream_xchacha20_xor(p.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                    s.baseAddress!.assumingMemoryBound(to: UInt8.self) + NameCipher.sivSize,
                                                    UInt64(ctLen),
                                                    s.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                    k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        let expected = siv(padded, domain: domain)
        guard constantTimeEqual(expected, Array(sealed[0..<NameCipher.sivSize])) else { throw CryptoError.authenticationFailed }
        // Strip the zero padding; a name with an interior NUL or all-zero is invalid.
        var end = padded.count
        while end > 0 && padded[end - 1] == 0 { end -= 1 }
        guard end > 0, !padded[0..<end].contains(0), padded.count - end < NameCipher.blockSize || end == 0 else {
            throw CryptoError.authenticationFailed
        }
        return Array(padded[0..<end])
    }

    private func siv(_ padded: [UInt8], domain: [UInt8]) -> [UInt8] {
        macKey.withUnsafeBytes { k in
            NameCipher.label.withUnsafeBytes { l in
                domain.withUnsafeBytes { d in
                    padded.withUnsafeBytes { p in
                        KeyedHash.hash(key: k, parts: [l, d, p], outputLength: NameCipher.sivSize)
                    }
                }
            }
        }
    }
}
