/// One thing `fsck` found wrong in a user tree.
public struct FsckProblem: Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, CaseIterable {
        /// A directory without `.pvdir`: none of its names can be decrypted.
        case directoryInfoMissing
        /// `.pvdir` of the wrong size, magic or version, or failing its MAC.
        case directoryInfoDamaged
        /// A PhotoVault-looking name (base64url) that fails authentication: renamed or modified.
        case nameUndecryptable
        /// An entry that is not a PhotoVault name at all: sync-tool conflict copies
        /// (`name (conflicted copy).x`, `.sync-conflict-…`), files dropped into the store.
        case foreignEntry
        /// A long name (`~hash`) without its `~hash.name` companion.
        case longNameCompanionMissing
        /// A companion that does not hash to its entry.
        case longNameCompanionMismatch
        /// A companion whose entry does not exist.
        case orphanCompanion
        /// A `.pvtmp-*` file or directory left by an interrupted write.
        case leftoverTemp
        /// A ciphertext file of 1 to 127 bytes.
        case headerTruncated
        /// A header with a wrong magic, version, class or cipher, or failing authentication.
        case headerDamaged
        /// A ciphertext size no valid file has (the last chunk is cut inside).
        case contentTruncated
        /// One or more chunks fail authentication.
        case chunkDamaged
        /// A header whose file ID another file (another inode, not a hard link) also has: a
        /// header copied onto a file that had no chunks yet, so that both files' chunks open
        /// under the same key and ID and can be moved between them undetected. Which of the
        /// two is the copy cannot be told: reported on the one met second, not repaired.
        case fileIDShared
        /// A symlink target that is not PhotoVault data or fails authentication.
        case symlinkDamaged
        /// A `user.pv.*` extended attribute whose name or value fails authentication.
        case xattrDamaged
        /// A FIFO, socket or device node inside the store.
        case unsupportedType
        /// The tree's mount lock `.pvmount` is not a regular file (a FIFO, socket, device,
        /// directory or symlink): every mount of the tree fails until it is moved away.
        case mountLockDamaged
        /// The entry could not be read (I/O error, permission, a locked class key): not
        /// damage, the bytes may be intact. Reported only; repair never moves it.
        case unreadable
        /// A sync engine's conflict copy (docs/SYNC.md): of a file (shown in the view under
        /// the original's name with the engine's mark; both versions' sizes and times are in
        /// the detail), of a folder's `.pvdir` (names are read under both), or of another
        /// internal file. Not damage: fsck exits 0 for it, and repair never moves it.
        case syncConflict
        /// A file a sync engine or desktop leaves in a synced folder (`.stfolder`,
        /// `.syncthing.*.tmp`, `.DS_Store`, `Thumbs.db`, ...): foreign, but not damage. Left
        /// alone by the view and by repair.
        case syncDebris
        /// `--repair` could not move a damaged entry into `/lost+found` (it cannot be created
        /// or opened, or the rename failed): the entry is left in place, the repair went on
        /// with the others. Reported after the entry's damage, with the error.
        case repairFailed
    }

    /// Whether this kind is damage (fsck's exit code 21); sync conflicts and sync debris are
    /// reported, not damage.
    public var isDamage: Bool { kind != .syncConflict && kind != .syncDebris }

    /// Plaintext vault path; when the entry's own name is damaged, the plaintext path of its
    /// directory followed by the ciphertext entry name.
    public let path: String
    /// Path relative to the tree root in the store (ciphertext names), to find it on disk.
    public let storePath: String
    public let kind: Kind
    public let detail: String

    public init(path: String, storePath: String, kind: Kind, detail: String) {
        self.path = path
        self.storePath = storePath
        self.kind = kind
        self.detail = detail
    }

    /// One line, whatever the names hold: a name in the store can contain a newline or a
    /// terminal escape (a foreign file dropped in, or a user's own odd name), which printed
    /// raw would split the report or act on the terminal (see `printable`).
    public var description: String { "\(Self.printable(path)): \(kind.rawValue): \(Self.printable(detail))" }

    /// `s` as every command prints a name (`DisplayText.escape`).
    public static func printable(_ s: String) -> String { DisplayText.escape(s) }
}

