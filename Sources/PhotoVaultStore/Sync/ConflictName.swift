/// A copy that a sync engine made of a store entry when two devices changed it at once
/// (docs/SYNC.md). Engines name the copy after the entry, with a marker of their own:
///
///   Syncthing  `NAME.sync-conflict-YYYYMMDD-HHMMSS-DEVICE7` + EXT (EXT: from NAME's last dot,
///              so `.pvdir` gives `.sync-conflict-…-DEVICE7.pvdir`; a name without a dot just
///              gets the marker appended)
///   Nextcloud  `NAME (conflicted copy [USER ]YYYY-MM-DD HHMMSS)` + EXT
///   ownCloud   `NAME_conflict-YYYYMMDD-HHMMSS` + EXT
///   Dropbox    `NAME (HOST's conflicted copy YYYY-MM-DD[ (N)])` + EXT
///   rclone     `NAME.conflictN` (bisync, rclone 1.64 on), `NAME..path1`, `NAME..path2` (older)
///
/// Store entries are base64url (no dot), so EXT is empty for them; it matters for `.pvdir`,
/// companions (`~HASH.name`) and account records (`HEX.rec`). A copy of a copy is a
/// conflict of the copy: `parse` peels one marker, `root` all of them.
public struct ConflictName: Equatable, Sendable {
    public enum Engine: String, Sendable { case syncthing, nextcloud, owncloud, dropbox, rclone }

    public let engine: Engine
    /// The name the engine copied (one marker removed).
    public let original: String
    /// What the view shows between parentheses: `conflict 2026-12-07 030224`.
    public let mark: String

    /// The entry's marker, if it has one of the patterns above; nil otherwise.
    public static func parse(_ entry: String) -> ConflictName? {
        let b = Array(entry.utf8)
        return syncthing(b) ?? nextcloud(b) ?? owncloud(b) ?? dropbox(b) ?? rclone(b)
    }

    /// The name under every marker (a conflict copy of a conflict copy), and the marks from
    /// the outermost in; nil if `entry` carries no marker.
    public static func root(_ entry: String) -> (original: String, marks: [ConflictName])? {
        var marks: [ConflictName] = []
        var name = entry
        while let c = parse(name), marks.count < 8 {
            marks.append(c)
            name = c.original
        }
        return marks.isEmpty ? nil : (name, marks)
    }

    /// Whether `entry` is an engine's copy of the file named `original` (any depth).
    public static func isCopy(_ entry: String, of original: String) -> Bool {
        root(entry)?.original == original
    }

    /// The plaintext name a conflict copy of `plain` is shown under: the mark before the
    /// extension, so that file managers and thumbnailers still know the type
    /// (`IMG_0001.jpg` → `IMG_0001 (conflict 2026-12-07 030224).jpg`). Several marks (a copy
    /// of a copy) are joined with `; `. A result over 255 bytes loses the end of the base
    /// name (at a character boundary), never the mark or the extension.
    public static func displayName(_ plain: [UInt8], marks: [String]) -> [UInt8] {
        let dot = plain.lastIndex(of: UInt8(ascii: "."))
        // A leading dot (`.hidden`) is no extension; nor is a long tail (not a type).
        let split = dot.flatMap { $0 > 0 && plain.count - $0 <= 16 ? $0 : nil } ?? plain.count
        var base = Array(plain[..<split])
        let ext = Array(plain[split...])
        let tag = Array(" (\(marks.joined(separator: "; ")))".utf8)
        let room = 255 - tag.count - ext.count
        if base.count > room {
            base = Array(base[..<max(0, room)])
            while let last = base.last, last & 0xC0 == 0x80 { base.removeLast() }   // continuation bytes
            if let last = base.last, last >= 0xC0 { base.removeLast() }               // a lead byte left alone
        }
        return base + tag + ext
    }

