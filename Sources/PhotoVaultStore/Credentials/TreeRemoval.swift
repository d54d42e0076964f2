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

    private static func remove(_ name: String, in dirfd: Int32, display: String) throws {
        var st = stat()
        if fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 {
            if errno == ENOENT { return }
            throw StoreError.posix("stat \(display)")
        }
        if (st.st_mode & S_IFMT) == S_IFDIR {
            let fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw StoreError.posix("open \(display)") }
            // fdopendir owns fd from here; closedir closes it.
            guard let dir = fdopendir(fd) else { close(fd); throw StoreError.posix("opendir \(display)") }
            var children: [String] = []
            while let e = readdir(dir) {
                let child = withUnsafePointer(to: e.pointee.d_name) {
                    $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
                }
                if child != "." && child != ".." { children.append(child) }
            }
            do {
                for c in children { try remove(c, in: fd, display: display + "/" + c) }
            } catch { closedir(dir); throw error }
            closedir(dir)
            guard unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT else { throw StoreError.posix("rmdir \(display)") }
        } else {
            guard unlinkat(dirfd, name, 0) == 0 || errno == ENOENT else { throw StoreError.posix("unlink \(display)") }
        }
    }
}
