import Glibc

/// `rm -r` for a user's tree, relative to open directory descriptors and never following
/// symbolic links, so a link planted in the tree cannot make removal escape it.
enum TreeRemoval {
    /// Removes `path` and everything below it; a missing path is not an error.
    static func removeRecursively(_ path: String) throws {
        let parent = StorePath.dirname(path)
        let name = StorePath.basename(path)
        let pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard pfd >= 0 else { throw StoreError.posix("open \(parent)") }
        defer { close(pfd) }
        try remove(name, in: pfd, display: path)
        _ = fsync(pfd)
    }

    /// A directory being emptied: its stream (which owns its descriptor), its name in its
    /// parent, its entries and the next one to remove.
    private struct Frame {
        let dir: OpaquePointer
        let fd: Int32
        let name: String
        let children: [String]
        var next = 0
    }

    /// Removes `name` in `dirfd` and everything below it, depth first in the order of each
    /// listing. An explicit stack, not recursion: a tree can be nested deeper than a thread's
    /// stack holds frames (a recursion per level crashed, SIGSEGV, at a few thousand levels).
    /// The error names the path below `display` where removal stopped.
    private static func remove(_ name: String, in dirfd: Int32, display: String) throws {
        var stack: [Frame] = []
        defer { for f in stack.reversed() { closedir(f.dir) } }
        // The path of `child` in the innermost directory (built only for an error).
        func path(_ child: String? = nil) -> String {
            ([display] + stack.dropFirst().map(\.name) + (child.map { [$0] } ?? [])).joined(separator: "/")
        }
        if let top = try enter(name, in: dirfd, display: { display }) { stack.append(top) }
        while let i = stack.indices.last {
            guard stack[i].next < stack[i].children.count else {
                let shown = path()
                let f = stack.removeLast()
                closedir(f.dir)
                let parent = stack.last?.fd ?? dirfd
                guard unlinkat(parent, f.name, AT_REMOVEDIR) == 0 || errno == ENOENT else { throw StoreError.posix("rmdir \(shown)") }
                continue
            }
            let c = stack[i].children[stack[i].next]
            stack[i].next += 1
            if let sub = try enter(c, in: stack[i].fd, display: { path(c) }) { stack.append(sub) }
        }
    }

    /// Removes `name` in `dirfd` if it is not a directory (nil; a missing one too); opens and
    /// lists it if it is.
    private static func enter(_ name: String, in dirfd: Int32, display: () -> String) throws -> Frame? {
        var st = stat()
        if fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 {
            if errno == ENOENT { return nil }
            throw StoreError.posix("stat \(display())")
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            guard unlinkat(dirfd, name, 0) == 0 || errno == ENOENT else { throw StoreError.posix("unlink \(display())") }
            return nil
        }
        let fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(display())") }
        // fdopendir owns fd from here; closedir closes it.
        guard let dir = fdopendir(fd) else { close(fd); throw StoreError.posix("opendir \(display())") }
        var children: [String] = []
        while let e = readdir(dir) {
            let child = DirectoryEntryName.string(e)
            if child != "." && child != ".." { children.append(child) }
        }
        return Frame(dir: dir, fd: fd, name: name, children: children)
    }
}
