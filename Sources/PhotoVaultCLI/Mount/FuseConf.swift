import Glibc

/// `/etc/fuse.conf` as `mount --allow-other` needs it: for a caller other than root,
/// fusermount3 refuses allow_other unless the file has a `user_allow_other` line. Checked
/// before the password is asked: the mount used to derive the key, start its daemon and then
/// fail with libfuse's "is fusermount3 installed and setuid?", which names the wrong fix.
enum FuseConf {
    static let path = "/etc/fuse.conf"
    static let option = "user_allow_other"

    /// Throws `allowOtherNotPermitted` when a non-root caller asks for allow_other and the
    /// file (missing or unreadable counts as without it, as for fusermount3) lacks the line.
    static func checkAllowOther(euid: uid_t = geteuid(), path: String = FuseConf.path) throws {
        guard euid != 0, !allowsOther(contents(path)) else { return }
        throw CLIError.allowOtherNotPermitted(conf: path)
    }

    /// Whether `text` enables `user_allow_other`: a line holding only that word (fusermount3
    /// reads it so: `#` starts a comment, blanks around it are ignored).
    static func allowsOther(_ text: String?) -> Bool {
        guard let text else { return false }
        return text.split(separator: "\n", omittingEmptySubsequences: true).contains { line in
            let code = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return code.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }) == [Substring(option)]
        }
    }

    static func contents(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while out.count < 1 << 20 {
            let n = read(fd, &buf, buf.count)
            guard n > 0 else { break }
            out += buf[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }
}
