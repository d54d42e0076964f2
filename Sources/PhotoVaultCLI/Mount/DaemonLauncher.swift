import Glibc
import PhotoVaultCrypto
import PhotoVaultStore
import CLinux

/// Starts the background mount daemon and waits until the mount is live or has failed.
///
/// The parent has already checked the password. It spawns `/proc/self/exe __mount-daemon
/// SETTINGS...` in a new session with two pipes: fd 3, on which the daemon reports
/// `OK` or `ERR <exit code> <message>` once, and fd 4, from which the daemon reads the
/// account's master key and tree ID (48 bytes). Keys thus never touch argv, the
/// environment or a file, and Argon2id runs only once.
enum DaemonLauncher {
    static let daemonCommand = "__mount-daemon"

    static func launch(settings: MountSettings, masterKey: SecureBytes, treeID: [UInt8]) throws -> Int32 {
        var ready: [Int32] = [0, 0]
        var keys: [Int32] = [0, 0]
        guard pv_pipe2_cloexec(&ready) == 0, pv_pipe2_cloexec(&keys) == 0 else { throw StoreError.posix("pipe") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, ready[1], 3)
        posix_spawn_file_actions_adddup2(&actions, keys[0], 4)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setflags(&attr, pv_posix_spawn_setsid())
        let argv = ["photovault", daemonCommand] + settings.arguments
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for p in cargs { free(p) } }
        var pid: pid_t = 0
        // A crashing daemon must die at once (Swift's backtracer would otherwise hold it,
        // keys and mount alive, in a futex wait), so the backtracer is off in the daemon.
        var envList: [String] = []
        var e = Glibc.environ
        while let p = e.pointee { let s = String(cString: p); if !s.hasPrefix("SWIFT_BACKTRACE=") { envList.append(s) }; e += 1 }
        envList.append("SWIFT_BACKTRACE=enable=no")
        var cenv: [UnsafeMutablePointer<CChar>?] = envList.map { strdup($0) } + [nil]
        defer { for p in cenv { free(p) } }
        let rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, &cargs, &cenv)
        close(ready[1]); close(keys[0])
        guard rc == 0 else {
            close(ready[0]); close(keys[1])
            throw StoreError.io(errno: rc, context: "start the mount daemon")
        }
        // Hand over the keys, then forget our copy.
        let payload = SecureBytes(count: 48)
        payload.withUnsafeMutableBytes { p in
            masterKey.withUnsafeBytes { p.copyMemory(from: $0) }
            treeID.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: p[32..<48]).copyMemory(from: $0) }
        }
        _ = payload.withUnsafeBytes { write(keys[1], $0.baseAddress!, 48) }
        payload.wipe()
        close(keys[1])
        // Wait for the verdict.
        var reply = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 512)
        while true {
            let n = read(ready[0], &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            reply.append(contentsOf: buf[0..<n])
        }
        close(ready[0])
        var lines = String(decoding: reply, as: UTF8.self).split(separator: "\n").map(String.init)
        while let first = lines.first, first.hasPrefix("WARN ") {
            let line = Array("photovault: warning: \(first.dropFirst(5))\n".utf8)
            _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress!, $0.count) }
            lines.removeFirst()
        }
        let text = lines.joined(separator: "\n").trimmedWhitespace()
        if text == "OK" { return 0 }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == 0 { kill(pid, SIGTERM) }
        if text.hasPrefix("ERR ") {
            let rest = text.dropFirst(4)
            let parts = rest.split(separator: " ", maxSplits: 1)
            let code = Int32(parts.first ?? "1") ?? 1
            throw DaemonFailure(code: code, message: parts.count > 1 ? String(parts[1]) : "mount failed")
        }
        throw unreported(pid: pid, mountpoint: settings.mountpoint)
    }

    /// The daemon closed the ready pipe without a verdict: it died (a signal, a crash). When
    /// that happened after it mounted, its dead mount is still at the mountpoint and every
    /// later mount there fails, so the message names it and the command that clears it, as
    /// `status`, `lock` and `unlock` do (it used to say only "exited before the mount was ready").
    static func unreported(pid: pid_t, mountpoint: String) -> DaemonFailure {
        // The pipe's end can come before the daemon's /dev/fuse is closed (descriptors close in
        // order), so the mount is looked at once the process is gone or a zombie.
        let deadline = monotonicMs() + 2_000
        while let st = RuntimeRegistry.processStat(pid), st.state != "Z", st.state != "X", monotonicMs() < deadline {
            usleep(10_000)
        }
        let what = "the mount daemon exited before the mount was ready"
        var st = stat()
        if let m = MountInfoEntry.at(mountpoint), m.fsType == MountInfoEntry.photoVaultType,
           stat(mountpoint, &st) != 0, errno == ENOTCONN {
            return DaemonFailure(code: ExitCodes.deadMount,
                                 message: what + "; " + CLIError.deadMount(m.mountpoint, fsType: m.fsType).description)
        }
        return DaemonFailure(code: 1, message: what)
    }
}

/// A failure the daemon reported through the ready pipe, with its exit code.
struct DaemonFailure: Error, CustomStringConvertible {
    let code: Int32
    let message: String
    var description: String { message }
}

extension String {
    func trimmedWhitespace() -> String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
