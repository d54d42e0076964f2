import Glibc
import PhotoVaultCrypto

/// How one plaintext name is stored in its ciphertext directory (FORMAT.md, "Names").
public enum EncodedName: Equatable, Sendable {
    /// base64url(SIV name), at most 255 bytes: the directory entry itself.
    case short(String)
    /// Too long for one entry: the entry is `~` + base64url(BLAKE2b-256(full)) and the full
    /// encoded name is stored in the companion file `<entry>.name`.
    case long(entry: String, full: String)

    public var entry: String {
        switch self { case .short(let s): return s; case .long(let e, _): return e }
    }
    public var companion: String? {
        if case .long(let e, _) = self { return e + NameCodec.companionSuffix }
        return nil
    }
}

/// Encrypts and decrypts directory entry names with the account's name keys, bound to the
/// directory ID (deterministic per directory, authenticated, filesystem-safe).
public struct NameCodec: Sendable {
    public static let maxEntryLength = 255
    public static let longPrefix = "~"
    /// The tree root's directory of debris `fsck --repair` sets aside: entries in which
    /// nothing can be read (orphan long-name companions, foreign files that are no PhotoVault
    /// file, such as a sync tool's copy of a `.pvdir`). Kept, under their store names, but
    /// never shown: in /lost+found they were files that failed every read.
    public static let debrisDirectory = ".pvdebris"
    public static let companionSuffix = ".name"
    let names: NameCipher

    public init(keyring: UserKeyring) { names = keyring.names }

    public func encode(_ plain: [UInt8], in dir: DirectoryInfo) -> EncodedName {
        let full = Base64URL.encode(names.seal(plain, domain: dir.id))
        if full.utf8.count <= NameCodec.maxEntryLength { return .short(full) }
        return .long(entry: NameCodec.longEntry(for: full), full: full)
    }

    static func longEntry(for full: String) -> String {
        longPrefix + Base64URL.encode(KeyedHash.hash(Array(full.utf8), outputLength: 32))
    }

    /// Whether a long entry's companion holds what `encode` would store there: a full name
    /// that hashes to the entry and is too long to be an entry itself. A name that fits an
    /// entry is only ever stored as that entry, so a `~` entry carrying one is forged: it
    /// would show a second, unrelated file under the name of an existing one (same
    /// directory ID, so the SIV authenticates), and which of the two an export or a listing
    /// kept would depend on the directory's order.
    static func isCanonicalCompanion(_ full: String, of entry: String) -> Bool {
        full.utf8.count > maxEntryLength && longEntry(for: full) == entry
    }

    /// Store-internal files that are never shown: `.pvdir`, the root's mount lock, temp
    /// files, long-name companions, symlink target companions (`LinkTarget`), hole maps
    /// (`HoleMapFile`), what fsck set
    /// aside (`.pvdebris`), and a sync engine's conflict copies of any of them
    /// (`.sync-conflict-…-DEV.pvdir`, `~HASH.name..path1`: docs/SYNC.md).
    public static func isInternal(_ entry: String) -> Bool {
        if isInternalItself(entry) { return true }
        // Only names starting with `.` or `~` can be copies of internal files; a long entry
        // (`~` + 43 characters) is none. Everything else skips the parse: listings call this
        // for every entry.
        guard entry.hasPrefix(".") || (entry.hasPrefix(longPrefix) && entry.utf8.count != longEntryLength) else { return false }
        guard let r = ConflictName.root(entry) else { return false }
        return isInternalItself(r.original)
    }

    static let longEntryLength = 44

    static func isInternalItself(_ entry: String) -> Bool {
        entry == DirectoryInfo.fileName || entry == TreeLock.mountLockName || entry.hasPrefix(AtomicFile.tempPrefix)
            || entry == debrisDirectory
            || (entry.hasPrefix(longPrefix) && entry.hasSuffix(companionSuffix))
            || LinkTarget.isCompanion(entry) || HoleMapFile.isCompanion(entry)
            || entry == "." || entry == ".."
    }

