import Foundation

/// What a mount does about the traces a desktop keeps of the files it shows (docs/PRIVACY.md):
/// thumbnails (`ThumbnailGuard`), the recent-files list (`RecentFiles`) and search indexers
/// (`IndexedFolders`). Owned by the mount daemon: `activate` once the FUSE mount exists,
/// `locked` at every lock, `deactivate` after the unmount; then a short-lived process outlives
/// the daemon to run `sweep` after the quarantine, when late writers are done.
public final class DesktopPrivacy: @unchecked Sendable {
    /// How long after the unmount the thumbnail cache keeps pointing where nothing can be
    /// saved, and after which the recent-files list is scrubbed once more. Nautilus was seen
    /// writing failure markers of vault photos up to 26 s after a lock.
    public static let defaultQuarantine: Double = 60

    public let paths: PrivacyPaths
    public let vaultPrefixes: [String]
    let thumbnails: ThumbnailGuard?
    private let log: @Sendable (String) -> Void

    /// nil when neither XDG_CACHE_HOME nor HOME names a place (nothing to guard).
    public init?(mountpoint: String, given: String?, environment: [String: String] = ProcessInfo.processInfo.environment,
                 thumbnails: Bool, probe: @escaping ThumbnailGuard.MountProbe, log: @escaping @Sendable (String) -> Void) {
        guard let p = PrivacyPaths(environment: environment) else { return nil }
        paths = p
        let guardian = ThumbnailGuard(paths: p, mountpoint: mountpoint, given: given, probe: probe, log: log)
        vaultPrefixes = guardian.vaultPrefixes
        self.thumbnails = thumbnails ? guardian : nil
        self.log = log
    }

    /// Whether the vault's thumbnail names are wanted (for `activate`).
    public var wantsVaultNames: Bool { thumbnails != nil }

    /// `names`: the thumbnail names of the vault's entries (`VaultNames.add`).
    public func activate(names: VaultNames = VaultNames()) {
        if names.truncated {
            log("private thumbnails: only the first \(names.entries) entries of the vault were named; older thumbnails of the others are found by Thumb::URI only")
        }
        thumbnails?.activate(names: names)
    }

    /// A lock (the vault may stay mounted, `--on-lock stay`): the recent-files lists lose
    /// their vault entries now.
    public func locked() {
        scrubRecentFiles(when: "at the lock")
    }

    /// After the unmount: purges what can be purged now and returns what the sweep needs.
    public func deactivate() -> SweepPlan {
        let names = thumbnails?.deactivate(restoreNow: false) ?? VaultNames()
        scrubRecentFiles(when: "at the unmount")
        return SweepPlan(thumbnails: thumbnails != nil, names: names.names)
    }

    /// After the quarantine, in the process that outlived the daemon.
    public func sweep(_ plan: SweepPlan) {
        if let g = thumbnails, plan.thumbnails {
            let removed = g.sweep(names: plan.names)
            if !removed.isEmpty { log("private thumbnails: removed \(removed.count) vault thumbnail(s) written after the unmount") }
        }
        scrubRecentFiles(when: "after the quarantine")
    }

    /// When the sweep cannot be handed to another process: the cache is restored now.
    public func restoreNow(_ plan: SweepPlan) {
        thumbnails?.deactivate(restoreNow: true)
        sweep(plan)
    }

    private func scrubRecentFiles(when: String) {
        for f in paths.recentFiles {
            let r = RecentFiles.scrub(file: f, vaultPrefixes: vaultPrefixes)
            if r.removed > 0 { log("recent files: removed \(r.removed) vault entr\(r.removed == 1 ? "y" : "ies") from \(f) \(when)") }
            if let why = r.failure { log("recent files: could not scrub \(f) \(when): \(why)") }
        }
    }

    /// What the sweep process is handed (on its stdin): whether thumbnails are guarded, and
    /// the thumbnail names of the vault's files. No file name of the vault is in it.
    public struct SweepPlan: Equatable, Sendable {
        public var thumbnails: Bool
        public var names: Set<String>

        public init(thumbnails: Bool, names: Set<String>) {
            self.thumbnails = thumbnails
            self.names = names
        }

        public var encoded: [UInt8] {
            Array(((thumbnails ? "thumbnails\n" : "no-thumbnails\n") + names.sorted().map { $0 + "\n" }.joined()).utf8)
        }

        public init(decoding bytes: [UInt8]) {
            let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
            thumbnails = lines.first == "thumbnails"
            names = Set(lines.dropFirst().filter { $0.count == 32 && $0.allSatisfy(\.isHexDigit) })
        }
    }
}
