import Glibc
import PhotoVaultCrypto

/// What `pam_exec.so expose_authtok` hands its program: the PAM user and stack in the
/// environment (PAM_USER, PAM_TYPE, PAM_SERVICE; the caller's own environment is not passed),
/// and during `auth` the password on standard input, NUL-terminated (at most
/// PAM_MAX_RESP_SIZE, 512 bytes), then end of file.
public struct PamRequest {
    /// The largest password pam_exec passes (PAM_MAX_RESP_SIZE).
    public static let maximumPassword = 512

    public let user: String
    public let service: String?

    /// nil unless this is the auth stack with a user: pam_exec in the account, session or
    /// password stacks has no password to give, and the line there does nothing.
    public init?(environment: [String: String]) {
        guard environment["PAM_TYPE"] == "auth", let u = environment["PAM_USER"], !u.isEmpty else { return nil }
        user = u
        service = environment["PAM_SERVICE"]
    }

    /// The password from `fd`, up to its first NUL or newline; nil when there is none or it is
    /// longer than pam_exec would send. Read straight into secure memory.
    public static func readPassword(_ fd: Int32) -> SecureBytes? {
        let buffer = SecureBytes(count: maximumPassword + 1)
        defer { buffer.wipe() }
        var n = 0
        var ended = false
        buffer.withUnsafeMutableBytes { p in
            let base = p.baseAddress!
            while n < p.count {
                let r = read(fd, base + n, p.count - n)
                if r < 0 && errno == EINTR { continue }
                if r <= 0 { ended = true; break }
                // Stop at the terminator as soon as it has come: pam_exec keeps the pipe
                // open until it is read, and nothing after it is the password.
                if let end = (n..<(n + r)).first(where: { p[$0] == 0 || p[$0] == 0x0A }) {
                    n = end
                    ended = true
                    break
                }
                n += r
            }
        }
        guard ended, n > 0, n <= maximumPassword else { return nil }
        return buffer.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }
}