    /// Decrypts one directory entry name. Throws `.integrity` for a name that fails
    /// authentication, a long name whose companion is missing or does not match, or a name
    /// that belongs to no known structure (e.g. a sync-conflict copy: `decodeListed` shows
    /// those). A companion that cannot be read (EIO, EACCES, EMFILE) says nothing about the
    /// name: `.io`, naming the companion. Names are tried under every version of the
    /// directory's `.pvdir` (`DirectoryInfo.alternateIDs`).
    public func decode(entry: String, in dir: DirectoryInfo, dirfd: Int32) throws -> [UInt8] {
        try decodeEntry(entry, in: dir, dirfd: dirfd).plain
    }

    /// `decode`, with the entry's encoded form (its companion's content for a long name).
    func decodeEntry(_ entry: String, in dir: DirectoryInfo, dirfd: Int32) throws -> (plain: [UInt8], encoded: EncodedName) {
        var full = entry
        if entry.hasPrefix(NameCodec.longPrefix) {
            let bytes: [UInt8]
            let companion = entry + NameCodec.companionSuffix
            do { bytes = try FileIO.readFile(in: dirfd, name: companion, limit: 4096) }
            catch StoreError.corruptStore(let d) {   // not a regular file, or too large
                throw StoreError.integrity(path: entry, detail: "long-name companion: \(d)")
            } catch StoreError.io(let e, _) where e == ENOENT {
                throw StoreError.integrity(path: entry, detail: "long-name companion file is missing")
            } catch StoreError.io(let e, let context) {
                throw StoreError.io(errno: e, context: "long-name companion \(companion): \(context)")
            }
            full = String(decoding: bytes, as: UTF8.self)
            guard NameCodec.isCanonicalCompanion(full, of: entry) else {
                throw StoreError.integrity(path: entry, detail: "long-name companion does not match its entry")
            }
        }
        guard let sealed = Base64URL.decode(full) else {
            throw StoreError.integrity(path: entry, detail: "not a PhotoVault name (foreign or conflict copy?)")
        }
        var opened: [UInt8]?
        for id in [dir.id] + dir.alternateIDs {
            if let p = try? names.open(sealed, domain: id) { opened = p; break }
        }
        guard let plain = opened else { throw StoreError.integrity(path: entry, detail: "name failed authentication") }
        // Authentic, but no file name (FORMAT.md section 6: no `/`; nothing makes `.` or `..`):
        // only someone holding this account's keys writes one, and export would have followed
        // it out of its destination (`../../.bashrc`, a directory named `..`).
        guard NameCodec.isFileName(plain) else {
            throw StoreError.integrity(path: entry, detail: NameCodec.notAFileName)
        }
        return (plain, entry == full ? .short(entry) : .long(entry: entry, full: full))
    }

    /// A listed entry as the view shows it: a PhotoVault name, or a sync engine's conflict
    /// copy of one under the original's plaintext name with the engine's mark before the
    /// extension (`IMG_0001 (conflict 2026-12-07 030224).jpg`, docs/SYNC.md). `encoded` is
    /// the entry as it is (a copy has no companion of its own: it shares the original's).
    public func decodeListed(entry: String, in dir: DirectoryInfo, dirfd: Int32) throws -> (plain: [UInt8], encoded: EncodedName, conflict: Bool) {
        do {
            let d = try decodeEntry(entry, in: dir, dirfd: dirfd)
            return (d.plain, d.encoded, false)
        } catch StoreError.integrity(let p, let detail) {
            guard let r = ConflictName.root(entry), !NameCodec.isInternalItself(r.original),
                  let original = try? decodeEntry(r.original, in: dir, dirfd: dirfd) else {
                throw StoreError.integrity(path: p, detail: detail)
            }
            return (ConflictName.displayName(original.plain, marks: r.marks.map(\.mark)), .short(entry), true)
        }
    }

