import CIPSecMB
import CSodium
import Glibc

/// AES-256-GCM through Intel's IPsec Multi-Buffer library (`AESGCMEngine.ipsecMB`), on CPUs
/// with AVX-512, VAES and VPCLMULQDQ only. Same bytes as libsodium and libcrypto.
///
/// One expanded key per file key: round keys and GHASH key powers, computed once, in locked
/// memory (a `SecureBytes` slot), read-only afterwards, so concurrent readers and writers of
/// the file share it without a lock. The per-operation state lives on the caller's stack and
/// is zeroed after each chunk. `wipe()` zeroes the expanded key; callers guarantee that no
/// operation is running (the file's lock), as for the other engines.
final class IPSecMBGCM: @unchecked Sendable {
    /// The library's manager (its function table for this CPU), or nil where the CPU lacks
    /// the instructions this engine is chosen for. Read-only after set-up; holds no keys.
    static let manager: UnsafeMutableRawPointer? = pv_imb_vaes_manager()

    private static let contextSize = pv_imb_gcm_context_size()
    private let manager: UnsafeMutableRawPointer
    private let keyData: SecureBytes

    /// Nil where the CPU does not qualify (`manager` is nil), or where no locked memory can be
    /// had for the expanded key (libsodium's key schedule is then tried, and fails the same).
    init?(key: SecureBytes) {
        guard let m = IPSecMBGCM.manager, !key.isWiped,
              let kd = try? SecureBytes(lockedCount: pv_imb_gcm_key_data_size()) else { return nil }
        manager = m
        keyData = kd
        keyData.withUnsafeMutableBytes { kd in pv_imb_gcm256_pre(m, key.unsafePointer, kd.baseAddress!) }
        guard pv_imb_errno(m) == 0 else { keyData.wipe(); return nil }
    }

    deinit { keyData.wipe() }

    func wipe() { keyData.wipe() }

    /// Encrypts `count` bytes of `m` into `c` (12-byte nonce) and writes the 16-byte tag.
    func seal(_ m: UnsafePointer<UInt8>, _ count: Int, ad: UnsafePointer<UInt8>, adCount: Int,
              nonce: UnsafePointer<UInt8>, into c: UnsafeMutablePointer<UInt8>, tag: UnsafeMutablePointer<UInt8>) {
        withContext { ctx in
            pv_imb_gcm256_enc(manager, keyData.unsafePointer, ctx, c, m, UInt64(count), nonce, ad, UInt64(adCount), tag)
        }
    }

    /// Decrypts and verifies: true when authentic. On a mismatch `m` holds unauthenticated
    /// bytes, which the caller zeroes (as `ChunkCipher.open` does for every engine).
    func open(_ c: UnsafePointer<UInt8>, _ count: Int, tag: UnsafePointer<UInt8>, ad: UnsafePointer<UInt8>, adCount: Int,
              nonce: UnsafePointer<UInt8>, into m: UnsafeMutablePointer<UInt8>) -> Bool {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { computed in
            let t = computed.baseAddress!
            withContext { ctx in
                pv_imb_gcm256_dec(manager, keyData.unsafePointer, ctx, m, c, UInt64(count), nonce, ad, UInt64(adCount), t)
            }
            let same = crypto_verify_16(t, tag) == 0   // constant time, SSE2; sodium_memcmp was 1.6 % of a cold read
            sodium_memzero(t, 16)
            return same
        }
    }

    @inline(__always)
    private func withContext(_ body: (UnsafeMutableRawPointer) -> Void) {
        withUnsafeTemporaryAllocation(byteCount: IPSecMBGCM.contextSize, alignment: 16) { ctx in
            body(ctx.baseAddress!)
            sodium_memzero(ctx.baseAddress!, ctx.count)
        }
    }
}
