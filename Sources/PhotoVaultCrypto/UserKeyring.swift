import Glibc

/// Every key of one unlocked account, in secure memory, derived from the account's master
/// key (which is wiped as soon as the keyring is built). Thread-safe: a read-write lock
/// guards the class keys so `lock()` never frees a key another thread is using.
///
/// Derivation (FORMAT.md, "Key hierarchy"): `crypto_kdf_derive_from_key(id, "PVacct01", master)`
///   1 complete, 2 complete-unless-open X25519 seed, 3 until-first-auth, 4 none,
///   5 name SIV MAC key, 6 name stream key, 7 metadata key (symlink targets, xattr values)
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

    public init(masterKey: SecureBytes) {
        pthread_rwlock_init(&rw, nil)
        let ctx = UserKeyring.context
        classKeys[.complete] = SubkeyDerivation.derive(from: masterKey, id: 1, context: ctx)
        let seed = SubkeyDerivation.derive(from: masterKey, id: 2, context: ctx)
        let pair = SealedBox.keyPair(seed: seed)
        seed.wipe()
        classBPublicKey = pair.publicKey
        classBSecretKey = pair.secretKey
        classKeys[.untilFirstAuth] = SubkeyDerivation.derive(from: masterKey, id: 3, context: ctx)
        classKeys[.none] = SubkeyDerivation.derive(from: masterKey, id: 4, context: ctx)
        nameMac = SubkeyDerivation.derive(from: masterKey, id: 5, context: ctx)
        nameEnc = SubkeyDerivation.derive(from: masterKey, id: 6, context: ctx)
        names = NameCipher(macKey: nameMac, encKey: nameEnc)
        metadataKey = SubkeyDerivation.derive(from: masterKey, id: 7, context: ctx)
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
    /// public key differs).
    @discardableResult
    public func unlock(masterKey: SecureBytes) -> Bool {
        let fresh = UserKeyring(masterKey: masterKey)
        pthread_rwlock_wrlock(&rw); defer { pthread_rwlock_unlock(&rw) }
        guard constantTimeEqual(fresh.classBPublicKey, classBPublicKey) else { return false }
        classKeys[.complete] = fresh.classKeys[.complete]?.copy()
        classBSecretKey = fresh.classBSecretKey?.copy()
        isLocked = false
        return true
    }
}
