import Glibc

extension UserTree {
    /// Visits the plaintext path (relative to the tree's root, `/`-separated) of every entry
    /// of the tree, directories before their contents, decrypting names as export does.
    /// Entries whose names fail authentication are skipped, as are unreadable directories.
    /// Stops after `maxEntries` entries or at `deadline` (CLOCK_MONOTONIC seconds) and returns
    /// false then. Reads the ciphertext tree directly, without a mount: the mount daemon uses
    /// it before its FUSE mount serves anything (the desktop privacy's thumbnail names).
    public func walkPlainPaths(maxEntries: Int, deadline: Double, _ visit: (String) -> Void) -> Bool {
        guard let root = try? openRoot() else { return true }
        var seen = 0
        return walk(root, prefix: "", depth: 0, seen: &seen, maxEntries: maxEntries, deadline: deadline, visit)
    }

    /// Takes ownership of `fd`.
    private func walk(_ fd: Int32, prefix: String, depth: Int, seen: inout Int, maxEntries: Int, deadline: Double,
                      _ visit: (String) -> Void) -> Bool {
        defer { close(fd) }
        guard let info = try? DirectoryInfo.read(dirfd: fd, keyring: keyring),
              let entries = try? OfflineSys.list(fd) else { return true }
        for e in entries where !NameCodec.isInternal(e.name) {
            seen += 1
            if seen > maxEntries || (seen % 256 == 0 && Self.monotonicSeconds() > deadline) { return false }
            guard let plain = try? names.decode(entry: e.name, in: info, dirfd: fd) else { continue }
            let name = String(decoding: plain, as: UTF8.self)
            let path = prefix.isEmpty ? name : prefix + "/" + name
            visit(path)
            var isDir = e.type == UInt8(DT_DIR)
            if e.type == UInt8(DT_UNKNOWN), let st = try? OfflineSys.lstat(fd, e.cName) { isDir = OfflineSys.isDirectory(st) }
            guard isDir, depth < 256 else { continue }
            let sub = openat(fd, e.cName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard sub >= 0 else { continue }
            if !walk(sub, prefix: path, depth: depth + 1, seen: &seen, maxEntries: maxEntries, deadline: deadline, visit) { return false }
        }
        return true
    }

    static func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