    /// The entry that holds plaintext name `plain` in `dir` now: the name encoded under the
    /// directory's `.pvdir`, or under another version of it (a conflict copy) if it exists
    /// only there, or the conflict copy whose display name `plain` is. A name that exists
    /// nowhere is encoded under the `.pvdir` (where new entries go). Costs nothing extra
    /// (no system call) in a directory without conflicts and for ordinary names.
    public func locate(_ plain: [UInt8], in dir: DirectoryInfo, dirfd: Int32) -> EncodedName {
        let enc = encode(plain, in: dir)
        let display = ConflictName.mayBeDisplayName(plain)
        guard !dir.alternateIDs.isEmpty || display else { return enc }
        if NameCodec.exists(enc.entry, in: dirfd) { return enc }
        for id in dir.alternateIDs {
            let other = encode(plain, in: DirectoryInfo(id: id, defaultClass: dir.defaultClass))
            if NameCodec.exists(other.entry, in: dirfd) { return other }
        }
        if display, let entries = try? OfflineSys.list(dirfd) {
            for e in entries where ConflictName.parse(e.name) != nil {
                if let d = try? decodeListed(entry: e.name, in: dir, dirfd: dirfd), d.conflict, d.plain == plain { return d.encoded }
            }
        }
        return enc
    }

