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

    /// `s` with control characters (C0, DEL, C1) and the Unicode line and paragraph
    /// separators written as `\n`, `\t`, `\r`, `\xHH` or `\u{HHHH}`, and `\` as `\\`, so
    /// that the text is unambiguous and stays on one line.
    public static func printable(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case _ where u.value < 0x20 || u.value == 0x7f:
                out += "\\x" + (u.value < 0x10 ? "0" : "") + String(u.value, radix: 16)
            case _ where (0x80...0x9f).contains(u.value) || u.value == 0x2028 || u.value == 0x2029:
                out += "\\u{" + String(u.value, radix: 16) + "}"
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }
}

/// A change made by `fsck --repair` (the only two kinds it makes).
public enum FsckAction: Equatable, Sendable {
    /// The entry at `storePath` now lives in `/lost+found` under the plaintext name `name`.
    case movedToLostAndFound(storePath: String, name: String)
    /// A leftover temp file or directory was deleted.
    case removedTemp(storePath: String)
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

    public init() {}
}
