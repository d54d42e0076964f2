import CSodium

/// The AEAD that seals file chunks. Chosen per store at `init` and recorded in the store config.
public enum ContentCipher: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case aes256gcm = 1
    case xchacha20poly1305 = 2

    public var nonceSize: Int { self == .aes256gcm ? 12 : 24 }
    public static let tagSize = 16
    public static let keySize = 32
    public var overhead: Int { nonceSize + ContentCipher.tagSize }

    public var name: String { self == .aes256gcm ? "AES-256-GCM" : "XChaCha20-Poly1305" }
    public var description: String { name }

    public init?(name: String) {
        guard let c = ContentCipher.allCases.first(where: { $0.name.lowercased() == name.lowercased() }) else { return nil }
        self = c
    }

    /// AES-256-GCM where the CPU has AES-NI and CLMUL (faster, measured), else XChaCha20-Poly1305.
    public static var preferred: ContentCipher {
        Sodium.ensureInitialised()
        return crypto_aead_aes256gcm_is_available() == 1 ? .aes256gcm : .xchacha20poly1305
    }

    public var isAvailable: Bool {
        Sodium.ensureInitialised()
        return self == .xchacha20poly1305 || crypto_aead_aes256gcm_is_available() == 1
    }
}

/// Seals and opens the chunks of one file under that file's key.
///
/// On-disk chunk: nonce || ciphertext || tag(16). Associated data: fileID(16) || chunkIndex(u64 LE),
/// so a chunk moved to another position or another file fails to open.
/// Thread-safe for concurrent seal/open; `wipe()` must not race them (callers hold a lock).
public final class ChunkCipher: @unchecked Sendable {
    public let cipher: ContentCipher
    public let fileID: [UInt8]
    private let key: SecureBytes
    /// AES-256-GCM through ipsec-mb (`AESGCMEngine`): the expanded key, built here.
    private let imb: IPSecMBGCM?
    /// AES-256-GCM through libcrypto (`AESGCMEngine`): contexts keyed on first use.
    private let gcm: LibcryptoGCM?
    /// AES-256-GCM through libsodium: the expanded key schedule (`beforenm`), in secure
    /// memory. Also the fallback should libcrypto ever fail an operation, so it is built with
    /// the cipher (a slot and a microsecond per open) rather than behind a lock per chunk.
    /// ipsec-mb cannot fail an operation (no allocation, no error path), so it needs none.
    private let aesState: SecureBytes?

    /// `engine` is for tests and benchmarks; the vault always uses `AESGCMEngine.current`.
    /// Throws `CryptoError.memoryNotLocked` when the key schedule cannot be had in locked memory.
    public init(cipher: ContentCipher, key: SecureBytes, fileID: [UInt8], engine: AESGCMEngine = .current) throws {
        precondition(key.count == ContentCipher.keySize && fileID.count == 16)
        Sodium.ensureInitialised()
        self.cipher = cipher
        self.fileID = fileID
        self.key = key
        let aes = cipher == .aes256gcm
        imb = aes && engine == .ipsecMB ? IPSecMBGCM(key: key) : nil
        gcm = aes && engine == .libcrypto ? LibcryptoGCM(key: key) : nil
        if aes && imb == nil {
            let st = try SecureBytes(lockedCount: MemoryLayout<crypto_aead_aes256gcm_state>.size)
            st.withUnsafeMutableBytes { s in
                precondition(Int(bitPattern: s.baseAddress!) % 16 == 0, "AES-GCM state must be 16-byte aligned")
                _ = crypto_aead_aes256gcm_beforenm(s.baseAddress!.assumingMemoryBound(to: crypto_aead_aes256gcm_state.self),
                                                   key.unsafePointer)
            }
            aesState = st
        } else {
            aesState = nil
        }
    }

    public var isWiped: Bool { key.isWiped }

    /// Zeroes the file key and every expanded key schedule.
    public func wipe() {
        key.wipe()
        imb?.wipe()
        gcm?.wipe()
        aesState?.wipe()
    }

    @inline(__always)
    private func makeAD(_ index: UInt64, _ ad: UnsafeMutablePointer<UInt8>) {
        fileID.withUnsafeBytes { ad.update(from: $0.baseAddress!.assumingMemoryBound(to: UInt8.self), count: 16) }
        var le = index.littleEndian
        withUnsafeBytes(of: &le) { (ad + 16).update(from: $0.baseAddress!.assumingMemoryBound(to: UInt8.self), count: 8) }
    }

