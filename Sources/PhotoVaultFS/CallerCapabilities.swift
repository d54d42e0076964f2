import Glibc
import CFuse
import PhotoVaultStore

/// Capabilities of the process that sent a request, from its `/proc/PID/status` (`CapEff`;
/// the request carries the thread's ID, whose entry `/proc` also answers).
///
/// The kernel checks CAP_SYS_ADMIN before a `trusted.*` get or set reaches the mount, but
/// passes a listing on as the file system gives it: ext4 and tmpfs list `trusted.*` names
/// only to holders of CAP_SYS_ADMIN, so the mount filters its listing the same way.
enum CallerCapabilities {
    static let sysAdmin = 21

    /// False when it cannot be told (a process in another PID namespace shows PID 0, or has
    /// exited meanwhile), and for a caller in another user namespace than the daemon's:
    /// `CapEff` counts within the caller's own namespace (after `unshare -r` anyone holds
    /// CAP_SYS_ADMIN there), while the kernel's checks count in the initial one.
    static func holds(_ capability: Int, _ req: fuse_req_t?) -> Bool {
        guard let ctx = fuse_req_ctx(req)?.pointee, ctx.pid > 0,
              let own = ownUserNamespace, userNamespace("/proc/\(ctx.pid)/ns/user") == own,
              let status = try? FileIO.readFile("/proc/\(ctx.pid)/status", limit: 64 << 10),
              let line = String(decoding: status, as: UTF8.self).split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let mask = UInt64(String(line.dropFirst("CapEff:".count).filter { $0 != " " && $0 != "\t" }), radix: 16)
        else { return false }
        return mask & (1 << UInt64(capability)) != 0
    }

    private struct Namespace: Equatable { let dev: UInt; let ino: UInt }

    private static let ownUserNamespace = userNamespace("/proc/self/ns/user")

    private static func userNamespace(_ path: String) -> Namespace? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Namespace(dev: UInt(st.st_dev), ino: UInt(st.st_ino))
    }
}
