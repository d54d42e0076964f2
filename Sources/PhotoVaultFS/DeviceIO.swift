import Glibc
import CFuse
import Synchronization

/// Reads and writes of /dev/fuse, with what libfuse 3.14 (Debian 12) cannot do: the INIT
/// reply asks for `FUSE_HANDLE_KILLPRIV_V2`, and the kernel's "drop setuid/setgid" flag of
/// each request is handed to the operation (`requestDropsSetID`).
///
/// Without the flag the kernel asks the daemon for `security.capability` before *every* write
/// (`file_remove_privs`), so a 4 KiB random write costs two round trips. With it the kernel
/// marks the superblock `SB_NOSEC`, asks once per inode and remembers the answer (`S_NOSEC`).
/// In exchange the filesystem must drop setuid/setgid bits and file capabilities on write,
/// truncate and chown. File capabilities it never has: it refuses to store
/// `security.capability` (`EncryptedBackend.sealXattrName`; other `security.*` and
/// `trusted.*` attributes are stored). Setuid/setgid bits it keeps as written, and drops
/// them where the kernel says to: a WRITE with `FUSE_WRITE_KILL_SUIDGID`, a SETATTR of the
/// size with `FATTR_KILL_SUIDGID`, an OPEN or CREATE with O_TRUNC and `FUSE_OPEN_KILL_SUIDGID`
/// (the kernel sets them for a caller without CAP_FSETID; `SetIDBits` applies Linux's rule).
/// libfuse passes none of them on to a write or an open, so `read` notes the flag of each
/// request in a thread-local: libfuse's worker thread reads a request and runs its operation
/// before reading the next. A chown needs nothing: the daemon's own chown of the ciphertext
/// makes the store's file system drop the bits, as for any chown.
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
    static let opSetattr: UInt32 = 4, opOpen: UInt32 = 14, opWrite: UInt32 = 16, opCreate: UInt32 = 35
    /// Offsets after the header: fuse_setattr_in.valid, fuse_open_in.open_flags,
    /// fuse_write_in.write_flags, fuse_create_in.open_flags; and their "drop" bits.
    static let setattrValidOffset = 0, openFlagsOffset = 4, writeFlagsOffset = 20, createFlagsOffset = 12
    static let fattrKillSUIDGID: UInt32 = 1 << 11, openKillSUIDGID: UInt32 = 1 << 0, writeKillSUIDGID: UInt32 = 1 << 2
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

    /// Whether the request this thread is serving asks for the file's setuid/setgid bits to be
    /// dropped (see above). Read by the operations of the request; false outside the mount.
    static var requestDropsSetID: Bool { pthread_getspecific(dropsSetIDKey) != nil }

    private static let dropsSetIDKey: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "pthread_key_create")
        return key
    }()

    private static func noteDropsSetID(_ opcode: UInt32, _ buf: UnsafeRawPointer, count: Int) {
        let field: (offset: Int, bit: UInt32)?
        switch opcode {
        case opWrite: field = (writeFlagsOffset, writeKillSUIDGID)
        case opSetattr: field = (setattrValidOffset, fattrKillSUIDGID)
        case opOpen: field = (openFlagsOffset, openKillSUIDGID)
        case opCreate: field = (createFlagsOffset, openKillSUIDGID)
        default: field = nil
        }
        var drops = false
        if let f = field, count >= inHeaderSize + f.offset + 4 {
            drops = buf.loadUnaligned(fromByteOffset: inHeaderSize + f.offset, as: UInt32.self) & f.bit != 0
        }
        // Only a change is stored: most requests leave it false.
        if drops != requestDropsSetID { pthread_setspecific(dropsSetIDKey, drops ? UnsafeRawPointer(bitPattern: 1) : nil) }
    }

    private func sawRequest(_ buf: UnsafeRawPointer, count: Int) {
        guard count >= 8 else { return }
        let opcode = buf.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
        counts[opcode < 64 ? Int(opcode) : 0].add(1, ordering: .relaxed)
        Self.noteDropsSetID(opcode, buf, count: count)
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
