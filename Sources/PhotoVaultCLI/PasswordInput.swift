import Glibc
import PhotoVaultCrypto
import PhotoVaultStore
import CLinux

/// Where one password comes from. Never argv, never the environment.
public enum PasswordSource: Equatable, Sendable {
    case file(String)
    case standardInput
    case command(String)
    case terminal
}

/// Reads passwords (and recovery keys) straight into `SecureBytes`: the bytes never pass
/// through a Swift `String` or a growable array, so no stray copies are left on the heap.
public struct PasswordInput {
    /// Longer input is refused rather than silently truncated.
    public static let maximumLength = 4096

    /// Injectable for tests; real use reads fd 0 and /dev/tty.
    var standardInputFD: Int32 = 0
    var terminalPath = "/dev/tty"
    /// Where a warning about a password file goes (one line, no prefix); stderr in real use.
    var warn: (String) -> Void = { line in
        _ = "photovault: warning: \(DisplayText.escape(line))\n".withCString { fputs($0, stderr) }
        fflush(stderr)
    }

    public init() {}

    init(standardInputFD: Int32, terminalPath: String) {
        self.standardInputFD = standardInputFD
        self.terminalPath = terminalPath
    }

    /// The one source named by --passfile, --password-stdin or --extpass; `.terminal` if none.
    public static func source(_ args: ParsedArguments) throws -> PasswordSource {
        var given: [(String, PasswordSource)] = []
        if let f = args.value("passfile") { given.append(("--passfile", .file(f))) }
        if args.flag("password-stdin") { given.append(("--password-stdin", .standardInput)) }
        if let c = args.value("extpass") { given.append(("--extpass", .command(c))) }
        guard given.count <= 1 else {
            throw args.usageError("give only one password source, not \(given.map(\.0).joined(separator: " and "))")
        }
        return given.first?.1 ?? .terminal
    }

    /// The account password. `confirm` asks twice when it comes from the terminal (creating
    /// an account); other sources cannot mistype, so they are read once.
    public func password(_ args: ParsedArguments, confirm: Bool = false,
                         prompt: String = "Password: ") throws -> SecureBytes {
        try read(from: Self.source(args), confirm: confirm, prompt: prompt)
    }

    /// A new password: `--new-passfile FILE`, else asked twice on the terminal.
    public func newPassword(_ args: ParsedArguments, prompt: String = "New password: ") throws -> SecureBytes {
        if let f = args.value("new-passfile") { return try read(from: .file(f), confirm: false, prompt: prompt) }
        return try read(from: .terminal, confirm: true, prompt: prompt)
    }

    /// The recovery key: `--recovery-key-file FILE`, else asked on the terminal without echo.
    public func recoveryKey(_ args: ParsedArguments, prompt: String = "Recovery key: ") throws -> SecureBytes {
        if let f = args.value("recovery-key-file") {
            return try read(from: .file(f), confirm: false, prompt: prompt, fileKind: "recovery-key file")
        }
        return try read(from: .terminal, confirm: false, prompt: prompt)
    }

