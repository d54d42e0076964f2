import Glibc

/// How many plaintext bytes an import or export is about to copy, for a progress display's
/// percentage and time left (`photovault import`/`export` on a terminal). A walk of `lstat`s
/// and directory listings only, no content read, no name decrypted; best effort: what cannot
/// be listed or stat'ed is not counted, and nil means nothing could be.
public enum TransferSize {
    /// Regular-file bytes below the local `sources` (symlinks not followed, except a source
    /// named `P/`, as import follows it).
    public static func local(_ sources: [String]) -> UInt64? {
        var total: UInt64 = 0
        var any = false
        for source in sources where source != "-" {
            var st = stat()
            let rc = Importer.followsLink(source) ? stat(source, &st) : lstat(source, &st)
            guard rc == 0 else { continue }
            any = true
            if OfflineSys.isRegular(st) { total += UInt64(st.st_size) }
            if OfflineSys.isDirectory(st) {
                let fd = open(source, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                if fd >= 0 { total += walk(fd) { _, st in OfflineSys.isRegular(st) ? UInt64(st.st_size) : 0 } }
            }
        }
        return any ? total : nil
    }

    /// Plaintext bytes of the regular files at and below the vault `paths` (sizes from the
    /// ciphertext sizes, as `stat` on the mount reports them).
    public static func vault(_ tree: UserTree, _ paths: [String]) -> UInt64? {
        guard let resolver = try? VaultResolver(tree: tree) else { return nil }
        let size = { (name: String, st: stat) -> UInt64 in
            guard OfflineSys.isRegular(st), !NameCodec.isInternal(name) else { return 0 }
            return tree.layout.reportedSize(ciphertextSize: UInt64(st.st_size))
        }
        var total: UInt64 = 0
        var any = false
        for p in paths {
            guard let path = try? VaultPath(p) else { continue }
            if path.lastName == nil {
                guard let fd = Optional(openat(resolver.root.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)), fd >= 0 else { continue }
                any = true
                total += walk(fd, size)
                continue
            }
            guard let entry = try? resolver.entry(path), let st = try? entry.stat() else { continue }
            any = true
            if OfflineSys.isDirectory(st), let dir = try? resolver.open(entry) {
                let fd = openat(dir.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                if fd >= 0 { total += walk(fd, size) }
            } else {
                total += size(entry.encoded.entry, st)
            }
        }
        return any ? total : nil
    }

    /// Sums `size(name, lstat)` over everything below the open directory `top` (closed
    /// here), depth first with one descriptor per level. An explicit stack, not recursion: a
    /// tree can be nested deeper than a thread's stack holds frames.
    static func walk(_ top: Int32, _ size: (String, stat) -> UInt64) -> UInt64 {
        var total: UInt64 = 0
        var stack: [(fd: Int32, entries: [OfflineSys.Entry], next: Int)] = [(top, (try? OfflineSys.list(top)) ?? [], 0)]
        while let i = stack.indices.last {
            guard stack[i].next < stack[i].entries.count else {
                close(stack[i].fd)
                stack.removeLast()
                continue
            }
            let e = stack[i].entries[stack[i].next]
            stack[i].next += 1
            guard let st = try? OfflineSys.lstat(stack[i].fd, e.cName) else { continue }
            if OfflineSys.isDirectory(st) {
                if let sub = try? OfflineSys.openDirectory(stack[i].fd, e.cName) { stack.append((sub, (try? OfflineSys.list(sub)) ?? [], 0)) }
            } else {
                total += size(e.name, st)
            }
        }
        return total
    }
}
