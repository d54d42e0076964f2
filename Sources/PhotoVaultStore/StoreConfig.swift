import Foundation
import PhotoVaultCrypto

/// `STORE/photovault.conf`: the store-wide parameters (FORMAT.md, "Store config").
/// Not secret; tampering can only make data unreadable (every file is authenticated) and
/// the KDF floor cannot be lowered below `Argon2Parameters.floor`.
public struct StoreConfig: Equatable, Sendable {
    public static let fileName = "photovault.conf"
    public static let formatName = "photovault-store"
    public static let currentVersion = 1
    public static let defaultChunkSize = 4096

    public var version: Int
    public var storeID: [UInt8]                 // 16 random bytes; bound into every credential record
    public var cipher: ContentCipher
    public var chunkSize: Int
    public var kdfFloor: Argon2Parameters       // minimum accepted for account records
    public var accountNameSalt: [UInt8]         // 16 bytes: salt of the account-record file names
    public var accountNameKDF: Argon2Parameters // Argon2id cost of an account-record file name

    public init(cipher: ContentCipher = .preferred, chunkSize: Int = StoreConfig.defaultChunkSize) {
        version = StoreConfig.currentVersion
        storeID = SecureRandom.bytes(16)
        self.cipher = cipher
        self.chunkSize = chunkSize
        kdfFloor = .floor
        accountNameSalt = SecureRandom.bytes(16)
        accountNameKDF = Argon2Parameters(opsLimit: 2, memLimit: 32 * 1024 * 1024)
    }

    public var layout: ChunkLayout { ChunkLayout(cipher: cipher, chunkSize: chunkSize) }

    public static func isValidChunkSize(_ n: Int) -> Bool { n >= 4096 && n <= 1 << 20 && n % 4096 == 0 }

    // MARK: encoding

    private struct Wire: Codable {
        var format: String
        var version: Int
        var storeID: String?
        var cipher: String?
        var chunkSize: Int?
        var kdfFloor: Argon2Parameters?
        var accountNameSalt: String?
        var accountNameKDF: Argon2Parameters?
    }

    public func encoded() -> [UInt8] {
        let w = Wire(format: StoreConfig.formatName, version: version, storeID: Base64URL.encode(storeID),
                     cipher: cipher.name, chunkSize: chunkSize, kdfFloor: kdfFloor,
                     accountNameSalt: Base64URL.encode(accountNameSalt), accountNameKDF: accountNameKDF)
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys]
        return Array(try! enc.encode(w)) + [10]
    }

    /// Parses and validates. Unknown version, truncation and weakened KDF parameters are
    /// distinct errors; nothing is ever rewritten here. The version is judged before any
    /// other field (`VersionEnvelope`): a newer version may have changed their types, and
    /// its config used to be called corrupt (exit 9) rather than of an unknown version (10).
    public static func decode(_ bytes: [UInt8]) throws -> StoreConfig {
        let data = Data(bytes)
        guard let env = try? JSONDecoder().decode(VersionEnvelope.self, from: data) else {
            throw StoreError.corruptStore("\(fileName) is truncated or not valid JSON")
        }
        guard env.format == formatName else { throw StoreError.corruptStore("\(fileName) is not a PhotoVault store config") }
        guard let version = env.version else { throw StoreError.corruptStore("\(fileName) has no version") }
        guard version == currentVersion else { throw StoreError.unknownVersion(found: version, supported: currentVersion) }
        guard let w = try? JSONDecoder().decode(Wire.self, from: data) else {
            throw StoreError.corruptStore("\(fileName) is missing fields or has mistyped values")
        }
        guard let idText = w.storeID, let id = Base64URL.decode(idText), id.count == 16,
              let cipherName = w.cipher, let cipher = ContentCipher(name: cipherName),
              let chunk = w.chunkSize, isValidChunkSize(chunk),
              let floor = w.kdfFloor, let saltText = w.accountNameSalt,
              let salt = Base64URL.decode(saltText), salt.count == 16, let nameKDF = w.accountNameKDF
        else { throw StoreError.corruptStore("\(fileName) is missing fields or has invalid values") }
        guard floor.isAtLeast(.floor) else { throw StoreError.weakStoreKDFParameters(field: "kdfFloor") }
        guard nameKDF.opsLimit >= 1, nameKDF.memLimit >= 8 * 1024 * 1024 else {
            throw StoreError.weakStoreKDFParameters(field: "accountNameKDF")
        }
        for (field, p) in [("kdfFloor", floor), ("accountNameKDF", nameKDF)] where !AccountRecord.isWithinCeilings(p) {
            throw StoreError.corruptStore("\(fileName): \(field) is above the accepted maximum "
                                          + "(ops \(AccountRecord.maximumOpsLimit), mem \(AccountRecord.maximumMemLimit >> 30) GiB)")
        }
        guard cipher.isAvailable else { throw StoreError.corruptStore("\(cipher.name) is not available on this CPU") }
        var c = StoreConfig(cipher: cipher, chunkSize: chunk)
        c.version = w.version
        c.storeID = id
        c.kdfFloor = floor
        c.accountNameSalt = salt
        c.accountNameKDF = nameKDF
        return c
    }
}