    /// Seals `count` plaintext bytes into `out` (which must hold `count + overhead`).
    /// `nonce` is the nonce to use (cipher.nonceSize bytes); see `NonceSequence`.
    public func seal(index: UInt64, plaintext: UnsafeRawPointer, count: Int,
                     nonce: UnsafeRawPointer, into out: UnsafeMutableRawPointer) {
        let ns = cipher.nonceSize
        let o = out.assumingMemoryBound(to: UInt8.self)
        o.update(from: nonce.assumingMemoryBound(to: UInt8.self), count: ns)
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { adBuf in
            let ad = adBuf.baseAddress!
            makeAD(index, ad)
            let m = plaintext.assumingMemoryBound(to: UInt8.self)
            var maclen: UInt64 = 0
            switch cipher {
            case .aes256gcm:
                if let e = imb { e.seal(m, count, ad: ad, adCount: 24, nonce: o, into: o + ns, tag: o + ns + count); return }
                if let g = gcm, g.seal(m, count, ad: ad, adCount: 24, nonce: o, into: o + ns, tag: o + ns + count) { return }
                aesState!.withUnsafeBytes { s in
                    _ = crypto_aead_aes256gcm_encrypt_detached_afternm(
                        o + ns, o + ns + count, &maclen, m, UInt64(count), ad, 24, nil, o,
                        s.baseAddress!.assumingMemoryBound(to: crypto_aead_aes256gcm_state.self))
                }
            case .xchacha20poly1305:
                _ = crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                    o + ns, o + ns + count, &maclen, m, UInt64(count), ad, 24, nil, o, key.unsafePointer)
            }
        }
    }

    /// Opens a sealed chunk of `sealedCount` bytes into `out` (`sealedCount - overhead` bytes).
    public func open(index: UInt64, sealed: UnsafeRawPointer, sealedCount: Int,
                     into out: UnsafeMutableRawPointer) throws {
        let ns = cipher.nonceSize
        let count = sealedCount - cipher.overhead
        guard count >= 0 else { throw CryptoError.authenticationFailed }
        let s = sealed.assumingMemoryBound(to: UInt8.self)
        let o = out.assumingMemoryBound(to: UInt8.self)
        let rc: Int32 = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { adBuf in
            let ad = adBuf.baseAddress!
            makeAD(index, ad)
            switch cipher {
            case .aes256gcm:
                if let e = imb { return e.open(s + ns, count, tag: s + ns + count, ad: ad, adCount: 24, nonce: s, into: o) ? 0 : -1 }
                if let g = gcm, let rc = g.open(s + ns, count, tag: s + ns + count, ad: ad, adCount: 24, nonce: s, into: o) {
                    return rc
                }
                return aesState!.withUnsafeBytes { st in
                    crypto_aead_aes256gcm_decrypt_detached_afternm(
                        o, nil, s + ns, UInt64(count), s + ns + count, ad, 24, s,
                        st.baseAddress!.assumingMemoryBound(to: crypto_aead_aes256gcm_state.self))
                }
            case .xchacha20poly1305:
                return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
                    o, nil, s + ns, UInt64(count), s + ns + count, ad, 24, s, key.unsafePointer)
            }
        }
        guard rc == 0 else {
            secureZero(UnsafeMutableRawBufferPointer(start: out, count: count))
            throw CryptoError.authenticationFailed
        }
    }
}

/// Nonces for the chunks of one request: one random draw (one getrandom call) per request,
/// then the chunk's position in the request XORed into the last 4 bytes. Unique with the
/// same probability as independent random nonces of the cipher's size minus 32 bits.
public struct NonceSequence {
    private var base: [UInt8]

    public init(cipher: ContentCipher) {
        base = SecureRandom.bytes(cipher.nonceSize)
    }

    /// Writes the nonce for the `i`-th chunk of this request into `out`.
    @inline(__always)
    public func nonce(_ i: Int, into out: UnsafeMutableRawPointer) {
        let n = base.count
        base.withUnsafeBytes { out.copyMemory(from: $0.baseAddress!, byteCount: n) }
        let o = out.assumingMemoryBound(to: UInt8.self)
        let x = UInt32(truncatingIfNeeded: i)
        o[n - 4] ^= UInt8(x & 0xff); o[n - 3] ^= UInt8(x >> 8 & 0xff)
        o[n - 2] ^= UInt8(x >> 16 & 0xff); o[n - 1] ^= UInt8(x >> 24)
    }
}
