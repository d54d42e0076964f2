import Glibc
import PhotoVaultCrypto
import PhotoVaultStore
import CLinux

/// How long a password source that is not a plain file may take (stated in `--help`).
/// Without bounds, `--extpass yes` was read to its end, for ever, at full CPU, and a
/// `--passfile` naming a FIFO that nobody writes to waited for ever in open(2).
enum PasswordWait {
    /// A FIFO given as `--passfile` must be opened for writing within this time.
    static let writerSeconds = 5.0
    /// A FIFO or `--extpass` must give the whole first line within this time (a password
    /// manager may ask for its own passphrase first).
    static let lineSeconds = 120.0
    /// `--extpass`: after its first line, the command must end within this time...
    static let endSeconds = 5.0
    /// ...having printed at most this much more (`pass show` prints the entry's other lines; a
    /// tool may print a banner).
    static let moreOutput = 1 << 20

    /// The first line of a FIFO opened with O_NONBLOCK. A read then answers 0 (end of file)
    /// while no process has the FIFO open for writing, EAGAIN while one has but wrote nothing.
    static func readFirstLine(fifo fd: Int32, path: String) throws -> SecureBytes {
        let start = monotonicMs()
        var sawWriter = false
        return try readLine(fd, what: path, deadline: start + lineSeconds * 1000) { endOfFile, readSoFar in
            if !endOfFile { sawWriter = true; return .wait }
            if readSoFar > 0 || sawWriter { return .endOfFile }
            // End of file before any byte, and no writer seen yet: none has come.
            if monotonicMs() - start < writerSeconds * 1000 { return .wait }
            throw CLIError.passwordSourceStalled(
                "no password came through \(path): it is a FIFO that no process opened for writing within "
                + "\(Int(writerSeconds)) s")
        }
    }

    /// The first line `--extpass`'s command prints on `fd` (our end of its stdout), then what
    /// it prints until it ends, discarded. A command that takes too long or prints too much
    /// is killed (`pid`).
    static func readExternal(_ fd: Int32, pid: pid_t) throws -> SecureBytes {
        _ = fcntl(fd, F_SETFL, pv_fcntl_getfl(fd) | O_NONBLOCK)
        let stalled = { (why: String) -> Error in
            kill(pid, SIGKILL)
            return CLIError.passwordSourceStalled("the --extpass command \(why); it was stopped")
        }
        let line: SecureBytes
        do {
            line = try readLine(fd, what: "the --extpass command", deadline: monotonicMs() + lineSeconds * 1000) { endOfFile, _ in
                endOfFile ? .endOfFile : .wait
            }
        } catch CLIError.passwordSourceStalled {
            throw stalled("printed no complete line within \(Int(lineSeconds)) s")
        } catch CLIError.passwordTooLong(let m) {
            throw stalled("printed a first line longer than \(m) bytes")
        }
        // The rest is read, so that the command does not die of SIGPIPE, zeroed, and bounded.
        var scratch = [UInt8](repeating: 0, count: 4096)
        defer { for i in scratch.indices { scratch[i] = 0 } }
        var more = 0
        let deadline = monotonicMs() + endSeconds * 1000
        while true {
            let r = Glibc.read(fd, &scratch, scratch.count)
            if r == 0 { return line }
            if r > 0 {
                more += r
                if more > moreOutput { line.wipe(); throw stalled("printed more than \(moreOutput >> 20) MiB after the password") }
                continue
            }
            guard errno == EAGAIN || errno == EINTR else { return line }
            let left = deadline - monotonicMs()
            if left <= 0 { line.wipe(); throw stalled("did not end within \(Int(endSeconds)) s of printing the password") }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, Int32(min(left, 200)))
        }
    }

    /// Waits for the `--extpass` command to end, at most `endSeconds`, then kills it.
    /// Returns its wait status, or nil when it had to be killed.
    static func reap(_ pid: pid_t) -> Int32? {
        let deadline = monotonicMs() + endSeconds * 1000
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return status }
            if r < 0 && errno != EINTR { return status }
            if monotonicMs() >= deadline { break }
            usleep(20_000)
        }
        kill(pid, SIGKILL)
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return nil
    }

    enum AtEmpty { case wait, endOfFile }

    /// The first line of the non-blocking `fd` (without "\n" or "\r\n"), at most
    /// `PasswordInput.maximumLength` bytes, one byte at a time so that nothing after it is
    /// consumed. `nothingYet(endOfFile, bytesRead)` decides, when a read finds nothing,
    /// whether to wait (it may throw) or to take end of file as the end of the line.
    /// Past `deadline` (monotonic ms) it throws `.passwordSourceStalled`.
    static func readLine(_ fd: Int32, what: String, deadline: Double,
                         nothingYet: (_ endOfFile: Bool, _ bytesRead: Int) throws -> AtEmpty) throws -> SecureBytes {
        let buffer = SecureBytes(count: PasswordInput.maximumLength + 1)
        defer { buffer.wipe() }
        var n = 0
        try buffer.withUnsafeMutableBytes { p in
            let base = p.baseAddress!
            while n < p.count {
                let r = Glibc.read(fd, base + n, 1)
                if r == 1 {
                    if p[n] == 0x0A { p[n] = 0; return }
                    n += 1
                    continue
                }
                if r < 0 && errno == EINTR { continue }
                if r < 0 && errno != EAGAIN { throw CLIError.cannotReadPassword(source: what, errno: errno) }
                if try nothingYet(r == 0, n) == .endOfFile { return }
                let left = deadline - monotonicMs()
                guard left > 0 else {
                    throw CLIError.passwordSourceStalled("no password came through \(what) within \(Int(lineSeconds)) s")
                }
                if r == 0 {
                    usleep(50_000)   // a FIFO without a writer: poll(2) would report nothing until one writes
                } else {
                    var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    _ = poll(&pfd, 1, Int32(min(left, 200)))
                }
            }
        }
        guard n <= PasswordInput.maximumLength else { throw CLIError.passwordTooLong(maximum: PasswordInput.maximumLength) }
        if n > 0 && buffer.withUnsafeBytes({ $0[n - 1] }) == 0x0D { n -= 1 }
        guard n > 0 else { throw StoreError.emptyPassword }
        return buffer.withUnsafeBytes { SecureBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }
}
