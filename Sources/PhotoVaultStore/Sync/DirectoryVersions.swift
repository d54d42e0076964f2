import Glibc
import PhotoVaultCrypto

/// A directory's `.pvdir` together with the copies a sync engine made of it when two
/// devices wrote it at once (`.sync-conflict-…-DEV.pvdir`, `.pvdir (conflicted copy …)`,
/// `.pvdir..path1`; docs/SYNC.md). Directories made by an older photovault got a random ID
/// on each device, so the same folder created on two devices has two IDs, and each device's
/// names decrypt only under its own: reading names under every version that is present
/// keeps every photo in the view. New entries are written under one of them, `.pvdir` itself.
enum DirectoryVersions {
    /// `.pvdir` with the IDs of its copies as `alternateIDs`. Without a `.pvdir` (rclone
    /// bisync renames both sides' versions to `..path1` and `..path2`) the first copy in
    /// name order stands in for it. A copy that does not authenticate adds nothing (fsck
    /// reports it); `.pvdir`'s own errors are thrown as before.
    static func read(dirfd: Int32, keyring: UserKeyring) throws -> DirectoryInfo {
        var primary: DirectoryInfo?
        var primaryError: Error?
        do { primary = try DirectoryInfo.readFile(dirfd: dirfd, keyring: keyring) } catch { primaryError = error }
        var others: [DirectoryInfo] = []
        for name in copies(in: dirfd) {
            if let info = try? DirectoryInfo.readFile(dirfd: dirfd, name: name, keyring: keyring) { others.append(info) }
        }
        if primary == nil {
            // Only a missing `.pvdir` is replaced by a copy: a damaged one stays an error.
            guard case StoreError.integrity(_, let d)? = primaryError, d == DirectoryInfo.missingDetail, !others.isEmpty else {
                throw primaryError!
            }
            primary = others.removeFirst()
        }
        var info = primary!
        for o in others where o.id != info.id && !info.alternateIDs.contains(o.id) { info.alternateIDs.append(o.id) }
        return info
    }

    /// Names of the sync-conflict copies of `.pvdir` in the directory, sorted. Every mount's
    /// naming load runs this over the whole directory, so it stays a bare readdir pass: no
    /// string is made of an entry that does not start with a dot (no store entry does), and
    /// only those containing `pvdir` go through the parser. (Listing through `OfflineSys.list`
    /// here nearly doubled the daemon's CPU for `ls -lR`: 0.07-0.11 s became 0.14-0.18 s.)
    static func copies(in dirfd: Int32) -> [String] {
        let dup = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dup >= 0 else { return [] }
        guard let dir = fdopendir(dup) else { close(dup); return [] }
        defer { closedir(dir) }
        var out: [String] = []
        while let e = readdir(dir) {
            let name: String? = withUnsafePointer(to: &e.pointee.d_name) { p in
                p.withMemoryRebound(to: CChar.self, capacity: 256) { c in
                    c[0] == 0x2E && c[1] != 0 ? String(cString: c) : nil
                }
            }
            guard let name, name != DirectoryInfo.fileName, name.contains("pvdir"),
                  ConflictName.isCopy(name, of: DirectoryInfo.fileName) else { continue }
            out.append(name)
        }
        return out.sorted()
    }
}
