import Glibc
import Synchronization
import PhotoVaultCrypto

/// Which chunks of a file are holes (FORMAT.md section 5, "Holes"): sorted, disjoint,
/// non-adjacent half-open ranges of chunk indices. A chunk whose slot underneath is all
/// zeros reads as zeros only when it is in the map; anywhere else such a chunk fails
/// authentication (EIO), so zeroing or punching written ciphertext never reads as zeros.
public struct HoleMap: Sendable, Equatable {
    public private(set) var ranges: [Range<UInt64>] = []

    public init(_ ranges: [Range<UInt64>] = []) {
        for r in ranges { insert(r) }
    }

    public var isEmpty: Bool { ranges.isEmpty }

    /// Index of the first range whose end is above `chunk` (binary search).
    private func firstEnding(after chunk: UInt64) -> Int {
        var lo = 0, hi = ranges.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if ranges[mid].upperBound <= chunk { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// The hole holding `chunk`, if any.
    public func hole(containing chunk: UInt64) -> Range<UInt64>? {
        let i = firstEnding(after: chunk)
        return i < ranges.count && ranges[i].lowerBound <= chunk ? ranges[i] : nil
    }

    public func contains(_ chunk: UInt64) -> Bool { hole(containing: chunk) != nil }

    /// The first hole that starts at or after `chunk`.
    public func firstHole(startingAtOrAfter chunk: UInt64) -> Range<UInt64>? {
        let i = firstEnding(after: chunk)
        guard i < ranges.count else { return nil }
        if ranges[i].lowerBound >= chunk { return ranges[i] }
        return i + 1 < ranges.count ? ranges[i + 1] : nil
    }

    /// Whether any chunk of `r` is in the map.
    public func overlaps(_ r: Range<UInt64>) -> Bool {
        guard !r.isEmpty else { return false }
        let i = firstEnding(after: r.lowerBound)
        return i < ranges.count && ranges[i].lowerBound < r.upperBound
    }

    /// Adds `r`, merging with the holes it touches.
    public mutating func insert(_ r: Range<UInt64>) {
        guard !r.isEmpty else { return }
        var lo = r.lowerBound, hi = r.upperBound
        // Ranges ending before `lo` stay; so do ranges starting after `hi`.
        let start = firstEnding(after: lo == 0 ? 0 : lo - 1)
        var end = start
        while end < ranges.count && ranges[end].lowerBound <= hi {
            lo = min(lo, ranges[end].lowerBound)
            hi = max(hi, ranges[end].upperBound)
            end += 1
        }
        ranges.replaceSubrange(start..<end, with: [lo..<hi])
    }

    /// Removes `r` (chunks written with data). Whether anything was removed.
    @discardableResult
    public mutating func remove(_ r: Range<UInt64>) -> Bool {
        guard overlaps(r) else { return false }
        let start = firstEnding(after: r.lowerBound)
        var end = start
        var kept: [Range<UInt64>] = []
        while end < ranges.count && ranges[end].lowerBound < r.upperBound {
            let h = ranges[end]
            if h.lowerBound < r.lowerBound { kept.append(h.lowerBound..<r.lowerBound) }
            if h.upperBound > r.upperBound { kept.append(r.upperBound..<h.upperBound) }
            end += 1
        }
        ranges.replaceSubrange(start..<end, with: kept)
        return true
    }

    /// Drops every chunk from `chunks` on (a truncate down). Whether anything was dropped.
    @discardableResult
    public mutating func cut(toChunks chunks: UInt64) -> Bool {
        remove(chunks..<UInt64.max)
    }
}

/// The sealed companion that holds a file's `HoleMap`: `~<32 hex file ID>.holes` in the
/// tree's root (beside the long symlink targets, so that renames and hard links leave it
/// valid). FORMAT.md section 5:
///
///   "PVH\x01" || file ID (16) || XChaCha20-Poly1305(KDF(file key, 1, "PVholes1"),
///       u8 state || u32 LE n || n × (u64 LE first, u64 LE end), ad = the first 20 bytes)
///
/// `state` is 1 ("clean") when the map is exact, 0 ("may hold written chunks") while a
/// mount that filled holes has not yet saved their removal; a reader then drops from the
/// map every chunk whose slot is not all zeros (`ContentFile`). Additions are saved (temp
/// file, fsync, rename, directory fsync) before the holes they name exist.
public enum HoleMapFile {
    public static let magic: [UInt8] = Array("PVH".utf8) + [1]
    public static let suffix = ".holes"
    static let kdfContext = "PVholes1"
    /// More ranges than any file can have (one per two chunks of a 4 EiB file is far more):
    /// a bound on what a forged companion makes a reader allocate.
    static let maxRanges = 1 << 24
    static let limit = 20 + SecretBox.overhead + 5 + maxRanges * 16

    public static func name(fileID: [UInt8]) -> String {
        NameCodec.longPrefix + Base64Hex.hex(fileID) + suffix
    }

    /// Whether `entry` of a tree's root is a hole map (internal, never shown).
    public static func isCompanion(_ entry: String) -> Bool {
        entry.utf8.count == 1 + 32 + suffix.utf8.count && entry.hasPrefix(NameCodec.longPrefix) && entry.hasSuffix(suffix)
            && Base64Hex.unhex(String(entry.dropFirst().dropLast(suffix.count))) != nil
    }

    /// The file ID a hole map's name carries, for fsck's orphan check.
    public static func fileID(ofCompanion entry: String) -> [UInt8]? {
        guard isCompanion(entry) else { return nil }
        return Base64Hex.unhex(String(entry.dropFirst().dropLast(suffix.count)))
    }

    static func key(fileKey: SecureBytes) throws -> SecureBytes {
        do { return try SubkeyDerivation.derive(from: fileKey, id: 1, context: kdfContext) }
        catch { throw StoreError.keyMemoryNotLocked }
    }

    public static func seal(_ map: HoleMap, clean: Bool, fileID: [UInt8], fileKey: SecureBytes) throws -> [UInt8] {
        var plain: [UInt8] = [clean ? 1 : 0]
        appendLE(UInt32(map.ranges.count), to: &plain)
        for r in map.ranges { appendLE(r.lowerBound, to: &plain); appendLE(r.upperBound, to: &plain) }
        let ad = magic + fileID
        let k = try key(fileKey: fileKey)
        defer { k.wipe() }
        return ad + SecretBox.seal(plain, key: k, ad: ad)
    }

    /// The map and whether it is exact. `.integrity` for anything that fails authentication
    /// or is misshapen (a reader then answers EIO).
    public static func open(_ bytes: [UInt8], fileID: [UInt8], fileKey: SecureBytes) throws -> (map: HoleMap, clean: Bool) {
        let ad = magic + fileID
        guard bytes.count > ad.count, Array(bytes[0..<ad.count]) == ad else {
            throw StoreError.integrity(path: "", detail: "hole map is not this file's")
        }
        let k = try key(fileKey: fileKey)
        defer { k.wipe() }
        let plain: [UInt8]
        do { plain = try SecretBox.open(Array(bytes[ad.count...]), key: k, ad: ad) }
        catch { throw StoreError.integrity(path: "", detail: "hole map failed authentication") }
        guard plain.count >= 5, plain[0] <= 1 else { throw StoreError.integrity(path: "", detail: "hole map misshapen") }
        let n = Int(readLE32(plain, 1))
        guard plain.count == 5 + n * 16 else { throw StoreError.integrity(path: "", detail: "hole map misshapen") }
        var map = HoleMap()
        var last: UInt64 = 0
        for i in 0..<n {
            let a = readLE64(plain, 5 + 16 * i), b = readLE64(plain, 13 + 16 * i)
            guard a < b, i == 0 || a > last else { throw StoreError.integrity(path: "", detail: "hole map misshapen") }
            map.insert(a..<b)
            last = b
        }
        return (map, plain[0] == 1)
    }

    /// Reads the map of `fileID` from the tree's root; nil when there is none.
    public static func read(rootFD: Int32, fileID: [UInt8], fileKey: SecureBytes) throws -> (map: HoleMap, clean: Bool)? {
        let bytes: [UInt8]
        do { bytes = try FileIO.readFile(in: rootFD, name: name(fileID: fileID), limit: limit) }
        catch StoreError.io(let e, _) where e == ENOENT { return nil }
        catch StoreError.corruptStore(let d) { throw StoreError.integrity(path: "", detail: "hole map: \(d)") }
        return try open(bytes, fileID: fileID, fileKey: fileKey)
    }

    /// Crash-safe replacement; an empty, clean map removes the companion instead.
    public static func write(_ map: HoleMap, clean: Bool, rootFD: Int32, fileID: [UInt8], fileKey: SecureBytes) throws {
        if map.isEmpty && clean { return remove(rootFD: rootFD, fileID: fileID) }
        try AtomicFile.write(try seal(map, clean: clean, fileID: fileID, fileKey: fileKey), in: rootFD,
                             name: name(fileID: fileID), mode: 0o600)
    }

    public static func remove(rootFD: Int32, fileID: [UInt8]) {
        _ = unlinkat(rootFD, name(fileID: fileID), 0)
    }

    private static func appendLE<T: FixedWidthInteger>(_ v: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
    }
    private static func readLE32(_ b: [UInt8], _ at: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(b[at + $1]) << (8 * $1) }
    }
    private static func readLE64(_ b: [UInt8], _ at: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 | UInt64(b[at + $1]) << (8 * $1) }
    }
}

/// Where a tree's hole maps live: its root directory, open for the life of this value. The
/// mount passes its own root descriptor (not closed here); offline tools open the root once.
public final class HoleMapStore: @unchecked Sendable {
    public let rootFD: Int32
    private let owned: Bool
    private let saved = Atomic<Bool>(false)

    /// For a mount: one listing of the root tells whether any map is there yet, so that
    /// removing a file looks for one only in a tree that has them (`mayHoldMaps`).
    public init(rootFD: Int32) {
        self.rootFD = rootFD
        owned = false
        let any = (try? OfflineSys.list(rootFD))?.contains { HoleMapFile.isCompanion($0.name) } ?? true
        saved.store(any, ordering: .relaxed)
    }

    /// Whether a hole map may exist in this tree (one was there at the start, or saved since).
    public var mayHoldMaps: Bool { saved.load(ordering: .relaxed) }
    func noteSaved() { saved.store(true, ordering: .relaxed) }

    /// Opens `root` (a tree's root directory) for the offline tools.
    public init(opening root: String) throws {
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(root)") }
        rootFD = fd
        owned = true
        saved.store(true, ordering: .relaxed)
    }

    deinit { if owned { close(rootFD) } }
}
