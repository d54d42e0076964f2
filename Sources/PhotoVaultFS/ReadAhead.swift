import Glibc

/// The mount's read-ahead window, `/sys/class/bdi/MAJ:MIN/read_ahead_kb`.
///
/// The kernel gives every FUSE mount 128 KiB, and `max_readahead` in INIT can only lower
/// it. A sequential read is then one small READ round trip after another (cold 256 MiB read
/// on tmpfs: 128 KiB 905–1,151 MiB/s, 1 MiB 1,099–1,408 MiB/s, PERFORMANCE.md). The default,
/// 512 KiB, is where the kernel's window ramp still starts 32 KiB, 64 KiB as with 256 KiB
/// (1 MiB jumps to 128 KiB at once), so a thumbnailer reading the head of a photo does not
/// pay for the larger window. Only root may write the attribute: a daemon that cannot keeps
/// the kernel's default, which is correct, only slower.
enum ReadAhead {
    /// Raises the window of the FUSE mount at `mountpoint` to `kib` if it is smaller.
    /// Call after the mount exists and before INIT is answered (INIT keeps the smaller of
    /// this and `max_readahead`; and a stat of the mountpoint would wait for INIT, hence
    /// mountinfo). Returns the value now in effect, nil if unknown.
    @discardableResult
    static func raise(mountpoint: String, to kib: Int) -> Int? {
        guard kib > 0, let dev = VaultFileSystem.mountDevice(mountpoint) else { return nil }
        let path = "/sys/class/bdi/\(dev)/read_ahead_kb"
        guard let current = readInt(path) else { return nil }
        guard current < kib else { return current }
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return current }
        defer { close(fd) }
        let text = Array("\(kib)\n".utf8)
        let n = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        return n == text.count ? kib : current
    }

    private static func readInt(_ path: String) -> Int? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 32)
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return Int(String(decoding: buf[0..<n].filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
    }
}