    static func exists(_ entry: String, in dirfd: Int32) -> Bool {
        var st = stat()
        return fstatat(dirfd, entry, &st, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// Whether an authentic plaintext name is a file name: no `/`, not `.` or `..`.
    static func isFileName(_ plain: [UInt8]) -> Bool {
        !plain.contains(UInt8(ascii: "/")) && plain != [0x2e] && plain != [0x2e, 0x2e]
    }
    static let notAFileName = "the name decrypts to '/', '.' or '..' or a name with a '/'"

    /// Creates the companion of a long name (before the entry itself is created).
    public static func writeCompanion(_ name: EncodedName, in dirfd: Int32) throws {
        guard case .long(let entry, let full) = name else { return }
        try AtomicFile.write(Array(full.utf8), in: dirfd, name: entry + companionSuffix, mode: 0o400)
    }

    /// Removes the companion after the entry is gone (ignores a missing one).
    public static func removeCompanion(_ name: EncodedName, in dirfd: Int32) {
        if let c = name.companion { unlinkat(dirfd, c, 0) }
    }

    /// Removes the companion of an entry that is gone. A long name's sync-conflict copies
    /// (`~HASH.sync-conflict-…`, `~HASH..path1`) have none of their own: they share the
    /// original's, which stays while the original or any copy of it is still there, and
    /// goes with the last of them.
    public static func removeCompanion(ofEntry entry: String, in dirfd: Int32) {
        // Short entries (nearly all) have nothing to remove and skip the parse: every unlink
        // and rename comes here.
        guard entry.hasPrefix(longPrefix) else { return }
        let owner = ConflictName.root(entry)?.original ?? entry
        guard owner.hasPrefix(longPrefix), !owner.hasSuffix(companionSuffix) else { return }
        if owner != entry && exists(owner, in: dirfd) { return }
        if hasConflictCopies(of: owner, in: dirfd) { return }
        unlinkat(dirfd, owner + companionSuffix, 0)
    }

    /// Whether a sync engine's copy of `entry` is in the directory.
    static func hasConflictCopies(of entry: String, in dirfd: Int32) -> Bool {
        guard let all = try? OfflineSys.list(dirfd) else { return true }   // unknown: keep the companion
        // Every engine's copy keeps the copied name as its prefix: the rest skip the parse.
        return all.contains { $0.name != entry && $0.name.hasPrefix(entry) && ConflictName.isCopy($0.name, of: entry) }
    }
}

/// Symlink targets (FORMAT.md section 8): sealed = XChaCha20-Poly1305(metadata key, target,
/// ad = "PVlink\x01"). The backing symlink holds base64url(sealed) when that is at most
/// `maxInlineLength` bytes, which every store file system holds in a symlink. A longer one
/// (targets over 727 bytes, up to Linux's 4,095) is kept outside the symlink, as long names
/// are: the symlink holds `~` + base64url(BLAKE2b-256(sealed)) and the tree's root directory
/// the companion file `<that>.link` with the sealed bytes. In the root, not beside the
/// symlink, so that a rename or a hard link into another directory leaves it valid; it is
/// removed when the symlink's last link goes.
public enum LinkTarget {
    static let ad: [UInt8] = Array("PVlink".utf8) + [1]
    /// PATH_MAX - 1: what symlink(2) takes on Linux.
    public static let maxPlainLength = 4095
    /// The longest stored target kept in the symlink itself: ext2/3/4 hold a symlink of one
    /// block less a byte (1 KiB blocks at the least), XFS 1,024 bytes. 1,023 bytes of base64url
    /// are 767 sealed bytes, a target of up to 727.
    public static let maxInlineLength = 1023
    public static let companionSuffix = ".link"
    /// The most a companion may hold: the sealed longest target.
    static let maxCompanionSize = maxPlainLength + SecretBox.overhead

    /// What a new symlink stores.
    public enum Stored: Equatable, Sendable {
        case inline(String)
        /// `symlink` is what the backing symlink holds, `sealed` what its companion holds.
        case companion(symlink: String, sealed: [UInt8])

        /// The backing symlink's target.
        public var symlink: String {
            switch self { case .inline(let s): return s; case .companion(let s, _): return s }
        }
    }

    public static func seal(_ target: [UInt8], keyring: UserKeyring) throws -> Stored {
        guard target.count <= maxPlainLength else { throw StoreError.io(errno: ENAMETOOLONG, context: "symlink target") }
        let sealed = SecretBox.seal(target, key: keyring.metadataKey, ad: ad)
        let text = Base64URL.encode(sealed)
        if text.utf8.count <= maxInlineLength { return .inline(text) }
        return .companion(symlink: reference(to: sealed), sealed: sealed)
    }

    static func reference(to sealed: [UInt8]) -> String {
        NameCodec.longPrefix + Base64URL.encode(KeyedHash.hash(sealed, outputLength: 32))
    }

    /// The companion file a backing symlink's target `stored` refers to, if it refers to one.
    public static func companionName(ofStored stored: [UInt8]) -> String? {
        guard stored.first == UInt8(ascii: "~") else { return nil }
        return String(decoding: stored, as: UTF8.self) + companionSuffix
    }

    /// Whether `entry` of the tree's root is a link companion (internal, never shown).
    static func isCompanion(_ entry: String) -> Bool {
        entry.hasPrefix(NameCodec.longPrefix) && entry.hasSuffix(companionSuffix)
    }

    /// Writes the companion of a new symlink into the tree's root `rootFD` (crash-safe, mode
    /// 0400), before the symlink is made; nothing for an inline target.
    public static func writeCompanion(_ stored: Stored, rootFD: Int32) throws {
        guard case .companion(let link, let sealed) = stored else { return }
        try AtomicFile.write(sealed, in: rootFD, name: link + companionSuffix, mode: 0o400)
    }

    /// Removes the companion of a symlink whose last link is gone (or that was never made).
    public static func removeCompanion(ofStored stored: [UInt8], rootFD: Int32) {
        if let c = companionName(ofStored: stored) { unlinkat(rootFD, c, 0) }
    }

    /// The plaintext target of a backing symlink whose target is `stored`; a companion is read
    /// from the tree's root `rootFD`. Authentication failures, a missing, misshapen or
    /// mismatching companion, and a companion holding a target that fits the symlink itself
    /// (only ever stored inline, so a forged one) are `.integrity`; a companion that cannot be
    /// read (EIO, EACCES, EMFILE) is that error.
    public static func open(_ stored: [UInt8], keyring: UserKeyring, rootFD: Int32) throws -> [UInt8] {
        let sealed: [UInt8]
        if let companion = companionName(ofStored: stored) {
            do { sealed = try FileIO.readFile(in: rootFD, name: companion, limit: maxCompanionSize) }
            catch StoreError.corruptStore(let d) { throw StoreError.integrity(path: "", detail: "symlink target companion: \(d)") }
            catch StoreError.io(let e, _) where e == ENOENT {
                throw StoreError.integrity(path: "", detail: "symlink target companion \(companion) is missing")
            }
            guard reference(to: sealed) == String(decoding: stored, as: UTF8.self),
                  Base64URL.encode(sealed).utf8.count > maxInlineLength else {
                throw StoreError.integrity(path: "", detail: "symlink target companion does not match its symlink")
            }
        } else {
            guard let s = Base64URL.decode(stored) else { throw StoreError.integrity(path: "", detail: "symlink target is not PhotoVault data") }
            sealed = s
        }
        do { return try SecretBox.open(sealed, key: keyring.metadataKey, ad: ad) }
        catch { throw StoreError.integrity(path: "", detail: "symlink target failed authentication") }
    }

    /// `open` with the tree's root given by path, opened only for a companion (offline tools).
    public static func open(_ stored: [UInt8], keyring: UserKeyring, treeRoot: String) throws -> [UInt8] {
        guard companionName(ofStored: stored) != nil else { return try open(stored, keyring: keyring, rootFD: -1) }
        let fd = Glibc.open(treeRoot, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(treeRoot)") }
        defer { close(fd) }
        return try open(stored, keyring: keyring, rootFD: fd)
    }
}

/// Extended attributes: the name becomes `user.pv.` + base64url(SIV(name)) in a fixed
/// xattr domain; the value is XChaCha20-Poly1305(metadata key, value, ad = stored name).
public struct XattrCodec: Sendable {
    public static let storedPrefix = "user.pv."
    /// The largest value the mount accepts: the sealed value (nonce, ciphertext, tag) is one
    /// backing xattr, which Linux caps at XATTR_SIZE_MAX (65,536 bytes) on every file system;
    /// the format has no way to split a value. The backing file system may hold less (ext4
    /// without `ea_inode`: all of a file's attributes share one 4 KiB block).
    public static let maxValueSize = 65536 - SecretBox.overhead
    static let domain: [UInt8] = Array("PVxattr".utf8) + [UInt8](repeating: 0, count: 9)
    let names: NameCipher
    let key: SecureBytes

    public init(keyring: UserKeyring) {
        names = keyring.names
        key = keyring.metadataKey
    }

    public func storedName(_ plain: [UInt8]) -> String {
        XattrCodec.storedPrefix + Base64URL.encode(names.seal(plain, domain: XattrCodec.domain))
    }

    /// nil for attributes that are not ours (they are hidden).
    public func plainName(_ stored: String) -> [UInt8]? {
        guard stored.hasPrefix(XattrCodec.storedPrefix),
              let sealed = Base64URL.decode(Array(stored.utf8.dropFirst(XattrCodec.storedPrefix.utf8.count))) else { return nil }
        return try? names.open(sealed, domain: XattrCodec.domain)
    }

    public func sealValue(_ value: [UInt8], storedName: String) -> [UInt8] {
        SecretBox.seal(value, key: key, ad: Array(storedName.utf8))
    }

    public func openValue(_ sealed: [UInt8], storedName: String) throws -> [UInt8] {
        do { return try SecretBox.open(sealed, key: key, ad: Array(storedName.utf8)) }
        catch { throw StoreError.integrity(path: "", detail: "extended attribute failed authentication") }
    }
}