    /// `fileKind` names a `.file` source in a warning about its permissions.
    public func read(from source: PasswordSource, confirm: Bool, prompt: String,
                     fileKind: String = "password file") throws -> SecureBytes {
        switch source {
        case .file(let path):
            // Non-blocking: opening a FIFO nobody writes to waited for ever (PasswordWait).
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
            guard fd >= 0 else { throw CLIError.cannotReadPassword(source: path, errno: errno) }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw CLIError.cannotReadPassword(source: path, errno: errno) }
            if let problem = Self.exposure(of: path, st, euid: geteuid(), kind: fileKind) {
                warn(problem)
            }
            if st.st_mode & S_IFMT == S_IFIFO { return try PasswordWait.readFirstLine(fifo: fd, path: path) }
            _ = fcntl(fd, F_SETFL, pv_fcntl_getfl(fd) & ~O_NONBLOCK)
            return try readFirstLine(fd, what: path)
        case .standardInput:
            return try readFirstLine(standardInputFD, what: "standard input")
        case .command(let command):
            return try runExternal(command)
        case .terminal:
            let first = try readFromTerminal(prompt: prompt)
            guard confirm else { return first }
            // Asked twice only for a new password: one the rules refuse is refused now, before
            // it is typed a second time for nothing.
            do { try PasswordPolicy.check(first) } catch { first.wipe(); throw error }
            let second = try TerminalRestore.holding(first) {
                try readFromTerminal(prompt: "Retype " + prompt.prefix(1).lowercased() + prompt.dropFirst())
            }
            defer { second.wipe() }
            guard Self.equal(first, second) else {
                first.wipe()
                throw CLIError.passwordsDoNotMatch
            }
            return first
        }
    }

    /// What is wrong with a password file others could read or rewrite, or nil. Like gocryptfs
    /// and age it is a warning, not a refusal (ssh refuses such keys): the password has been
    /// exposed already, and refusing would only break the script that reads it. Only regular
    /// files are judged: a pipe (`--passfile <(pass show x)`) or a terminal is nobody's file.
    static func exposure(of path: String, _ st: stat, euid: uid_t, kind: String = "password file") -> String? {
        guard st.st_mode & S_IFMT == S_IFREG else { return nil }
        let foreign = st.st_uid != euid
        let access = [st.st_mode & 0o044 != 0 ? "read" : nil, st.st_mode & 0o022 != 0 ? "written" : nil].compactMap { $0 }
        guard foreign || !access.isEmpty else { return nil }
        var what: [String] = []
        if foreign { what.append("belongs to uid \(st.st_uid), not to you (uid \(euid))") }
        if !access.isEmpty {
            what.append("can be \(access.joined(separator: " and ")) by other users (mode \(String(st.st_mode & 0o7777, radix: 8)))")
        }
        let fix = foreign ? "keep it in a file of your own with mode 600" : "run 'chmod 600 \(path)'"
        return "the \(kind) \(path) \(what.joined(separator: " and ")): \(fix)"
    }

    /// Constant-time comparison, so a mismatch check leaks nothing about where they differ.
    static func equal(_ a: SecureBytes, _ b: SecureBytes) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { pa in
            b.withUnsafeBytes { pb in
                var diff: UInt8 = 0
                for i in 0..<pa.count { diff |= pa[i] ^ pb[i] }
                return diff == 0
            }
        }
    }

    /// Reads up to the first newline, one byte at a time so nothing after the line is
    /// consumed (stdin may carry more data). Strips "\n" or "\r\n".
    func readFirstLine(_ fd: Int32, what: String) throws -> SecureBytes {
        let buffer = SecureBytes(count: Self.maximumLength + 1)
        defer { buffer.wipe() }
        var n = 0
        try buffer.withUnsafeMutableBytes { p in
            let base = p.baseAddress!
            while n < p.count {
                let r = Glibc.read(fd, base + n, 1)
                if r < 0 {
                    if errno == EINTR { continue }
                    throw CLIError.cannotReadPassword(source: what, errno: errno)
                }
                if r == 0 || p[n] == 0x0A { p[n] = 0; break }
                n += 1
            }
        }
        guard n <= Self.maximumLength else { throw CLIError.passwordTooLong(maximum: Self.maximumLength) }
        if n > 0 && buffer.withUnsafeBytes({ $0[n - 1] }) == 0x0D { n -= 1 }
        guard n > 0 else { throw StoreError.emptyPassword }
        return buffer.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }

    /// `--extpass CMD`: runs `/bin/sh -c CMD` with stdin and stderr inherited (so a pinentry
    /// can talk to the user) and takes the first line of its stdout.
    func runExternal(_ command: String) throws -> SecureBytes {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw CLIError.cannotReadPassword(source: "--extpass", errno: errno) }
        // Close-on-exec so the command inherits only its dup'ed stdout, not our read end.
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)   // dup2 clears O_CLOEXEC on fd 1
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("sh"), strdup("-c"), strdup(command), nil]
        defer { for a in argv { free(a) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/bin/sh", &actions, nil, argv, environ)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            throw CLIError.cannotReadPassword(source: "--extpass", errno: rc)
        }
        // Bounded in time and size (PasswordWait): `--extpass yes` used to be read to its end,
        // for ever, at full CPU.
        let line = Result { try PasswordWait.readExternal(fds[0], pid: pid) }
        close(fds[0])
        let reaped = PasswordWait.reap(pid)
        if case .failure(let e) = line, case CLIError.passwordSourceStalled = e { throw e }
        guard let status = reaped else {
            if case .success(let s) = line { s.wipe() }
            throw CLIError.passwordSourceStalled("the --extpass command did not end within \(Int(PasswordWait.endSeconds)) s "
                                                 + "of closing its output; it was stopped")
        }
        let exited = (status & 0x7f) == 0
        let code = exited ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        guard code == 0 else {
            if case .success(let s) = line { s.wipe() }
            throw CLIError.externalPasswordCommandFailed(status: code)
        }
        return try line.get()
    }

    /// Prompts on the terminal with echo off (ECHONL keeps the newline visible). The saved
    /// terminal state is restored on return, on error, and on SIGINT/SIGTERM/SIGQUIT/SIGHUP.
    func readFromTerminal(prompt: String) throws -> SecureBytes {
        let fd = open(terminalPath, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { throw CLIError.noTerminal }
        defer { close(fd) }
        var saved = termios()
        let isTerminal = tcgetattr(fd, &saved) == 0
        if isTerminal {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            quiet.c_lflag |= tcflag_t(ECHONL)
            TerminalRestore.arm(fd: fd, state: saved)
            // Echo goes off before the prompt appears, so nothing typed after it is echoed
            // (and TCSAFLUSH only drops what was typed before the prompt).
            _ = tcsetattr(fd, TCSAFLUSH, &quiet)
        }
        _ = prompt.withCString { write(fd, $0, strlen($0)) }
        defer {
            if isTerminal {
                _ = tcsetattr(fd, TCSAFLUSH, &saved)
                TerminalRestore.disarm()
            }
        }
        return try readFirstLine(fd, what: "the terminal")
    }
}

