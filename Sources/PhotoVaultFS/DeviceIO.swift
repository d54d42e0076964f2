import Glibc
import CFuse
import Synchronization

/// Reads and writes of /dev/fuse, with one addition libfuse 3.14 (Debian 12) cannot make:
/// the INIT reply asks for `FUSE_HANDLE_KILLPRIV_V2`.
///
/// Without it the kernel asks the daemon for `security.capability` before *every* write
/// (`file_remove_privs`), so a 4 KiB random write costs two round trips. With it the kernel
/// marks the superblock `SB_NOSEC`, asks once per inode and remembers the answer (`S_NOSEC`).
/// In exchange the filesystem must drop setuid/setgid bits and file capabilities on write,
/// truncate and chown. This filesystem never has any: it refuses to store
/// `security.capability` (`EncryptedBackend.sealXattrName`; other `security.*` and
/// `trusted.*` attributes are stored), and it never keeps setuid/setgid bits on regular
/// files (see `VaultFileSystem.fileModeBits`). So there is nothing to drop, and the promise holds.
///
/// libfuse hands every request to `read` and every reply to `writev` here (`fuse_session_custom_io`
/// on the descriptor `fuse_session_mount` opened). `read` counts requests by opcode (tests and
/// benchmarks read the counts); until INIT has been answered it also looks for INIT, and
/// `writev` adds the flag to the reply of that request. After that, `writev` is the plain
/// system call behind one atomic load.
final class DeviceIO: Sendable {
    // linux/fuse.h (protocol 7.33+): opcode and flag; offsets in fuse_in_header (40 bytes),
    // fuse_init_in and fuse_init_out, which are fixed by the protocol.
    static let opInit: UInt32 = 26
    static let handleKillprivV2: UInt32 = 1 << 28
    static let inHeaderSize = 40
    static let initInFlagsOffset = 12
    static let initOutFlagsOffset = 12

    /// Set once the INIT reply has gone out: later traffic is not inspected.
    private let initDone = Atomic<Bool>(false)
    /// `unique` of the INIT request whose reply gets the flag (0: none pending).
    private let pendingInit = Atomic<UInt64>(0)
    /// The kernel offered the flag and the reply asked for it.
    let killprivV2 = Atomic<Bool>(false)
    /// Requests received, by FUSE opcode (linux/fuse.h numbering; 0 holds the rest).
    private let counts = InlineArray<64, Atomic<Int>> { _ in Atomic(0) }

    /// How many requests with `opcode` the kernel has sent.
    func requests(_ opcode: UInt32) -> Int {
        counts[opcode < 64 ? Int(opcode) : 0].load(ordering: .relaxed)
    }

    /// Routes `se`'s device traffic through the hooks below. Call after `fuse_session_mount`.
    static func install(on se: OpaquePointer) -> Bool {
        let fd = fuse_session_fd(se)
        guard fd >= 0 else { return false }
        var io = fuse_custom_io()
        io.read = { fd, buf, len, ud in
            let n = Glibc.read(fd, buf, len)
            // errno must reach libfuse untouched on failure: return before anything else runs.
            guard n >= 0, let buf, let ud else { return n }
            VaultFileSystem.from(ud).deviceIO.sawRequest(UnsafeRawPointer(buf), count: n)
            return n
        }
        io.writev = { fd, iov, count, ud in
            if let iov, let ud { VaultFileSystem.from(ud).deviceIO.willReply(iov, count: Int(count)) }
            return Glibc.writev(fd, iov, count)
        }
        return fuse_session_custom_io(se, &io, fd) == 0
    }

    private func sawRequest(_ buf: UnsafeRawPointer, count: Int) {
        guard count >= 8 else { return }
        let opcode = buf.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
        counts[opcode < 64 ? Int(opcode) : 0].add(1, ordering: .relaxed)
        guard !initDone.load(ordering: .acquiring) else { return }
        let h = Self.inHeaderSize
        guard count >= h + Self.initInFlagsOffset + 4, opcode == Self.opInit else { return }
        let offered = buf.loadUnaligned(fromByteOffset: h + Self.initInFlagsOffset, as: UInt32.self)
        guard offered & Self.handleKillprivV2 != 0 else { initDone.store(true, ordering: .releasing); return }
        pendingInit.store(buf.loadUnaligned(fromByteOffset: 8, as: UInt64.self), ordering: .releasing)
    }

    private func willReply(_ iov: UnsafeMutablePointer<iovec>, count: Int) {
        guard !initDone.load(ordering: .acquiring) else { return }
        let unique = pendingInit.load(ordering: .acquiring)
        // fuse_out_header: len, error, unique; then fuse_init_out.
        guard unique != 0, count >= 2, iov[0].iov_len >= 16, let head = iov[0].iov_base,
              head.loadUnaligned(fromByteOffset: 8, as: UInt64.self) == unique else { return }
        defer { initDone.store(true, ordering: .releasing) }
        guard head.loadUnaligned(fromByteOffset: 4, as: Int32.self) == 0,
              iov[1].iov_len >= Self.initOutFlagsOffset + 4, let out = iov[1].iov_base else { return }
        let flags = out.loadUnaligned(fromByteOffset: Self.initOutFlagsOffset, as: UInt32.self)
        out.storeBytes(of: flags | Self.handleKillprivV2, toByteOffset: Self.initOutFlagsOffset, as: UInt32.self)
        killprivV2.store(true, ordering: .releasing)
    }
}
