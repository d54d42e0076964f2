import Foundation
import PhotoVaultCrypto
import PhotoVaultStore

/// Where live mounts of this OS user are registered: `$XDG_RUNTIME_DIR/photovault/`, else
/// `/tmp/photovault-<uid>/` (mode 0700). Per mount: `<id>.sock` (control socket) and
/// `<id>.mount` (mountpoint, store, pid, tree tag), where `<id>` is a hash of the
/// mountpoint's real path. No user name, password or key is ever written here.
public struct RuntimeRegistry {
    public let directory: String

    public init(environment env: [String: String] = ProcessInfo.processInfo.environment) {
        if let r = env["XDG_RUNTIME_DIR"], !r.isEmpty, access(r, W_OK) == 0 {
            directory = StorePath.join(r, "photovault")
        } else {
            directory = "/tmp/photovault-\(getuid())"
        }
    }

    public struct Entry: Equatable {
        public var mountpoint: String
        public var store: String
        public var pid: pid_t
        /// Hash of the account's tree ID: tells whether two mounts show the same account.
        public var treeTag: String
    }

    public func ensureDirectory() throws {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST { throw StoreError.posix("mkdir \(directory)") }
        var st = stat()
        guard lstat(directory, &st) == 0, st.st_uid == getuid(), (st.st_mode & S_IFMT) == S_IFDIR else {
            throw CLIError.failed("\(directory) is not a private directory of this user")
        }
        _ = chmod(directory, 0o700)
    }

    public static func canonical(_ path: String) -> String {
        guard let r = realpath(path, nil) else { return path }
        defer { free(r) }
        return String(cString: r)
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
        let text = [e.mountpoint, e.store, String(e.pid), e.treeTag].joined(separator: "\n") + "\n"
        try AtomicFile.write(Array(text.utf8), to: entryPath(forMountpoint: e.mountpoint), mode: 0o600)
    }

    public func unregister(mountpoint: String) {
        unlink(entryPath(forMountpoint: mountpoint))
        unlink(socketPath(forMountpoint: mountpoint))
    }

    /// Live entries (stale ones, whose daemon is gone, are removed).
    public func entries() -> [Entry] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var out: [Entry] = []
        for n in names where n.hasSuffix(".mount") {
            let p = StorePath.join(directory, n)
            guard let bytes = try? FileIO.readFile(p, limit: 65536) else { continue }
            let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            guard lines.count >= 4, let pid = pid_t(lines[2]) else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                unlink(p)
                unlink(String(p.dropLast(".mount".count)) + ".sock")
                continue
            }
            out.append(Entry(mountpoint: lines[0], store: lines[1], pid: pid, treeTag: lines[3]))
        }
        return out.sorted { $0.mountpoint < $1.mountpoint }
    }

    public func entry(forMountpoint mp: String) -> Entry? {
        let c = RuntimeRegistry.canonical(mp)
        return entries().first { $0.mountpoint == c || $0.mountpoint == mp }
    }
}

/// Whether `path` is a mountpoint right now (from /proc/self/mountinfo).
public func isMountpoint(_ path: String) -> Bool {
    let c = RuntimeRegistry.canonical(path)
    guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
    for line in text.split(separator: "\n") {
        let f = line.split(separator: " ")
        if f.count > 4 && unescapeMountinfo(String(f[4])) == c { return true }
    }
    return false
}

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
