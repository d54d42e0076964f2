import PhotoVaultCrypto

/// The 128-byte header at the start of every encrypted file (FORMAT.md, "File header").
///
///   0   4  magic "PVF\0"
///   4   2  format version, u16 LE: 1, or 2 for a file that has (or had) holes, whose
///          hole map is a companion in the tree's root (`HoleMapFile`, FORMAT.md section 5)
///   6   1  protection class (1 complete, 2 complete-unless-open, 3 until-first-auth, 4 none)
///   7   1  content cipher (1 AES-256-GCM, 2 XChaCha20-Poly1305)
///   8  16  file ID (random)
///  24 104  key slot: the file's random 32-byte content key
///          classes 1,3,4: XChaCha20-Poly1305(classKey, nonce, fileKey, ad = bytes 0..<24)
///                         = nonce(24) || ct(32) || tag(16), then 32 zero bytes
///          class 2:       crypto_box_seal(fileKey || bytes 0..<24, classPublicKey) (104 bytes)
public struct FileHeader: Sendable, Equatable {
    public static let size = 128
    public static let prefixSize = 24
    public static let magic: [UInt8] = [0x50, 0x56, 0x46, 0x00]
    /// The version a new file gets: files without holes stay readable by older builds.
    public static let currentVersion: UInt16 = 1
    /// The version of a file with holes, set by the write that makes its first hole.
    public static let sparseVersion: UInt16 = 2
    public static let supportedVersions: ClosedRange<UInt16> = 1...2

    public var version: UInt16

    public var protectionClass: ProtectionClass
    public var cipher: ContentCipher
    public var fileID: [UInt8]

    public init(protectionClass: ProtectionClass, cipher: ContentCipher, fileID: [UInt8] = SecureRandom.bytes(16),
                version: UInt16 = FileHeader.currentVersion) {
        self.version = version
        self.protectionClass = protectionClass
        self.cipher = cipher
        self.fileID = fileID
    }

    var prefix: [UInt8] {
        var p = FileHeader.magic
        p.append(UInt8(version & 0xff)); p.append(UInt8(version >> 8))
        p.append(protectionClass.rawValue)
        p.append(cipher.rawValue)
        p.append(contentsOf: fileID)
        return p
    }

    /// Seals `fileKey` into a complete 128-byte header. For `completeUnlessOpen` only the
    /// class public key is needed, so this works while the vault is locked.
    public func encode(fileKey: SecureBytes, keyring: UserKeyring) throws -> [UInt8] {
        let p = prefix
        var slot: [UInt8]
        switch protectionClass {
        case .completeUnlessOpen:
            guard let msg = try? SecureBytes(lockedCount: 32 + FileHeader.prefixSize) else { throw StoreError.keyMemoryNotLocked }
            msg.withUnsafeMutableBytes { m in
                fileKey.withUnsafeBytes { m.copyMemory(from: $0) }
                p.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: m[32...]).copyMemory(from: $0) }
            }
            slot = msg.withUnsafeBytes { SealedBox.seal($0, to: keyring.classBPublicKey) }
            msg.wipe()
        default:
            slot = try keyring.withClassKey(protectionClass) { SecretBox.wrap(fileKey, under: $0, ad: p) }
        }
        slot.append(contentsOf: [UInt8](repeating: 0, count: 104 - slot.count))
        return p + slot
    }

    /// Parses a header and unwraps the file key. Integrity errors for any modified byte;
    /// `StoreError.locked` when the class key is not available; `keyMemoryNotLocked` when the
    /// file key cannot be had in locked memory.
    public static func decode(_ bytes: [UInt8], keyring: UserKeyring) throws -> (FileHeader, SecureBytes) {
        let h = try parse(bytes)
        let p = Array(bytes[0..<prefixSize])
        let slot = Array(bytes[prefixSize..<size])
        do {
            switch h.protectionClass {
            case .completeUnlessOpen:
                let opened = try keyring.withClassBSecretKey { sk in
                    try slot.withUnsafeBytes { try SealedBox.open($0, publicKey: keyring.classBPublicKey, secretKey: sk) }
                }
                defer { opened.wipe() }
                let boundPrefix = opened.withUnsafeBytes { Array($0[32..<(32 + prefixSize)]) }
                guard constantTimeEqual(boundPrefix, p) else { throw CryptoError.authenticationFailed }
                let key = try SecureBytes(lockedCount: 32)
                key.withUnsafeMutableBytes { k in opened.withUnsafeBytes { k.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<32])) } }
                return (h, key)
            default:
                let wrappedLen = SecretBox.overhead + 32
                guard slot[wrappedLen...].allSatisfy({ $0 == 0 }) else { throw CryptoError.authenticationFailed }
                let key = try keyring.withClassKey(h.protectionClass) {
                    try SecretBox.unwrap(Array(slot[0..<wrappedLen]), under: $0, ad: p)
                }
                return (h, key)
            }
        } catch CryptoError.keyUnavailable {
            throw StoreError.locked
        } catch CryptoError.memoryNotLocked {
            throw StoreError.keyMemoryNotLocked
        } catch is CryptoError {
            throw StoreError.integrity(path: "", detail: "file header failed authentication")
        }
    }

    /// The class of a header, authenticated: the key slot is opened under that class's key
    /// and the file key wiped at once, so a changed class byte (or any other byte) is an
    /// integrity error rather than a class reported as the file's. `StoreError.locked` when
    /// the class key is not available (a locked mount: the caller may fall back to `parse`).
    public static func authenticatedClass(_ bytes: [UInt8], keyring: UserKeyring) throws -> ProtectionClass {
        let (h, key) = try decode(bytes, keyring: keyring)
        key.wipe()
        return h.protectionClass
    }

    /// Parses the clear fields only (no key needed, nothing authenticated).
    public static func parse(_ bytes: [UInt8]) throws -> FileHeader {
        guard bytes.count >= size else { throw StoreError.integrity(path: "", detail: "header truncated") }
        guard Array(bytes[0..<4]) == magic else { throw StoreError.integrity(path: "", detail: "bad header magic") }
        let version = Int(bytes[4]) | Int(bytes[5]) << 8
        guard supportedVersions.contains(where: { Int($0) == version }) else {
            throw StoreError.unknownVersion(found: version, supported: Int(supportedVersions.upperBound))
        }
        guard let c = ProtectionClass(rawValue: bytes[6]), let cipher = ContentCipher(rawValue: bytes[7]) else {
            throw StoreError.integrity(path: "", detail: "bad header class or cipher")
        }
        return FileHeader(protectionClass: c, cipher: cipher, fileID: Array(bytes[8..<24]), version: UInt16(version))
    }
}

extension ProtectionClass {
    /// The class a file without a header yet (a 0-byte ciphertext file) gets with its header
    /// on its first write, and reports until then (FORMAT.md section 4). A class belongs to the
    /// file, not to a path: with one link it is its directory's default; with several, whose
    /// directories may disagree, it is the strictest class (`complete`), so that it never
    /// depends on the name it is reached by and is never weaker than any directory asks.
    public static func forHeaderlessFile(links: UInt64, directoryDefault: ProtectionClass) -> ProtectionClass {
        links > 1 ? .complete : directoryDefault
    }
}
