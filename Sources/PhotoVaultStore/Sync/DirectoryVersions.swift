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

    /// Names of the sync-conflict copies of `.pvdir` in the directory, sorted.
    static func copies(in dirfd: Int32) -> [String] {
        guard let entries = try? OfflineSys.list(dirfd) else { return [] }
        // Every engine keeps the copied name's bytes and starts a copy of `.pvdir` with a dot:
        // anything else (every ordinary entry) skips the parse.
        return entries.map(\.name).filter {
            $0 != DirectoryInfo.fileName && $0.hasPrefix(".") && $0.contains("pvdir") && ConflictName.isCopy($0, of: DirectoryInfo.fileName)
        }
    }
}
