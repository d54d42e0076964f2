import Glibc
import CLinux

/// Removes the entries naming vault files from the recent-files lists GTK and GLib keep
/// (`$XDG_DATA_HOME/recently-used.xbel`, XBEL: one `<bookmark href="file:///...">` element per
/// file an application opened). eog, Ristretto and every GtkFileChooser add vault photos there.
///
/// The file is shared with every GTK application of the session, each of which rewrites it
/// whole (temp file and rename) from its own copy, so it is rewritten here the same way, and
/// never over a version this scrub did not read: the new file is swapped in with
/// `renameat2(RENAME_EXCHANGE)`, and if what came out is not the file that was read (an
/// application replaced it meanwhile), the swap is undone and the scrub starts again from
/// that application's version. An application's entry is thus never lost; one that wrote from
/// a copy it read before the scrub may bring vault entries back, which the next scrub (after
/// the quarantine) removes.
public enum RecentFiles {
    public struct Result: Equatable, Sendable {
        public var removed = 0
        public var failure: String? = nil
    }

    /// Scrubs `file` of every bookmark whose `href` is a `file:` URI at or under one of
    /// `vaultPrefixes`. A missing file, or one that is not a regular file, is left alone.
    public static func scrub(file: String, vaultPrefixes: [String]) -> Result {
        let fd = pv_open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)
        guard fd >= 0 else { return Result() }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, let text = readAll(fd) else {
            close(fd); return Result()
        }
        let (kept, removed) = filter(text, vaultPrefixes: vaultPrefixes)
        if removed == 0 { close(fd); return Result() }
        return replace(file, heldFD: fd, mode: st.st_mode & 0o7777, with: kept, vaultPrefixes: vaultPrefixes, removed: removed)
    }

    /// Puts the scrubbed list in place without losing what an application writes meanwhile.
    /// The file read (`heldFD`) is held open, so its inode cannot be freed and handed to an
    /// application's next temp file, which would then pass for it. Just before the swap the
    /// list is checked to still be that file; if an application replaced it, its version is
    /// read and scrubbed instead. The swap is a `renameat2(RENAME_EXCHANGE)`, and if what
    /// comes out is still not the file expected (an application renamed in the microseconds
    /// between check and swap), it is swapped straight back and the scrub starts again from
    /// it. An application that reads the list in the microseconds our version is in place and
    /// writes later builds on ours; nothing else can lose one of its entries.
    static func replace(_ file: String, heldFD: Int32, mode: mode_t, with first: [UInt8],
                        vaultPrefixes: [String], removed: Int) -> Result {
        let dir = PrivacyPaths.dirname(file)
        let base = file.split(separator: "/").last.map(String.init) ?? file
        var expected = heldFD          // the file we expect to find in place
        var ours = first
        var removedTotal = removed
        var aside: String? = nil       // an application's version swapped out, merged into ours
        var carried: [UInt8] = Array("<xbel>\n</xbel>".utf8)   // entries only `aside` holds
        defer { close(expected) }
        func sameFile(_ a: stat, _ b: stat) -> Bool { a.st_ino == b.st_ino && a.st_dev == b.st_dev }
        /// The application's version in place now becomes the one expected, and ours is made
        /// again from it (with what only a swapped-out version held). False if it cannot be read.
        func startFromTheirs() -> Bool {
            let fd = pv_open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)
            guard fd >= 0, let theirs = readAll(fd) else { if fd >= 0 { close(fd) }; return false }
            let (kept, n) = filter(theirs, vaultPrefixes: vaultPrefixes)
            removedTotal += n
            ours = merge(carried, into: kept)
            close(expected)
            expected = fd
            return true
        }
        for _ in 0..<50 {
            var template = Array((PrivacyPaths.join(dir, "." + base + ".pvtmp-XXXXXX")).utf8CString)
            let tfd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            guard tfd >= 0 else { break }
            let temp = String(cString: template)
            fchmod(tfd, mode)
            guard writeAll(tfd, ours), fsync(tfd) == 0 else { close(tfd); unlink(temp); break }
            var want = stat(), now = stat()
            fstat(expected, &want)
            if lstat(file, &now) != 0 || !sameFile(now, want) {
                // Replaced while we wrote: start from the application's version.
                close(tfd); unlink(temp)
                guard startFromTheirs() else { break }
                continue
            }
            guard pv_renameat2(AT_FDCWD, temp, AT_FDCWD, file, UInt32(PV_RENAME_EXCHANGE)) == 0 else {
                close(tfd); unlink(temp); break
            }
            // `temp` now names what was in place.
            var got = stat()
            let outFD = pv_open(temp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)
            if outFD >= 0 && fstat(outFD, &got) == 0 && sameFile(got, want) {
                close(outFD); close(tfd)
                unlink(temp)
                if let a = aside { unlink(a) }
                PrivacyPaths.syncDirectory(dir)
                return Result(removed: removedTotal)
            }
            // An application renamed its version in between: it came out. It goes straight
            // back (applications that read the list meanwhile would build on ours, which
            // lacks its entries), and the scrub starts again from it.
            if outFD >= 0 { close(outFD) }
            _ = pv_renameat2(AT_FDCWD, temp, AT_FDCWD, file, UInt32(PV_RENAME_EXCHANGE))
            var back = stat(), mine = stat()
            fstat(tfd, &mine)
            close(tfd)
            if lstat(temp, &back) == 0 && sameFile(back, mine) {
                unlink(temp)
            } else if let fd = Optional(pv_open(temp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)), fd >= 0 {
                // Yet another version was renamed in the microseconds between: keep its entries.
                let (kept, n) = filter(readAll(fd) ?? [], vaultPrefixes: vaultPrefixes)
                close(fd)
                removedTotal += n
                carried = merge(kept, into: carried)
                if let a = aside { unlink(a) }
                aside = temp
            }
            guard startFromTheirs() else { break }
        }
        // Given up: the last application version swapped out goes back in place.
        if let a = aside { _ = pv_renameat2(AT_FDCWD, a, AT_FDCWD, file, UInt32(PV_RENAME_EXCHANGE)); unlink(a) }
        return Result(removed: 0, failure: "\(file) kept changing while it was scrubbed")
    }

    /// `ours` plus every bookmark of `theirs` whose href `ours` lacks (before `</xbel>`).
    static func merge(_ theirs: [UInt8], into ours: [UInt8]) -> [UInt8] {
        let have = Set(bookmarks(in: ours).map(\.href))
        var add: [UInt8] = []
        for b in bookmarks(in: theirs) where !have.contains(b.href) { add += theirs[b.range] }
        guard !add.isEmpty, let close = lastIndex(of: Array("</xbel>".utf8), in: ours) else { return ours }
        var start = close
        while start > 0, ours[start - 1] == 0x20 || ours[start - 1] == 0x09 { start -= 1 }
        let lineStart = start == 0 || ours[start - 1] == 0x0a
        let at = lineStart ? start : close
        return Array(ours[..<at]) + (lineStart ? [] : [0x0a]) + add + Array(ours[at...])
    }

    /// The XBEL text without the `<bookmark>` elements naming vault files (and the line each
    /// stood on), and how many were removed. Everything else is kept byte for byte.
    public static func filter(_ text: [UInt8], vaultPrefixes: [String]) -> (kept: [UInt8], removed: Int) {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var i = 0, removed = 0
        for b in bookmarks(in: text) {
            guard let path = ThumbnailPurge.localPath(ofURI: b.href), ThumbnailPurge.isUnder(path, vaultPrefixes) else { continue }
            out += text[i..<b.range.lowerBound]
            i = b.range.upperBound
            removed += 1
        }
        out += text[i...]
        return (out, removed)
    }

    /// Every `<bookmark>` element: its href (unescaped) and its bytes, with its indentation and
    /// line end when it stands on lines of its own.
    static func bookmarks(in text: [UInt8]) -> [(href: String, range: Range<Int>)] {
        let open = Array("<bookmark".utf8), close = Array("</bookmark>".utf8)
        var out: [(String, Range<Int>)] = []
        var i = 0
        while let s = find(open, in: text, from: i) {
            // `<bookmark ` or `<bookmark\n`, not `<bookmark:applications>`.
            let after = s + open.count
            guard after < text.count, [0x20, 0x09, 0x0a, 0x0d].contains(text[after]) else { i = after; continue }
            guard let tagEnd = text[after...].firstIndex(of: UInt8(ascii: ">")) else { break }
            var end: Int
            if text[tagEnd - 1] == UInt8(ascii: "/") { end = tagEnd + 1 } else {
                guard let c = find(close, in: text, from: tagEnd) else { break }
                end = c + close.count
            }
            i = end
            guard let href = attribute("href", in: Array(text[s...tagEnd])) else { continue }
            var start = s
            while start > 0, text[start - 1] == 0x20 || text[start - 1] == 0x09 { start -= 1 }
            if start == 0 || text[start - 1] == 0x0a {
                if end < text.count, text[end] == 0x0a { end += 1 }
            } else {
                start = s
            }
            out.append((href, start..<end))
            i = end
        }
        return out
    }

    static func lastIndex(of needle: [UInt8], in hay: [UInt8]) -> Int? {
        var i = hay.count - needle.count
        while i >= 0 {
            if hay[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i -= 1
        }
        return nil
    }

    /// The unescaped value of `name="..."` (or single quotes) in a start tag.
    static func attribute(_ name: String, in tag: [UInt8]) -> String? {
        let key = Array((name + "=").utf8)
        var from = 0
        while let k = find(key, in: tag, from: from) {
            from = k + key.count
            // A whole attribute name: preceded by white space.
            guard k > 0, [0x20, 0x09, 0x0a, 0x0d].contains(tag[k - 1]), from < tag.count else { continue }
            let q = tag[from]
            guard q == UInt8(ascii: "\"") || q == UInt8(ascii: "'"),
                  let e = tag[(from + 1)...].firstIndex(of: q) else { return nil }
            return unescapeXML(String(decoding: tag[(from + 1)..<e], as: UTF8.self))
        }
        return nil
    }

    static func unescapeXML(_ s: String) -> String {
        guard s.contains("&") else { return s }
        var out = "", rest = Substring(s)
        while let a = rest.firstIndex(of: "&") {
            out += rest[..<a]
            guard let semi = rest[a...].firstIndex(of: ";") else { out += rest[a...]; return out }
            let entity = rest[rest.index(after: a)..<semi]
            switch entity {
            case "amp": out += "&"
            case "lt": out += "<"
            case "gt": out += ">"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                var scalar: UInt32?
                if entity.hasPrefix("#x") { scalar = UInt32(entity.dropFirst(2), radix: 16) }
                else if entity.hasPrefix("#") { scalar = UInt32(entity.dropFirst(1)) }
                if let v = scalar, let u = Unicode.Scalar(v) { out.unicodeScalars.append(u) } else { out += rest[a...semi] }
            }
            rest = rest[rest.index(after: semi)...]
        }
        return out + rest
    }

    static func find(_ needle: [UInt8], in hay: [UInt8], from: Int) -> Int? {
        guard needle.count <= hay.count else { return nil }
        var i = from
        while i + needle.count <= hay.count {
            if hay[i] == needle[0] && hay[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    static func readAll(_ fd: Int32) -> [UInt8]? {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return out }
            out += buf[0..<n]
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            done += n
        }
        return true
    }
}
