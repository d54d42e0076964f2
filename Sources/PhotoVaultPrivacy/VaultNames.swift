import Glibc
import CLinux

/// The thumbnail names (`md5(file URI)`) of every entry in a mounted vault, for the purge to
/// recognise thumbnails that carry no `Thumb::URI` (pcmanfm writes none). A thumbnail's name
/// cannot be inverted, and once the vault is unmounted its file names are unknown, so they are
/// collected while it is mounted: by walking the mount from a directory descriptor taken
/// while it was live (never the plain directory underneath).
public struct VaultNames: Sendable {
    /// Lowercase hex names, without `.png`.
    public private(set) var names: Set<String> = []
    /// Entries seen (for the log), and whether the walk stopped at `limit`.
    public private(set) var entries = 0
    public private(set) var truncated = false

    public init() {}

    /// Entries past this are not walked: a bound on the time and the descriptors the daemon
    /// holds for what the kernel remembers of a walk (one per entry until it forgets them).
    public static let limit = 300_000

    /// Walks the directory open at `rootFD` (not closed here). `prefixes`: the mountpoint as
    /// given and as resolved. `skip`: top-level names not walked (the vault's own
    /// `.thumbnails`, whose entries are thumbnails, not photos).
    public static func collect(rootFD: Int32, prefixes: [String], skip: Set<String>) -> VaultNames {
        var v = VaultNames()
        let dup = pv_openat(rootFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        guard dup >= 0 else { return v }
        v.walk(dup, relative: "", depth: 0, prefixes: prefixes, skip: skip)
        return v
    }

    /// Takes ownership of `fd`.
    private mutating func walk(_ fd: Int32, relative: String, depth: Int, prefixes: [String], skip: Set<String>) {
        guard let dir = fdopendir(fd) else { close(fd); return }
        defer { closedir(dir) }
        while let e = readdir(dir) {
            if entries >= VaultNames.limit { truncated = true; return }
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name == "." || name == ".." { continue }
            if depth == 0 && skip.contains(name) { continue }
            let rel = relative.isEmpty ? name : relative + "/" + name
            entries += 1
            for n in FileURI.thumbnailNames(relativePath: rel, prefixes: prefixes) { names.insert(n) }
            var type = Int32(e.pointee.d_type)
            if type == Int32(DT_UNKNOWN) {
                var st = stat()
                guard fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                type = (st.st_mode & S_IFMT) == S_IFDIR ? Int32(DT_DIR) : Int32(DT_REG)
            }
            guard type == Int32(DT_DIR), depth < 64 else { continue }
            let sub = pv_openat(dirfd(dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0)
            if sub >= 0 { walk(sub, relative: rel, depth: depth + 1, prefixes: prefixes, skip: skip) }
        }
    }

    public mutating func formUnion(_ other: VaultNames) {
        names.formUnion(other.names)
        entries += other.entries
        truncated = truncated || other.truncated
    }

    public init(names: Set<String>) { self.names = names }
}
