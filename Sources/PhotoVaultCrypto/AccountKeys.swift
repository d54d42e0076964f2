/// Every key derived from an account's master key (FORMAT.md, "Key hierarchy"), all or none:
/// `crypto_kdf_derive_from_key(id, "PVacct01", master)`
///   1 complete, 2 complete-unless-open X25519 seed, 3 until-first-auth, 4 none,
///   5 name SIV MAC key, 6 name stream key, 7 metadata key (symlink targets, xattr values)
///
/// When locked memory runs out part way (RLIMIT_MEMLOCK), the keys derived so far are zeroed
/// and the derivation throws `CryptoError.memoryNotLocked`: nobody is left holding part of a
/// key set, and the process goes on (a mount stays up, locked).
struct AccountKeys {
    let complete: SecureBytes
    let classBPublicKey: [UInt8]
    let classBSecretKey: SecureBytes
    let untilFirstAuth: SecureBytes
    let none: SecureBytes
    let nameMac: SecureBytes
    let nameEnc: SecureBytes
    let metadata: SecureBytes

    init(masterKey: SecureBytes, context: String) throws {
        var derived: [SecureBytes] = []
        func derive(_ id: UInt64) throws -> SecureBytes {
            let key = try SubkeyDerivation.derive(from: masterKey, id: id, context: context)
            derived.append(key)
            return key
        }
        do {
            complete = try derive(1)
            let seed = try derive(2)
            let pair = try SealedBox.keyPair(seed: seed)
            seed.wipe()
            classBPublicKey = pair.publicKey
            classBSecretKey = pair.secretKey
            derived.append(pair.secretKey)
            untilFirstAuth = try derive(3)
            none = try derive(4)
            nameMac = try derive(5)
            nameEnc = try derive(6)
            metadata = try derive(7)
        } catch {
            for key in derived { key.wipe() }
            throw error
        }
    }
}
