import Foundation

/// Desktop search indexers and the folders they index (docs/PRIVACY.md, "Search indexers").
///
/// Measured with tracker-miner-fs 3.4 (Debian 12): a mount below an indexed folder
/// (`~/Pictures/Vault`) is not descended into, and neither is a tmpfs there: mountpoints are
/// not crawled. But a vault mounted *as* an indexed folder (`~/Pictures`, the XDG pictures
/// directory) is indexed like any other, names and photo metadata included, and a
/// `.trackerignore` at its root does not stop it (content markers only apply below a root).
/// Nothing the mount could show keeps it out then, so `photovault mount` warns.
public enum IndexedFolders {
    /// The XDG user directories tracker-miner-fs 3 indexes recursively by default
    /// (`index-recursive-directories`: &DESKTOP, &DOCUMENTS, &MUSIC, &PICTURES, &VIDEOS),
    /// plus the home directory and Downloads (`index-single-directories`: their files only).
    static let recursiveKeys = ["XDG_DESKTOP_DIR", "XDG_DOCUMENTS_DIR", "XDG_MUSIC_DIR", "XDG_PICTURES_DIR", "XDG_VIDEOS_DIR"]
    static let singleKeys = ["XDG_DOWNLOAD_DIR"]

    /// Where an indexer's program is installed (Debian: tracker-miner-fs, baloo-kf5).
    static let indexerPrograms = ["/usr/libexec/tracker-miner-fs-3", "/usr/libexec/tracker-miner-fs",
                                  "/usr/bin/baloo_file", "/usr/lib/x86_64-linux-gnu/libexec/baloo_file",
                                  "/usr/lib/aarch64-linux-gnu/libexec/baloo_file"]

    /// A warning when `mountpoint` (canonical) is itself a folder a desktop search indexer
    /// installed here indexes by default, or nil.
    public static func warning(mountpoint: String, environment env: [String: String],
                               installed: (String) -> Bool = { FileManager.default.isExecutableFile(atPath: $0) }) -> String? {
        guard indexerPrograms.contains(where: installed) else { return nil }
        let folders = indexedFolders(environment: env)
        // `mountpoint` is resolved; the folders are as configured (a home reached through a
        // symlink), so they are resolved too (before the mount: nothing looks into the vault).
        guard let hit = folders.first(where: { $0.path == mountpoint || resolved($0.path) == mountpoint }) else { return nil }
        return "\(mountpoint) is a folder desktop search indexes (\(hit.reason)): its index would keep the vault's file "
            + "names and photo details in plaintext; mount the vault in a folder inside it (\(mountpoint)/Vault) or elsewhere"
    }

    static func resolved(_ path: String) -> String? {
        guard let r = realpath(path, nil) else { return nil }
        defer { free(r) }
        return String(cString: r)
    }

    /// The default indexed folders of this user: the XDG user directories (from
    /// `$XDG_CONFIG_HOME/user-dirs.dirs`) and the home directory.
    static func indexedFolders(environment env: [String: String]) -> [(path: String, reason: String)] {
        guard let home = env["HOME"], home.hasPrefix("/") else { return [] }
        var out: [(String, String)] = [(PrivacyPaths.trimSlashes(home), "the home directory")]
        let config = env["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? PrivacyPaths.join(home, ".config")
        guard let text = try? String(contentsOfFile: PrivacyPaths.join(config, "user-dirs.dirs"), encoding: .utf8) else { return out }
        for line in text.split(separator: "\n") {
            let t = line.trimmingCharacters(in: .whitespaces)
            guard !t.hasPrefix("#"), let eq = t.firstIndex(of: "=") else { continue }
            let key = String(t[..<eq])
            guard recursiveKeys.contains(key) || singleKeys.contains(key) else { continue }
            var value = String(t[t.index(after: eq)...])
            if value.hasPrefix("\"") && value.hasSuffix("\"") && value.count >= 2 { value = String(value.dropFirst().dropLast()) }
            if value.hasPrefix("$HOME") { value = home + value.dropFirst(5) }
            guard value.hasPrefix("/") else { continue }
            let path = PrivacyPaths.trimSlashes(value)
            // The home directory itself stands for an unset user directory (xdg-user-dirs).
            if path == PrivacyPaths.trimSlashes(home) { continue }
            out.append((path, "\(key) in user-dirs.dirs"))
        }
        return out
    }
}
