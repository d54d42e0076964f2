import Foundation
import PhotoVaultCrypto
import PhotoVaultStore

/// Where live mounts of this OS user are registered: `$XDG_RUNTIME_DIR/photovault/`, else
/// `/tmp/photovault-<uid>/` (mode 0700). Per mount: `<id>.sock` (control socket) and
/// `<id>.mount` (mountpoint, store, pid, tree tag, the daemon's start time), where `<id>` is
/// a hash of the mountpoint's real path. No user name, password or key is ever written here.
public struct RuntimeRegistry {
    public let directory: String

    public init(environment env: [String: String] = ProcessInfo.processInfo.environment) {
        if let r = env["XDG_RUNTIME_DIR"], RuntimeRegistry.isUsableRuntimeDirectory(r) {
            directory = StorePath.join(r, "photovault")
        } else {
            directory = "/tmp/photovault-\(getuid())"
        }
    }

    /// What the XDG base-directory spec asks of `$XDG_RUNTIME_DIR`: an absolute path to a
    /// directory of this user that nobody else may write to. Anything else gets the fallback,
    /// as a missing one always did, so that mount, status, lock and unmount agree. A regular
    /// file there used to give `lstat .../photovault: Not a directory` from status and lock
    /// (and a mount they could not reach); a relative path named another directory in the
    /// daemon (which works from /) than in the command; root with another user's
    /// /run/user/<uid> (after `su`) left a root-owned `photovault` in it, which that user's
    /// commands then refused.
    static func isUsableRuntimeDirectory(_ path: String) -> Bool {
        guard path.hasPrefix("/") else { return false }
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid(),
              st.st_mode & 0o022 == 0 else { return false }
        return access(path, W_OK | X_OK) == 0
    }

    public struct Entry: Equatable {
        public var mountpoint: String
        public var store: String
        public var pid: pid_t
        /// Hash of the account's tree ID: tells whether two mounts show the same account.
        public var treeTag: String
        /// The daemon's start time (/proc/<pid>/stat field 22): tells it from a later process
        /// that got the same pid. nil in entries written before it was recorded.
        public var startTime: String? = nil
    }

