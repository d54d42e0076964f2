import Glibc
import CLinux

/// Finds and deletes thumbnails of vault files in the plaintext cache, two ways:
/// * by name: a thumbnail is `md5(file URI).png`, so a file whose name is the hash of a vault
///   path's URI (computed at the mount from the vault's paths: `VaultNames`) is one, whether or not
///   its PNG says so (pcmanfm writes no `Thumb::URI`; a half-written file has no chunks);
/// * by the `Thumb::URI` text chunk that GNOME's factory and tumbler write into every
///   thumbnail and failure marker: this also finds thumbnails of vault files that are no
///   longer in the vault, whose names nothing can recompute (md5 cannot be inverted).
public enum ThumbnailPurge {
    /// Deletes, under `directories` (walked without following symlinks), every regular file
    /// whose name is `<n>.png` with `n` in `names`, and every PNG whose `Thumb::URI` is a
    /// `file:` URI of a path at or under one of `vaultPrefixes`. Anything else is left alone.
    /// Returns the removed paths.
    public static func purge(directories: [String], vaultPrefixes: [String], names: Set<String> = []) -> [String] {
        var removed: [String] = []
        for d in directories { walk(d, depth: 0) { file in
            if !names.isEmpty, names.contains(stem(of: file)) {
                if unlink(file) == 0 { removed.append(file) }
                return
            }
            guard let uri = thumbnailURI(ofPNGAt: file), let path = localPath(ofURI: uri),
                  isUnder(path, vaultPrefixes) else { return }
            if unlink(file) == 0 { removed.append(file) }
        } }
        return removed
    }

    /// `dir/0123abcd....png` -> `0123abcd...` (temp names such as `x.png.AB12CD` keep their
    /// suffix and do not match: they are renamed to the real name within milliseconds).
    static func stem(of path: String) -> String {
        let base = path.split(separator: "/").last.map(String.init) ?? path
        return base.hasSuffix(".png") ? String(base.dropLast(4)) : base
    }

    /// Whether `path` is one of `prefixes` or inside one.
    public static func isUnder(_ path: String, _ prefixes: [String]) -> Bool {
        prefixes.contains { p in path == p || path.hasPrefix(p == "/" ? p : p + "/") }
    }

    /// The local path of a `file:` URI (`file:///a%20b`, `file://localhost/a`), or nil.
    public static func localPath(ofURI uri: String) -> String? {
        var rest: Substring
        if uri.hasPrefix("file:///") { rest = uri.dropFirst(7) }
        else if uri.hasPrefix("file://localhost/") { rest = uri.dropFirst(16) }
        else { return nil }
        if let q = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<q] }
        guard let decoded = String(rest).removingPercentEncoding else { return nil }
        return normalize(decoded)
    }

    /// Collapses "//", "." and ".." lexically, so a crafted URI cannot hide a vault path.
    /// Never touches the filesystem: resolving symlinks (Foundation's standardizingPath
    /// calls readlink) would send a lookup into the vault, and the purge runs while the
    /// daemon is not answering requests yet (a deadlock) or after it unmounted.
    static func normalize(_ path: String) -> String {
        var parts: [Substring] = []
        for c in path.split(separator: "/", omittingEmptySubsequences: true) {
            if c == "." { continue }
            if c == ".." { if !parts.isEmpty { parts.removeLast() }; continue }
            parts.append(c)
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The `Thumb::URI` of a PNG file (tEXt, or uncompressed iTXt), or nil.
    public static func thumbnailURI(ofPNGAt path: String) -> String? {
        let fd = pv_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        guard let sig = readExactly(fd, 8), sig == [137, 80, 78, 71, 13, 10, 26, 10] else { return nil }
        for _ in 0..<256 {
            guard let head = readExactly(fd, 8) else { return nil }
            let len = Int(head[0]) << 24 | Int(head[1]) << 16 | Int(head[2]) << 8 | Int(head[3])
            let type = String(decoding: head[4..<8], as: UTF8.self)
            if type == "IEND" { return nil }
            if (type == "tEXt" || type == "iTXt") && len <= 1 << 16 {
                guard let body = readExactly(fd, len) else { return nil }
                if let uri = textValue(type: type, body: body, key: "Thumb::URI") { return uri }
                guard lseek(fd, 4, SEEK_CUR) >= 0 else { return nil }
            } else {
                guard lseek(fd, off_t(len + 4), SEEK_CUR) >= 0 else { return nil }
            }
        }
        return nil
    }

    static func textValue(type: String, body: [UInt8], key: String) -> String? {
        guard let z = body.firstIndex(of: 0), String(decoding: body[..<z], as: UTF8.self) == key else { return nil }
        var i = z + 1
        if type == "tEXt" {
            // Latin-1 by the PNG spec; URIs are ASCII.
            return String(body[i...].map { Character(Unicode.Scalar($0)) })
        }
        // iTXt: compression flag, method, language tag\0, translated keyword\0, UTF-8 text.
        guard i + 2 <= body.count, body[i] == 0 else { return nil }
        i += 2
        guard let l = body[i...].firstIndex(of: 0) else { return nil }
        guard let t = body[(l + 1)...].firstIndex(of: 0) else { return nil }
        return String(decoding: body[(t + 1)...], as: UTF8.self)
    }

    static func readExactly(_ fd: Int32, _ n: Int) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: n)
        var got = 0
        while got < n {
            let r = out.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, n - got) }
            if r < 0 && errno == EINTR { continue }
            if r <= 0 { return nil }
            got += r
        }
        return out
    }

    /// Regular files under `dir`, not following symlinks; the standard layout is two levels
    /// deep (`fail/<app>/x.png`), a few more are allowed for odd tools.
    static func walk(_ dir: String, depth: Int, _ body: (String) -> Void) {
        guard depth < 6, let d = opendir(dir) else { return }
        defer { closedir(d) }
        while let e = readdir(d) {
            // Within the record (CLinux): d_name copied whole reads past a short one.
            let name = String(decoding: UnsafeRawBufferPointer(start: pv_dirent_name(e), count: pv_dirent_name_length(e)),
                              as: UTF8.self)
            if name == "." || name == ".." { continue }
            let p = PrivacyPaths.join(dir, name)
            var st = stat()
            guard lstat(p, &st) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFDIR: walk(p, depth: depth + 1, body)
            case S_IFREG: body(p)
            default: continue
            }
        }
    }
}
