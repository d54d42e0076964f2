import Foundation
import Glibc
import PhotoVaultCrypto
import PhotoVaultSession
import PhotoVaultStore
import CLinux

/// `photovault pam`, the program of the PAM line
/// `auth optional pam_exec.so quiet expose_authtok /usr/local/bin/photovault pam`.
///
/// pam_exec waits for its program, and the login waits for pam_exec: this side only reads
/// the password and hands it to a worker in a new session (`PamWorker`), then exits 0. The
/// worker runs Argon2id, unlocks or mounts, and says nothing (the syslog excepted). Every
/// outcome, a password that fits nothing included, exits 0 and prints nothing: the line is
/// optional and must never hold up, fail or speak on a login screen.
enum PamCommand {
    static let workerCommand = "__pam-worker"

    static func run(_ args: ParsedArguments) throws -> Int32 {
        guard let request = PamRequest(environment: ProcessInfo.processInfo.environment) else { return 0 }
        guard let password = PamRequest.readPassword(STDIN_FILENO) else { return 0 }
        defer { password.wipe() }
        // The worker's arguments: the user, then this command line's options as given (its
        // parser checks them again). No secret is in there.
        var argv = ["photovault", workerCommand, request.user]
        if let m = args.argument("MOUNTPOINT") { argv += ["--mountpoint", m] }
        if let s = args.value("store") { argv += ["--store", s] }
        for o in ["idle", "on-lock", "lock-grace"] { if let v = args.value(o) { argv += ["--\(o)", v] } }
        for f in ["no-mount", "private-thumbnails", "no-private-thumbnails"] where args.flag(f) { argv.append("--\(f)") }
        spawnWorker(argv, password: password)
        return 0
    }

    /// Starts `/proc/self/exe __pam-worker ...` in a new session with the password on fd 3
    /// and /dev/null as stdio, and does not wait for it.
    static func spawnWorker(_ argv: [String], password: SecureBytes) {
        var fds: [Int32] = [-1, -1]
        guard pv_pipe2_cloexec(&fds) == 0 else { return }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[0], 3)
        for fd: Int32 in 0...2 { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0) }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setflags(&attr, pv_posix_spawn_setsid())
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for p in cargs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, &cargs, environ)
        close(fds[0])
        if rc == 0 {
            // A password is at most 512 bytes: it fits the pipe, so this never blocks.
            _ = password.withUnsafeBytes { write(fds[1], $0.baseAddress!, $0.count) }
        }
        close(fds[1])
    }
}
