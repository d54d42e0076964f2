import CSodium

/// XChaCha20-Poly1305 (IETF) with a random 24-byte nonce, for small secrets and metadata:
/// key wrapping, symlink targets, xattr values. Output: nonce(24) || ciphertext || tag(16).
public enum SecretBox {
    public static let nonceSize = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)   // 24
    public static let tagSize = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)        // 16
    public static let overhead = nonceSize + tagSize

    public static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecureBytes, ad: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialised()
        precondition(key.count == 32)
        var out = [UInt8](repeating: 0, count: overhead + plaintext.count)
        out.withUnsafeMutableBytes { o in
            let base = o.baseAddress!.assumingMemoryBound(to: UInt8.self)
            randombytes_buf(base, nonceSize)
            ad.withUnsafeBytes { a in
                key.withUnsafeBytes { k in
                    var clen: UInt64 = 0
                    _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                        base + nonceSize, &clen,
                        plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                        a.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(ad.count),
                        nil, base, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        return out
    }

    public static func seal(_ plaintext: [UInt8], key: SecureBytes, ad: [UInt8]) -> [UInt8] {
        plaintext.withUnsafeBytes { seal($0, key: key, ad: ad) }
    }

    /// Opens into a caller-provided buffer of `sealed.count - overhead` bytes.
    public static func open(_ sealed: UnsafeRawBufferPointer, key: SecureBytes, ad: [UInt8],
                            into out: UnsafeMutableRawBufferPointer) throws {
        Sodium.ensureInitialised()
        guard sealed.count >= overhead else { throw CryptoError.authenticationFailed }
        guard out.count == sealed.count - overhead else { throw CryptoError.invalidLength(expected: sealed.count - overhead, got: out.count) }
        let base = sealed.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let rc: Int32 = ad.withUnsafeBytes { a in
            key.withUnsafeBytes { k in
                var mlen: UInt64 = 0
                // A zero-length output still needs a valid pointer.
                var dummy: UInt8 = 0
                let o = out.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? withUnsafeMutablePointer(to: &dummy) { $0 }
                return crypto_aead_xchacha20poly1305_ietf_decrypt(
                    o, &mlen, nil,
                    base + nonceSize, UInt64(sealed.count - nonceSize),
                    a.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(ad.count),
                    base, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        guard rc == 0 else { throw CryptoError.authenticationFailed }
    }

    public static func open(_ sealed: [UInt8], key: SecureBytes, ad: [UInt8]) throws -> [UInt8] {
        guard sealed.count >= overhead else { throw CryptoError.authenticationFailed }
        var out = [UInt8](repeating: 0, count: sealed.count - overhead)
        try sealed.withUnsafeBytes { (s) in
            try out.withUnsafeMutableBytes { (o) in try open(s, key: key, ad: ad, into: o) }
        }
        return out
    }

    /// Wraps a secret key; the result is `overhead + key.count` bytes.
    public static func wrap(_ secret: SecureBytes, under key: SecureBytes, ad: [UInt8]) -> [UInt8] {
        secret.withUnsafeBytes { seal($0, key: key, ad: ad) }
    }

    /// Unwraps straight into secure memory.
    public static func unwrap(_ sealed: UnsafeRawBufferPointer, under key: SecureBytes, ad: [UInt8]) throws -> SecureBytes {
        guard sealed.count > overhead else { throw CryptoError.authenticationFailed }
        let out = try SecureBytes(lockedCount: sealed.count - overhead)
        do {
            try out.withUnsafeMutableBytes { (o) in try open(sealed, key: key, ad: ad, into: o) }
        } catch { out.wipe(); throw error }
        return out
    }

    public static func unwrap(_ sealed: [UInt8], under key: SecureBytes, ad: [UInt8]) throws -> SecureBytes {
        try sealed.withUnsafeBytes { try unwrap($0, under: key, ad: ad) }
    }
}

/// Anonymous sealing to an X25519 public key (`crypto_box_seal`): lets a locked vault
/// create `complete-unless-open` files without the private half.
public enum SealedBox {
    public static let publicKeySize = Int(crypto_box_PUBLICKEYBYTES)   // 32
    public static let secretKeySize = Int(crypto_box_SECRETKEYBYTES)   // 32
    public static let overhead = Int(crypto_box_PUBLICKEYBYTES + crypto_box_MACBYTES)  // crypto_box_SEALBYTES = 48

    /// Deterministic key pair from a 32-byte seed. Throws `CryptoError.memoryNotLocked` when
    /// no locked memory can be had for the secret key.
    public static func keyPair(seed: SecureBytes) throws -> (publicKey: [UInt8], secretKey: SecureBytes) {
        Sodium.ensureInitialised()
        var pk = [UInt8](repeating: 0, count: publicKeySize)
        let sk = try SecureBytes(lockedCount: secretKeySize)
        pk.withUnsafeMutableBytes { p in
            sk.withUnsafeMutableBytes { s in
                seed.withUnsafeBytes { sd in
                    _ = crypto_box_seed_keypair(p.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                s.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                sd.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        return (pk, sk)
    }

    public static func seal(_ message: UnsafeRawBufferPointer, to publicKey: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialised()
        var out = [UInt8](repeating: 0, count: message.count + overhead)
        out.withUnsafeMutableBytes { o in
            publicKey.withUnsafeBytes { p in
                _ = crypto_box_seal(o.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                    message.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(message.count),
                                    p.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        return out
    }

    public static func open(_ sealed: UnsafeRawBufferPointer, publicKey: [UInt8], secretKey: SecureBytes) throws -> SecureBytes {
        Sodium.ensureInitialised()
        guard sealed.count > overhead else { throw CryptoError.authenticationFailed }
        let out = try SecureBytes(lockedCount: sealed.count - overhead)
        let rc: Int32 = out.withUnsafeMutableBytes { o in
            publicKey.withUnsafeBytes { p in
                secretKey.withUnsafeBytes { s in
                    crypto_box_seal_open(o.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                         sealed.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(sealed.count),
                                         p.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                         s.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        guard rc == 0 else { out.wipe(); throw CryptoError.authenticationFailed }
        return out
    }
}
