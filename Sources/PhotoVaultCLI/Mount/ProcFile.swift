import Glibc

/// A /proc file read whole. Foundation's `String(contentsOfFile:)` and
/// `FileManager.contents(atPath:)` stop after the first read of a file whose `st_size` is 0,
/// as every /proc file's is: /proc/self/mountinfo was cut at about 4 KB, so once a machine
/// had some forty mounts, later ones (the newest vaults) were missing, and `status`,
/// `unmount`, `lock` and `mount` did not see them.
enum ProcFile {
    static func read(_ path: String, limit: Int = 16 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while out.count < limit {
            let n = Glibc.read(fd, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return n == 0 ? out : nil }
            out += buf[0..<n]
        }
        return out
    }

    static func text(_ path: String) -> String? { read(path).map { String(decoding: $0, as: UTF8.self) } }
}
