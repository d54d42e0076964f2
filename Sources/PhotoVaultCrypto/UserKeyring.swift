import Glibc

/// Every key of one unlocked account, in secure memory, derived from the account's master
/// key (which is wiped as soon as the keyring is built). Thread-safe: a read-write lock
/// guards the class keys so `lock()` never frees a key another thread is using.
/// Derivation: `AccountKeys` (FORMAT.md, "Key hierarchy").
public final class UserKeyring: @unchecked Sendable {
    public static let context = "PVacct01"

    private var rw = pthread_rwlock_t()
    private var classKeys: [ProtectionClass: SecureBytes] = [:]
    /// X25519 public key of `complete-unless-open`: kept after lock so new files can be sealed.
    public let classBPublicKey: [UInt8]
    private var classBSecretKey: SecureBytes?
    public let names: NameCipher
    private let nameMac: SecureBytes
    private let nameEnc: SecureBytes
    public let metadataKey: SecureBytes
    private(set) public var isLocked = false

    /// Throws `CryptoError.memoryNotLocked`, holding no key, when locked memory runs out.
    public init(masterKey: SecureBytes) throws {
        let keys = try AccountKeys(masterKey: masterKey, context: UserKeyring.context)
        pthread_rwlock_init(&rw, nil)
        classKeys = [.complete: keys.complete, .untilFirstAuth: keys.untilFirstAuth, .none: keys.none]
        classBPublicKey = keys.classBPublicKey
        classBSecretKey = keys.classBSecretKey
        nameMac = keys.nameMac
        nameEnc = keys.nameEnc
        names = NameCipher(macKey: nameMac, encKey: nameEnc)
        metadataKey = keys.metadata
    }

    deinit {
        wipeAll()
        pthread_rwlock_destroy(&rw)
    }

    /// Runs `body` with the symmetric key of class `c` (complete, until-first-auth, none)
    /// under the read lock. Throws `.keyUnavailable` when the class is locked.
    public func withClassKey<R>(_ c: ProtectionClass, _ body: (SecureBytes) throws -> R) throws -> R {
        precondition(c != .completeUnlessOpen, "complete-unless-open uses a key pair")
        pthread_rwlock_rdlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        guard let k = classKeys[c], !k.isWiped else { throw CryptoError.keyUnavailable }
        return try body(k)
    }

    /// Runs `body` with the X25519 secret key of `complete-unless-open`.
    public func withClassBSecretKey<R>(_ body: (SecureBytes) throws -> R) throws -> R {
        pthread_rwlock_rdlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        guard let k = classBSecretKey, !k.isWiped else { throw CryptoError.keyUnavailable }
        return try body(k)
    }

    /// Whether files of class `c` can be opened (read) right now.
    public func canOpen(_ c: ProtectionClass) -> Bool {
        pthread_rwlock_rdlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        switch c {
        case .completeUnlessOpen: return classBSecretKey.map { !$0.isWiped } ?? false
        default: return classKeys[c].map { !$0.isWiped } ?? false
        }
    }

    /// Device lock: forgets the `complete` key and the `complete-unless-open` secret key.
    /// until-first-auth, none, the name keys and the class B public key stay until `wipeAll()`.
    public func lock() {
        pthread_rwlock_wrlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        classKeys[.complete]?.wipe()
        classKeys[.complete] = nil
        classBSecretKey?.wipe()
        classBSecretKey = nil
        isLocked = true
    }

    /// Unmount: zeroes every key.
    public func wipeAll() {
        pthread_rwlock_wrlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        for (_, k) in classKeys { k.wipe() }
        classKeys.removeAll()
        classBSecretKey?.wipe()
        classBSecretKey = nil
        nameMac.wipe()
        nameEnc.wipe()
        metadataKey.wipe()
        isLocked = true
    }

    /// Restores the locked keys from a freshly unwrapped master key (`photovault unlock`).
    /// Returns false, changing nothing, when the key is not this account's (its class B
    /// public key differs). Throws `CryptoError.memoryNotLocked`, changing nothing and
    /// keeping no key, when locked memory runs out: the keyring stays locked. The keys
    /// derived are moved in, not copied, so nothing is allocated once the first is in place.
    @discardableResult
    public func unlock(masterKey: SecureBytes) throws -> Bool {
        let fresh = try AccountKeys(masterKey: masterKey, context: UserKeyring.context)
        // Already held (or not wanted): zeroed now rather than when `fresh` goes.
        for k in [fresh.untilFirstAuth, fresh.none, fresh.nameMac, fresh.nameEnc, fresh.metadata] { k.wipe() }
        pthread_rwlock_wrlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        guard constantTimeEqual(fresh.classBPublicKey, classBPublicKey) else {
            fresh.complete.wipe()
            fresh.classBSecretKey.wipe()
            return false
        }
        classKeys[.complete]?.wipe()
        classKeys[.complete] = fresh.complete
        classBSecretKey?.wipe()
        classBSecretKey = fresh.classBSecretKey
        isLocked = false
        return true
    }
}