    /// Whether a plaintext name could be a conflict copy's display name (a lookup then
    /// searches the directory's copies for it).
    public static func mayBeDisplayName(_ plain: [UInt8]) -> Bool {
        let needle = Array(" (conflict".utf8)
        guard plain.count > needle.count else { return false }
        for i in 0...(plain.count - needle.count) where plain[i] == needle[0] && Array(plain[i..<i + needle.count]) == needle {
            return true
        }
        return false
    }

    // MARK: - Patterns

    private static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
    private static func digits(_ b: [UInt8], _ at: Int, _ n: Int) -> Bool {
        at >= 0 && at + n <= b.count && b[at..<at + n].allSatisfy(isDigit)
    }
    private static func text(_ b: ArraySlice<UInt8>) -> String { String(decoding: b, as: UTF8.self) }
    private static func find(_ needle: String, in b: [UInt8], from: Int = 0) -> [Int] {
        let n = Array(needle.utf8)
        guard b.count >= n.count, from <= b.count - n.count else { return [] }
        return (from...(b.count - n.count)).filter { b[$0] == n[0] && Array(b[$0..<$0 + n.count]) == n }
    }
    /// What follows a marker must be the copied name's extension: empty, or one dot and no other.
    private static func isExtension(_ rest: ArraySlice<UInt8>) -> Bool {
        rest.isEmpty || (rest.first == UInt8(ascii: ".") && !rest.dropFirst().contains(UInt8(ascii: ".")))
    }
    /// `YYYYMMDD` + `-` + `HHMMSS` at `at` → `YYYY-MM-DD HHMMSS`.
    private static func compactStamp(_ b: [UInt8], _ at: Int) -> String? {
        guard digits(b, at, 8), at + 15 <= b.count, b[at + 8] == UInt8(ascii: "-"), digits(b, at + 9, 6) else { return nil }
        return "\(text(b[at..<at + 4]))-\(text(b[at + 4..<at + 6]))-\(text(b[at + 6..<at + 8])) \(text(b[at + 9..<at + 15]))"
    }
    /// `YYYY-MM-DD` at `at`.
    private static func isDate(_ b: [UInt8], _ at: Int) -> Bool {
        digits(b, at, 4) && at + 10 <= b.count && b[at + 4] == UInt8(ascii: "-") && digits(b, at + 5, 2)
            && b[at + 7] == UInt8(ascii: "-") && digits(b, at + 8, 2)
    }

