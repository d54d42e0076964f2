import Glibc

/// A non-blocking close-on-exec self-pipe used to wake a poll() loop from another thread
/// (Glibc's Swift module does not export eventfd).
final class WakePipe: @unchecked Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            }
        }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        if readFD >= 0 { close(readFD) }
        if writeFD >= 0 { close(writeFD) }
    }

    /// Async-signal-safe: a single write(2).
    func wake(_ byte: UInt8 = 1) {
        var b = byte
        _ = write(writeFD, &b, 1)
    }

    /// Reads whatever is queued (non-blocking) and returns the bytes.
    func drain() -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let n = read(readFD, &buffer, buffer.count)
            if n <= 0 { break }
            out.append(contentsOf: buffer[0..<n])
        }
        return out
    }
}
