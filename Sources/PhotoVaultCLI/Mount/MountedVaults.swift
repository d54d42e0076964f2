import Foundation
import PhotoVaultLock
import PhotoVaultStore

/// Every PhotoVault mount daemon of this OS user, found through /proc rather than through
/// this session's runtime registry: a vault mounted from another session (another
/// XDG_RUNTIME_DIR: cron, sudo, an ssh login) is registered in that session's directory, and
/// `status` did not list it. A daemon's command line (`photovault __mount-daemon store=S
/// mountpoint=M ...`, no secret: `MountSettings.arguments`) says where it mounts what; its
/// environment says which runtime directory holds its control socket.
enum MountedVaults {
    struct Daemon {
        let pid: pid_t
        let settings: MountSettings
        /// The registry of the session it was mounted from (nil: its environment is unreadable).
        let registry: RuntimeRegistry?
    }

    /// The daemons of this user (processes owned by it whose first argument is the daemon
    /// command), in pid order.
    static func daemons() -> [Daemon] {
        let uid = getuid()
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        var out: [Daemon] = []
        for name in names {
            guard let pid = pid_t(name) else { continue }
            var st = stat()
            guard stat("/proc/\(pid)", &st) == 0, st.st_uid == uid,
                  let argv = nulSeparated("/proc/\(pid)/cmdline"), argv.count > 2,
                  argv[1] == DaemonLauncher.daemonCommand,
                  let settings = MountSettings(arguments: Array(argv[2...])) else { continue }
            var env: [String: String] = [:]
            let environ = nulSeparated("/proc/\(pid)/environ")
            for kv in environ ?? [] {
                if let eq = kv.firstIndex(of: "=") { env[String(kv[..<eq])] = String(kv[kv.index(after: eq)...]) }
            }
            out.append(Daemon(pid: pid, settings: settings, registry: environ == nil ? nil : RuntimeRegistry(environment: env)))
        }
        return out.sorted { $0.pid < $1.pid }
    }

    /// The daemon's answer to `status` through its control socket in its own session's
    /// registry (checked as this session's is: the directory must be this user's, the
    /// listening process too), or nil.
    static func status(of d: Daemon) -> String? {
        guard let registry = d.registry, (try? registry.checkDirectory()) != nil else { return nil }
        let reply = try? ControlClient.send(path: registry.socketPath(forMountpoint: d.settings.mountpoint),
                                            request: ControlRequest(command: "status"), timeout: 3)
        return reply?.ok == true ? reply?.message : nil
    }

    static func nulSeparated(_ path: String) -> [String]? {
        guard let data = ProcFile.read(path) else { return nil }
        return data.split(separator: 0, omittingEmptySubsequences: false).dropLast(data.last == 0 ? 1 : 0)
            .map { String(decoding: $0, as: UTF8.self) }
    }
}