    private static func syncthing(_ b: [UInt8]) -> ConflictName? {
        let marker = ".sync-conflict-"
        for at in find(marker, in: b).reversed() {
            let s = at + marker.utf8.count
            guard let stamp = compactStamp(b, s), s + 23 <= b.count, b[s + 15] == UInt8(ascii: "-"),
                  b[(s + 16)..<(s + 23)].allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x32 && $0 <= 0x37) }),
                  isExtension(b[(s + 23)...]), at > 0 || s + 23 < b.count else { continue }
            return ConflictName(engine: .syncthing, original: text(b[..<at]) + text(b[(s + 23)...]), mark: "conflict " + stamp)
        }
        return nil
    }

    private static func nextcloud(_ b: [UInt8]) -> ConflictName? {
        let marker = " (conflicted copy "
        for at in find(marker, in: b).reversed() {
            let s = at + marker.utf8.count
            guard let close = b[s...].firstIndex(of: UInt8(ascii: ")")), close - s >= 17 else { continue }
            let d = close - 17   // `YYYY-MM-DD HHMMSS` ends the parentheses, a user name may precede it
            guard isDate(b, d), b[d + 10] == UInt8(ascii: " "), digits(b, d + 11, 6), d == s || b[d - 1] == UInt8(ascii: " "),
                  isExtension(b[(close + 1)...]), at > 0 || close + 1 < b.count else { continue }
            return ConflictName(engine: .nextcloud, original: text(b[..<at]) + text(b[(close + 1)...]),
                                mark: "conflict \(text(b[d..<d + 10])) \(text(b[(d + 11)..<(d + 17)]))")
        }
        return nil
    }

    private static func owncloud(_ b: [UInt8]) -> ConflictName? {
        let marker = "_conflict-"
        for at in find(marker, in: b).reversed() {
            let s = at + marker.utf8.count
            guard let stamp = compactStamp(b, s), isExtension(b[(s + 15)...]), at > 0 || s + 15 < b.count else { continue }
            return ConflictName(engine: .owncloud, original: text(b[..<at]) + text(b[(s + 15)...]), mark: "conflict " + stamp)
        }
        return nil
    }

    private static func dropbox(_ b: [UInt8]) -> ConflictName? {
        let marker = "'s conflicted copy "
        for at in find(marker, in: b).reversed() {
            let s = at + marker.utf8.count
            guard isDate(b, s), let open = find(" (", in: Array(b[..<at])).last else { continue }
            var e = s + 10
            var number = ""
            if e + 1 < b.count, b[e] == UInt8(ascii: " "), b[e + 1] == UInt8(ascii: "("),
               let close = b[(e + 2)...].firstIndex(of: UInt8(ascii: ")")), close > e + 2, b[(e + 2)..<close].allSatisfy(isDigit) {
                number = " " + text(b[(e + 2)..<close])
                e = close + 1
            }
            guard e < b.count, b[e] == UInt8(ascii: ")"), isExtension(b[(e + 1)...]), open > 0 || e + 1 < b.count else { continue }
            let host = text(b[(open + 2)..<at])
            return ConflictName(engine: .dropbox, original: text(b[..<open]) + text(b[(e + 1)...]),
                                mark: "conflict \(host) \(text(b[s..<s + 10]))\(number)")
        }
        return nil
    }

    private static func rclone(_ b: [UInt8]) -> ConflictName? {
        for path in ["..path1", "..path2"] where b.count > path.utf8.count && b.suffix(path.utf8.count).elementsEqual(path.utf8) {
            return ConflictName(engine: .rclone, original: text(b.dropLast(path.utf8.count)), mark: "conflict " + path.dropFirst(2))
        }
        let marker = ".conflict"
        if let at = find(marker, in: b).last, at > 0, at + marker.utf8.count < b.count,
           b[(at + marker.utf8.count)...].allSatisfy(isDigit) {
            return ConflictName(engine: .rclone, original: text(b[..<at]), mark: "conflict " + text(b[(at + marker.utf8.count)...]))
        }
        return nil
    }
}

/// Files sync engines and desktops leave in a synced folder (docs/SYNC.md): temp files of a
/// transfer in progress, engine markers, lock files, folder metadata. Never PhotoVault
/// entries, never shown by the view, never deleted by it or by fsck (which reports them as
/// foreign): they belong to the engine.
public enum SyncDebris {
    public static func matches(_ entry: String) -> Bool {
        // Every pattern has a dot; store entries (base64url, `~hash`) have none. Listings
        // call this for every entry.
        guard entry.utf8.contains(UInt8(ascii: ".")) else { return false }
        if exact.contains(entry) { return true }
        if entry.hasPrefix(".syncthing.") && entry.hasSuffix(".tmp") { return true }   // Syncthing, a transfer
        if entry.hasPrefix("~") && entry.hasSuffix(".tmp") { return true }             // Office, editors
        if entry.hasPrefix(".~lock.") { return true }                                   // LibreOffice
        if entry.hasPrefix(".sync_") && entry.contains(".db") { return true }           // Nextcloud/ownCloud journal
        if entry.hasPrefix(".owncloudsync.log") || entry.hasPrefix(".nextcloudsync.log") { return true }
        if entry.hasSuffix(".partial") { return true }                                  // rclone, a transfer
        return false
    }

    static let exact: Set<String> = [
        ".stfolder", ".stignore", ".stversions",            // Syncthing
        ".dropbox", ".dropbox.attr", ".dropbox.cache",     // Dropbox
        "desktop.ini", "Thumbs.db", ".DS_Store", ".directory",
    ]
}
