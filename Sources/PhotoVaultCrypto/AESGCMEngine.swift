import COpenSSL
import CSodium
import Glibc

/// Which implementation seals and opens AES-256-GCM chunks. All produce the same bytes
/// (FORMAT.md, "File contents"); only speed differs. Measured on the development VM (AMD EPYC
/// with AVX-512 and VAES), 4 KiB chunks, one core: Intel's IPsec Multi-Buffer library
/// 9.7–10.2 GB/s, libcrypto (OpenSSL 3.0, AES-NI and AVX, no VAES code) 3.2–3.8 GB/s,
/// libsodium 1.0.18 1.3–1.7 GB/s. gocryptfs makes the same kind of choice (OpenSSL or Go's
/// assembly, never a table-based AES).
///
/// The preference is ipsec-mb where the CPU has AVX-512, VAES and VPCLMULQDQ (the only code
/// of it that was measured), else libcrypto. Either is used only where libsodium's AES-GCM is
/// usable too, i.e. where the CPU has AES-NI and CLMUL, so both run constant-time hardware
/// code. Everything else (Argon2id, key wrapping, names, XChaCha20-Poly1305, random numbers)
/// stays with libsodium. `PHOTOVAULT_AES_ENGINE=libcrypto` or `=libsodium` forces one
/// (benchmarks, comparisons); `=ipsec-mb` is honoured only where that engine qualifies.
public enum AESGCMEngine: String, Sendable, CaseIterable {
    case ipsecMB = "ipsec-mb"
    case libcrypto
    case libsodium

    public static let current: AESGCMEngine = {
        Sodium.ensureInitialised()
        guard crypto_aead_aes256gcm_is_available() == 1 else { return .libsodium }
        let forced = getenv("PHOTOVAULT_AES_ENGINE").flatMap { AESGCMEngine(rawValue: String(cString: $0)) }
        if let forced, forced.isUsable { return forced }
        return allCases.first { $0.isUsable } ?? .libsodium
    }()

    /// Whether this engine can run here (libsodium's AES-GCM itself needs AES-NI and CLMUL).
    public var isUsable: Bool {
        Sodium.ensureInitialised()
        guard crypto_aead_aes256gcm_is_available() == 1 else { return false }
        switch self {
        case .ipsecMB: return IPSecMBGCM.manager != nil
        case .libcrypto: return LibcryptoHeap.installed && LibcryptoGCM.cipher != nil
        case .libsodium: return true
        }
    }
}

/// Every allocation libcrypto makes goes to locked memory: small ones (its GCM contexts,
/// which hold the expanded key and the GHASH key) to `SecureSlots`, larger ones (tables
/// built at start-up, never key material) to the C heap; all are zeroed when freed.
/// Must be installed before libcrypto allocates anything: `AESGCMEngine.current` does it on
/// first use, and nothing else in the process uses libcrypto.
enum LibcryptoHeap {
    /// Bytes in front of each allocation: its size and where it came from.
    private static let headerSize = 16
    private static let slotKind = 1, heapKind = 2

    static let installed: Bool = {
        CRYPTO_set_mem_functions({ n, _, _ in LibcryptoHeap.allocate(n) },
                                 { p, n, _, _ in LibcryptoHeap.reallocate(p, n) },
                                 { p, _, _ in LibcryptoHeap.release(p) }) == 1
    }()

    static func allocate(_ n: Int) -> UnsafeMutableRawPointer? {
        let total = n + headerSize
        let base: UnsafeMutableRawPointer
        let kind: Int
        // A slot that cannot be locked (RLIMIT_MEMLOCK) is a failed allocation, never the
        // heap: the small ones hold key material. libcrypto then fails and libsodium serves.
        let slot: UnsafeMutableRawPointer?
        do { slot = try SecureSlots.allocate(total) } catch { return nil }
        if let s = slot {
            base = s; kind = slotKind
        } else {
            guard let m = malloc(total) else { return nil }
            base = m; kind = heapKind
        }
        base.storeBytes(of: n, as: Int.self)
        (base + 8).storeBytes(of: kind, as: Int.self)
        return base + headerSize
    }

    static func release(_ p: UnsafeMutableRawPointer?) {
        guard let p else { return }
        let base = p - headerSize
        let n = base.load(as: Int.self)
        if (base + 8).load(as: Int.self) == slotKind {
            SecureSlots.release(base, count: n + headerSize)
        } else {
            sodium_memzero(base, n + headerSize)
            free(base)
        }
    }