    /// Throws unless the directory is absent or a real directory (not a symlink) of this
    /// user that nobody else may enter. Under /tmp anyone can create `photovault-<uid>`
    /// first, to list fake mounts whose sockets would answer `lock` and `status` falsely.
    public func checkDirectory() throws {
        var st = stat()
        guard lstat(directory, &st) == 0 else {
            if errno == ENOENT { return }
            throw StoreError.posix("lstat \(directory)")
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o077 == 0 else {
            throw CLIError.failed("\(directory) is not a private directory of this user (owner uid \(st.st_uid), "
                                  + "mode \(String(st.st_mode & 0o7777, radix: 8))): not trusting the mounts it lists")
        }
    }

    public func ensureDirectory() throws {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST { throw StoreError.posix("mkdir \(directory)") }
        var st = stat()
        guard lstat(directory, &st) == 0, st.st_uid == getuid(), (st.st_mode & S_IFMT) == S_IFDIR else {
            throw CLIError.failed("\(directory) is not a private directory of this user")
        }
        _ = chmod(directory, 0o700)
    }

    /// The real path; for a path that cannot be resolved itself (a dead FUSE mount answers
    /// ENOTCONN), its resolved parent followed by its last component.
    public static func canonical(_ path: String) -> String {
        if let r = realpath(path, nil) {
            defer { free(r) }
            return String(cString: r)
        }
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        let last = StorePath.basename(String(trimmed))
        guard !last.isEmpty, last != ".", last != "..", last != "/",
              let r = realpath(StorePath.dirname(String(trimmed)), nil) else { return path }
        defer { free(r) }
        return StorePath.join(String(cString: r), last)
    }

    public static func id(forMountpoint mp: String) -> String {
        Base64Hex.hex(KeyedHash.hash(Array(canonical(mp).utf8), outputLength: 8))
    }

    public static func treeTag(_ treeID: [UInt8]) -> String {
        Base64Hex.hex(KeyedHash.hash(Array("PVtreetag".utf8) + treeID, outputLength: 8))
    }

    public func socketPath(forMountpoint mp: String) -> String {
        StorePath.join(directory, RuntimeRegistry.id(forMountpoint: mp) + ".sock")
    }

    func entryPath(forMountpoint mp: String) -> String {
        StorePath.join(directory, RuntimeRegistry.id(forMountpoint: mp) + ".mount")
    }

    public func register(_ e: Entry) throws {
        try ensureDirectory()
        let text = [e.mountpoint, e.store, String(e.pid), e.treeTag, e.startTime ?? ""].joined(separator: "\n") + "\n"
        try AtomicFile.write(Array(text.utf8), to: entryPath(forMountpoint: e.mountpoint), mode: 0o600)
    }

    public func unregister(mountpoint: String) {
        unlink(entryPath(forMountpoint: mountpoint))
        unlink(socketPath(forMountpoint: mountpoint))
    }

    /// Live entries (stale ones, whose daemon is gone, are removed); none from a directory
    /// that fails `checkDirectory`.
    public func entries() -> [Entry] {
        guard (try? checkDirectory()) != nil else { return [] }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var out: [Entry] = []
        for n in names where n.hasSuffix(".mount") {
            let p = StorePath.join(directory, n)
            guard let bytes = try? FileIO.readFile(p, limit: 65536) else { continue }
            let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            guard lines.count >= 4, let pid = pid_t(lines[2]) else { continue }
            let start = lines.count > 4 && !lines[4].isEmpty ? lines[4] : nil
            guard RuntimeRegistry.isRunning(pid, startTime: start) else {
                unlink(p)
                unlink(String(p.dropLast(".mount".count)) + ".sock")
                continue
            }
            out.append(Entry(mountpoint: lines[0], store: lines[1], pid: pid, treeTag: lines[3], startTime: start))
        }
        return out.sorted { $0.mountpoint < $1.mountpoint }
    }

    /// Whether the daemon that wrote an entry still runs. `kill(pid, 0)` alone is not enough:
    /// it also succeeds on a SIGKILLed daemon its new parent has not reaped yet (a zombie,
    /// which can last seconds) and on another process that got the pid later.
    static func isRunning(_ pid: pid_t, startTime: String?) -> Bool {
        guard let st = processStat(pid) else { return false }
        guard st.state != "Z" && st.state != "X" else { return false }
        if let t = startTime { return t == st.startTime }
        // An entry written before start times were recorded: the pid must at least be a
        // photovault process. Any later holder of the pid used to keep the entry alive, and
        // with it "already mounted" (exit 16) from every mount of that vault.
        return StorePath.basename(TreeLockHolder.commandLine(pid).first ?? "") == "photovault"
    }

    /// State letter and start time (field 3 and 22 of /proc/<pid>/stat); nil if no such process.
    static func processStat(_ pid: pid_t) -> (state: Character, startTime: String)? {
        guard pid > 0, let bytes = try? FileIO.readFile("/proc/\(pid)/stat", limit: 4096) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        // The command name (field 2) is in parentheses and may itself hold spaces or ')'.
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let state = fields[0].first else { return nil }
        return (state, String(fields[19]))
    }

    public func entry(forMountpoint mp: String) -> Entry? {
        let c = RuntimeRegistry.canonical(mp)
        return entries().first { $0.mountpoint == c || $0.mountpoint == mp }
    }
}

/// One line of /proc/self/mountinfo:
/// `id parent major:minor root mountpoint options [optional...] - fstype source super`.
struct MountInfoEntry {
    /// What PhotoVault mounts show as their type (`mount`, `df -T`).
    static let photoVaultType = "fuse.photovault"
    var mountpoint: String
    /// `major:minor`, as st_dev shows it.
    var device: String
    var fsType: String
    /// The `user_id=` of a FUSE mount's super options: who mounted it.
    var ownerUID: uid_t? = nil

    /// Every mount of this mount namespace, in mount order (a later one covers an earlier one
    /// at the same place).
    static func all() -> [MountInfoEntry] {
        // Decoded leniently: a drive mounted under a name that is not UTF-8 (an exFAT or NTFS
        // label in Latin-1 under /media) made the strict decode fail, so no mount was seen
        // at all and `unmount`, `status` and `lock` said no vault was mounted.
        guard let data = FileManager.default.contents(atPath: "/proc/self/mountinfo") else { return [] }
        let text = String(decoding: data, as: UTF8.self)
        return text.split(separator: "\n").compactMap { line in
            let halves = line.components(separatedBy: " - ")
            guard halves.count >= 2 else { return nil }
            let f = halves[0].split(separator: " ")
            guard f.count >= 5, let type = halves[1].split(separator: " ").first else { return nil }
            let superOptions = halves[1].split(separator: " ").dropFirst(2).first?.split(separator: ",") ?? []
            let owner = superOptions.first { $0.hasPrefix("user_id=") }.flatMap { uid_t($0.dropFirst("user_id=".count)) }
            return MountInfoEntry(mountpoint: unescapeMountinfo(String(f[4])), device: String(f[2]), fsType: String(type),
                                  ownerUID: owner)
        }
    }

    /// The topmost mount at `path` (canonicalised), if any.
    static func at(_ path: String) -> MountInfoEntry? {
        let c = RuntimeRegistry.canonical(path)
        return all().last { $0.mountpoint == c }
    }
}

/// Whether `path` is a mountpoint right now (from /proc/self/mountinfo).
public func isMountpoint(_ path: String) -> Bool { MountInfoEntry.at(path) != nil }

func unescapeMountinfo(_ s: String) -> String {
    guard s.contains("\\") else { return s }
    var out = [UInt8]()
    let u = Array(s.utf8)
    var i = 0
    while i < u.count {
        if u[i] == 92, i + 3 < u.count, let v = UInt8(String(decoding: u[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
            out.append(v); i += 4
        } else { out.append(u[i]); i += 1 }
    }
    return String(decoding: out, as: UTF8.self)
}