/// A change made by `fsck --repair` (the only two kinds it makes).
public enum FsckAction: Equatable, Sendable {
    /// The entry at `storePath` now lives in `/lost+found` under the plaintext name `name`.
    case movedToLostAndFound(storePath: String, name: String)
    /// A leftover temp file or directory was deleted.
    case removedTemp(storePath: String)
    /// An entry in which nothing can be read (`Fsck` says which) now lives in the tree root's
    /// `NameCodec.debrisDirectory` under the store name `name`, out of the mount's view.
    case setAside(storePath: String, name: String)

    /// The store path of the entry acted on.
    public var storePath: String {
        switch self {
        case .movedToLostAndFound(let sp, _), .removedTemp(let sp), .setAside(let sp, _): return sp
        }
    }
}

public struct FsckSummary: Equatable, Sendable {
    public var files = 0
    public var directories = 0
    public var symlinks = 0
    /// FIFOs, sockets and device nodes (made through the mount; nothing to authenticate but
    /// their names).
    public var specialFiles = 0
    /// Plaintext bytes whose chunks were authenticated.
    public var bytesChecked: UInt64 = 0
    public var chunksChecked: UInt64 = 0
    public var problems: [FsckProblem] = []
    public var actions: [FsckAction] = []
    /// Entries found in `/lost+found` (quarantined by an earlier repair; not examined).
    public var lostAndFoundEntries = 0
    /// Damaged entries `--repair` left in place because it could not move them: each one
    /// reported `repairFailed`, or all of them by the one line saying no `/lost+found` could
    /// be looked at. Non-zero: the repair is incomplete.
    public var leftInPlace = 0
    /// The root directory repair moves entries into and the walk does not examine:
    /// `lost+found`, or `lost+found.N` when a `lost+found` that is not a directory is in the way.
    public var lostAndFound = Fsck.lostAndFoundName

    /// No problem that is damage (sync conflicts and debris are only reported).
    public var isClean: Bool { !problems.contains { $0.isDamage } }
    /// Problems that are damage (the count of exit code 21's message).
    public var damageCount: Int { problems.filter(\.isDamage).count }

    /// The problems no action of `--repair` dealt with: those whose entry was neither moved
    /// into lost+found nor removed (damaged xattrs, a shared file ID, an unreadable entry, a
    /// temp directory that still holds entries). Empty after a repair that fixed everything.
    public var unrepaired: [FsckProblem] {
        let acted = Set(actions.map(\.storePath))
        return problems.filter { !acted.contains($0.storePath) }
    }

    /// The plaintext path fsck showed for the entry at `storePath` (its first problem's).
    public func shownPath(of storePath: String) -> String? { problems.first { $0.storePath == storePath }?.path }

    /// One sentence for a repair, for the user: what was where, and where it is now.
    public func sentence(for action: FsckAction) -> String {
        switch action {
        case .movedToLostAndFound(let sp, let name):
            let what = shownPath(of: sp).map { FsckProblem.printable($0) } ?? sp
            return "moved \(what) into /\(lostAndFound) as \(FsckProblem.printable(name))"
        case .removedTemp(let sp):
            return "removed \(shownPath(of: sp).map { FsckProblem.printable($0) } ?? sp), a temp file an interrupted write left"
        case .setAside(let sp, let name):
            return "set aside \(shownPath(of: sp).map { FsckProblem.printable($0) } ?? sp), which holds nothing readable, "
                + "out of the mount's view (the store keeps it as \(NameCodec.debrisDirectory)/\(FsckProblem.printable(name)))"
        }
    }

    public init() {}
}