/// Signal-time terminal restore. Globals because a C signal handler cannot capture; only
/// async-signal-safe calls (explicit_bzero, tcsetattr, signal, raise) run in the handler.
nonisolated(unsafe) private var restoreFD: Int32 = -1
nonisolated(unsafe) private var restoreState = termios()
nonisolated(unsafe) private var previousActions: [Int32: sigaction] = [:]
/// Secrets held while a prompt waits (`TerminalRestore.holding`): a fixed table, so the
/// handler reads it without touching the allocator.
nonisolated(unsafe) private let heldSecrets = UnsafeMutablePointer<(pointer: UnsafeMutableRawPointer, count: Int)>
    .allocate(capacity: TerminalRestore.maximumHeld)
nonisolated(unsafe) private var heldCount = 0

private func restoreTerminalAndDie(_ sig: Int32) {
    var i = 0
    while i < heldCount {
        explicit_bzero(heldSecrets[i].pointer, heldSecrets[i].count)
        i += 1
    }
    if restoreFD >= 0 { _ = tcsetattr(restoreFD, TCSANOW, &restoreState) }
    signal(sig, SIG_DFL)
    raise(sig)
}

enum TerminalRestore {
    static let signals: [Int32] = [SIGINT, SIGTERM, SIGQUIT, SIGHUP]
    static let maximumHeld = 4

    /// Runs `body` (which prompts) with `secret` on the list the signal handler zeroes
    /// before the process dies of SIGINT, SIGTERM, SIGQUIT or SIGHUP at a prompt: a key or
    /// a first password entry kept across prompts is wiped on that path too, not only on
    /// return and on error. (Outside a prompt those signals kill without a handler; the
    /// memory, locked and excluded from core dumps, goes back to the kernel unread.)
    static func holding<R>(_ secret: SecureBytes, _ body: () throws -> R) rethrows -> R {
        try holding(UnsafeMutableRawPointer(mutating: secret.unsafePointer), count: secret.count, body)
    }

    static func holding<R>(_ pointer: UnsafeMutableRawPointer, count: Int, _ body: () throws -> R) rethrows -> R {
        precondition(heldCount < maximumHeld, "too many secrets held across prompts")
        heldSecrets[heldCount] = (pointer, count)
        heldCount += 1   // only now does the handler see the entry, complete
        defer { heldCount -= 1 }
        return try body()
    }

    /// Bytes the handler would zero now (for tests).
    static var heldByteCount: Int { (0..<heldCount).reduce(0) { $0 + heldSecrets[$1].count } }

    static func arm(fd: Int32, state: termios) {
        _ = heldByteCount   // the handler must find the table initialised, never start it
        restoreState = state
        restoreFD = fd
        for s in signals {
            var previous = sigaction()
            guard sigaction(s, nil, &previous) == 0 else { continue }
            // A signal the caller ignores (nohup's SIGHUP; SIGINT and SIGQUIT of a job a
            // non-interactive shell started with '&') stays ignored: the handler would make
            // it kill the process. It used to, and disarm then left it at SIG_DFL.
            if unsafeBitCast(previous.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self) {
                continue
            }
            var action = sigaction()
            action.__sigaction_handler.sa_handler = restoreTerminalAndDie
            sigemptyset(&action.sa_mask)
            if sigaction(s, &action, nil) == 0 { previousActions[s] = previous }
        }
    }

    static func disarm() {
        for (s, var previous) in previousActions { sigaction(s, &previous, nil) }
        previousActions = [:]
        restoreFD = -1
    }
}