/// The two fields every versioned JSON file of the store (config, account record) is judged
/// by first, so that a version this build does not know is said as such (exit 10) whatever
/// shape its other fields have.
struct VersionEnvelope: Decodable {
    var format: String?
    var version: Int?
}

/// Where things live inside a store directory (FORMAT.md, "Store layout").
public struct StoreLayout: Sendable {
    public let root: String
    public init(root: String) { self.root = root }

    public var configPath: String { StorePath.join(root, StoreConfig.fileName) }
    /// Credential records, one file per account, named by a salted Argon2id hash of the user name.
    public var accountsDir: String { StorePath.join(root, "accounts") }
    /// One directory per account, named by the account's random tree ID (hex).
    public var usersDir: String { StorePath.join(root, "users") }
    public func userTree(_ treeID: [UInt8]) -> String { StorePath.join(usersDir, Base64Hex.hex(treeID)) }

    /// Creates an empty store: directories, then the config last (its presence marks a store).
    /// The root and any missing directory above it are made with `AtomicFile.makeDirectories`,
    /// each synced into its parent; `accounts/` and `users/` are synced with the config, by
    /// the root's fsync after its link. (The root's own entry used to be synced nowhere, so a
    /// power loss could take a whole store, accounts and photos, on a file system that makes
    /// a directory's fsync durable only for that directory, as btrfs does.)
    public func initialise(config: StoreConfig) throws {
        if access(configPath, F_OK) == 0 { throw StoreError.storeExists(path: root) }
        // Judged before anything is made, and again once it is (a directory someone else
        // made meanwhile, or one that was there: `init` used to take it as it was).
        try StoreTrust.check(root: root)
        try AtomicFile.makeDirectories(root)
        for d in [accountsDir, usersDir] {
            if mkdir(d, 0o700) != 0 && errno != EEXIST { throw StoreError.posix("mkdir \(d)") }
        }
        try StoreTrust.check(root: root)
        // Created with link(2) (or NoReplace's locked rename), never renamed over: of two inits at once (two `init`, or
        // `init` and a first mount's offer) only one makes the store. Both used to pass the
        // check above, and the later rename replaced the config (store ID, account-name salt)
        // that the first one's accounts were already made with.
        let dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw StoreError.posix("open \(root)") }
        defer { close(dfd) }
        // What the drive can do (hard links? exFAT has none), tried here once: the config's
        // create-if-absent below and every later change go by it (BackingCapabilities).
        try BackingCapabilities.probeAgain(dfd)
        do { try AtomicFile.place(config.encoded(), in: dfd, name: StoreConfig.fileName, mode: 0o600, replacing: false) }
        catch StoreError.exists { throw StoreError.storeExists(path: root) }
        // A config whose directory cannot be synced may vanish in a crash, and with it the
        // store its accounts would be made in: init fails and takes it back, as `user add`
        // does its record. It used to stay, so init failed (exit 1) and its rerun said the
        // store already exists.
        do { try AtomicFile.syncDirectory(dfd, StoreConfig.fileName) } catch {
            unlinkat(dfd, StoreConfig.fileName, 0)
            throw error
        }
    }

    /// The config, once the store's shape is checked: `.corruptStore` (exit 9) when the
    /// config is not a regular file or `accounts/` or `users/` is not a directory. Only a
    /// config that is not there (ENOENT, or a file in the path: ENOTDIR) is "no store"; one
    /// that cannot be looked up (EACCES on the store directory, EIO) is that error. It used
    /// to be "no PhotoVault store (run 'photovault init')", exit 3, and a first mount at a
    /// terminal offered to create the store.
    public func loadConfig() throws -> StoreConfig {
        var st = stat()
        guard lstat(configPath, &st) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { throw StoreError.storeNotInitialised(path: root) }
            throw StoreError.posix("look up \(configPath)")
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw StoreError.corruptStore("\(configPath) is not a regular file")
        }
        for d in [accountsDir, usersDir] {
            guard stat(d, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
                throw StoreError.corruptStore("the store has no \(StorePath.basename(d))/ directory (\(d))")
            }
        }
        try StoreTrust.check(root: root)
        return try StoreConfig.decode(FileIO.readFile(configPath, limit: 64 * 1024))
    }
}
