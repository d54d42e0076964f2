import CSodium

/// Domain-separated subkeys from one master key (libsodium `crypto_kdf`, BLAKE2b).
public enum SubkeyDerivation {
    /// Derives a 32-byte subkey. `context` must be exactly 8 ASCII bytes. Throws
    /// `CryptoError.memoryNotLocked` when no locked memory can be had for it.
    public static func derive(from master: SecureBytes, id: UInt64, context: String) throws -> SecureBytes {
        Sodium.ensureInitialised()
        precondition(master.count == Int(crypto_kdf_KEYBYTES))
        let ctx = Array(context.utf8)
        precondition(ctx.count == Int(crypto_kdf_CONTEXTBYTES))
        let out = try SecureBytes(lockedCount: 32)
        out.withUnsafeMutableBytes { o in
            master.withUnsafeBytes { m in
                ctx.withUnsafeBytes { c in
                    _ = crypto_kdf_derive_from_key(o.baseAddress!.assumingMemoryBound(to: UInt8.self), 32, id,
                                                   c.baseAddress!.assumingMemoryBound(to: CChar.self),
                                                   m.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        return out
    }
}

/// Keyed BLAKE2b (`crypto_generichash`).
public enum KeyedHash {
    public static func hash(key: UnsafeRawBufferPointer?, parts: [UnsafeRawBufferPointer], outputLength: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: outputLength)
        out.withUnsafeMutableBytes { hash(key: key, parts: parts, into: $0) }
        return out
    }

    /// A hash that is itself a key (a KEK): computed straight into locked memory, never
    /// through an ordinary array.
    public static func secret(key: SecureBytes, parts: [UnsafeRawBufferPointer], outputLength: Int = 32) -> SecureBytes {
        let out = SecureBytes(count: outputLength)
        out.withUnsafeMutableBytes { o in key.withUnsafeBytes { k in hash(key: k, parts: parts, into: o) } }
        return out
    }

    private static func hash(key: UnsafeRawBufferPointer?, parts: [UnsafeRawBufferPointer], into out: UnsafeMutableRawBufferPointer) {
        Sodium.ensureInitialised()
        // crypto_generichash_state is 64-byte aligned and opaque to Swift: allocate it raw.
        let stateSize = crypto_generichash_statebytes()
        let raw = UnsafeMutableRawPointer.allocate(byteCount: stateSize, alignment: 64)
        defer { sodium_memzero(raw, stateSize); raw.deallocate() }
        let state = OpaquePointer(raw)
        let k = key.map { $0.baseAddress!.assumingMemoryBound(to: UInt8.self) }
        _ = crypto_generichash_init(state, k, key?.count ?? 0, out.count)
        for p in parts where p.count > 0 {
            _ = crypto_generichash_update(state, p.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(p.count))
        }
        _ = crypto_generichash_final(state, out.baseAddress!.assumingMemoryBound(to: UInt8.self), out.count)
    }

    public static func hash(_ data: [UInt8], outputLength: Int = 32) -> [UInt8] {
        data.withUnsafeBytes { hash(key: nil, parts: [$0], outputLength: outputLength) }
    }
}