    static func reallocate(_ p: UnsafeMutableRawPointer?, _ n: Int) -> UnsafeMutableRawPointer? {
        guard let p else { return allocate(n) }
        if n == 0 { release(p); return nil }
        let old = (p - headerSize).load(as: Int.self)
        guard let q = allocate(n) else { return nil }
        q.copyMemory(from: p, byteCount: min(old, n))
        release(p)
        return q
    }
}

/// libcrypto AES-256-GCM contexts for one file key. A context is keyed once (expanded key and
/// GHASH key live in it, in locked memory) and serves one operation at a time, so each
/// concurrent reader or writer of the file checks one out; they are kept for reuse until
/// `wipe()`, which frees (and so zeroes) them all.
final class LibcryptoGCM: @unchecked Sendable {
    static let cipher: OpaquePointer? = {
        guard LibcryptoHeap.installed else { return nil }
        return EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
    }()

    private let key: SecureBytes
    private var lock = pthread_mutex_t()
    private var idle: [OpaquePointer] = []
    private var wiped = false

    init(key: SecureBytes) {
        self.key = key
        pthread_mutex_init(&lock, nil)
    }

    deinit {
        wipe()
        pthread_mutex_destroy(&lock)
    }

    /// Frees every context. Callers guarantee no operation is running (the file's lock).
    func wipe() {
        pthread_mutex_lock(&lock)
        let all = idle
        idle = []
        wiped = true
        pthread_mutex_unlock(&lock)
        for c in all { EVP_CIPHER_CTX_free(c) }
    }

    private func checkOut() -> OpaquePointer? {
        pthread_mutex_lock(&lock)
        if let c = idle.popLast() { pthread_mutex_unlock(&lock); return c }
        let isWiped = wiped
        pthread_mutex_unlock(&lock)
        guard !isWiped, let cipher = LibcryptoGCM.cipher, let c = EVP_CIPHER_CTX_new() else { return nil }
        guard EVP_CipherInit_ex2(c, cipher, key.unsafePointer, nil, 1, nil) == 1 else {
            EVP_CIPHER_CTX_free(c)
            return nil
        }
        return c
    }

    private func checkIn(_ c: OpaquePointer) {
        pthread_mutex_lock(&lock)
        if wiped { pthread_mutex_unlock(&lock); EVP_CIPHER_CTX_free(c); return }
        idle.append(c)
        pthread_mutex_unlock(&lock)
    }

    /// Encrypts `count` bytes of `m` into `c` and writes the 16-byte tag. False if libcrypto
    /// failed (the caller then uses libsodium, which gives the same bytes).
    func seal(_ m: UnsafePointer<UInt8>, _ count: Int, ad: UnsafePointer<UInt8>, adCount: Int,
              nonce: UnsafePointer<UInt8>, into c: UnsafeMutablePointer<UInt8>, tag: UnsafeMutablePointer<UInt8>) -> Bool {
        guard let ctx = checkOut() else { return false }
        defer { checkIn(ctx) }
        var l: Int32 = 0, f: Int32 = 0
        guard EVP_CipherInit_ex2(ctx, nil, nil, nonce, 1, nil) == 1,
              EVP_CipherUpdate(ctx, nil, &l, ad, Int32(adCount)) == 1,
              EVP_CipherUpdate(ctx, c, &l, m, Int32(count)) == 1,
              EVP_CipherFinal_ex(ctx, c + Int(l), &f) == 1,
              pv_gcm_get_tag(ctx, tag) == 1 else { return false }
        return true
    }

    /// Decrypts and verifies: 0 when authentic, -1 when the tag does not match, nil if
    /// libcrypto failed for another reason.
    func open(_ c: UnsafePointer<UInt8>, _ count: Int, tag: UnsafePointer<UInt8>, ad: UnsafePointer<UInt8>, adCount: Int,
              nonce: UnsafePointer<UInt8>, into m: UnsafeMutablePointer<UInt8>) -> Int32? {
        guard let ctx = checkOut() else { return nil }
        defer { checkIn(ctx) }
        var l: Int32 = 0, f: Int32 = 0
        guard EVP_CipherInit_ex2(ctx, nil, nil, nonce, 0, nil) == 1,
              EVP_CipherUpdate(ctx, nil, &l, ad, Int32(adCount)) == 1,
              EVP_CipherUpdate(ctx, m, &l, c, Int32(count)) == 1,
              pv_gcm_set_tag(ctx, tag) == 1 else { return nil }
        return EVP_CipherFinal_ex(ctx, m + Int(l), &f) == 1 ? 0 : -1
    }
}
