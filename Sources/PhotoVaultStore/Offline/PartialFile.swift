import Glibc
import Synchronization

/// The temp file an offline import or export is writing (`.pvtmp-*` ciphertext in the vault,
/// `.pvexport-*` plaintext beside an export's destination), removed when a signal ends the
/// command: a Ctrl-C (SIGINT), SIGTERM, SIGHUP or SIGQUIT left it behind, half-written (the
/// mount hides a `.pvtmp-*` and `fsck --repair` removes it, but nothing removed a partial
/// plaintext `.pvexport-*`). `catchSignals()` installs the handler (once the password was
/// read: `PasswordInput` has its own), which unlinks the registered file, then lets the
/// signal end the process as it would have (exit status 128 + signal). A signal the caller
/// ignored (a background job of a script, `nohup`) stays ignored.
///
/// An import's handler then also removes the directories the import made that hold nothing
/// (`MadeDirectories`), deepest first, as a failed import does. A signal during one of the
/// short steps a signal must not cut in two (making a directory or a symlink, a final
/// rename: `DeferredSignals`) is held until the step ends, then handled so.
///
/// The handler only loads atomics and calls unlinkat(2), openat(2), getdents64(2), close(2),
/// signal(2) and raise(3), which are async-signal-safe; the other signals of `signals` wait
/// while it runs, so that none ends the command halfway through its removals. A file is
/// registered before it is created and cleared after its rename or its removal; a signal
/// between the rename and the clearing finds nothing to unlink (ENOENT), the file being
/// complete under its name by then.
public enum PartialFile {
    /// Longest temp name (`.pvexport-` and 16 hex digits), with its terminating NUL.
    static let capacity = 64
    /// The directory descriptor of the registered file, -1 when none is.
    private static let dirfd = Atomic<Int32>(-1)
    /// Its name, written before `dirfd` is published.
    private static let name: UnsafeMutablePointer<CChar> = {
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: capacity)
        p.initialize(repeating: 0, count: capacity)
        return p
    }()

    public static let signals: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]

    /// Installs the handler for `signals` (not for one the process ignores).
    public static func catchSignals() {
        _ = dirfd.load(ordering: .relaxed)   // both statics initialised before a handler may read them
        _ = name
        MadeDirectories.Records.prepare()
        DeferredSignals.prepare()
        var action = sigaction()
        action.__sigaction_handler.sa_handler = handler
        action.sa_flags = SA_RESTART
        sigemptyset(&action.sa_mask)
        for s in signals { sigaddset(&action.sa_mask, s) }
        for s in signals {
            var old = sigaction()
            guard sigaction(s, nil, &old) == 0,
                  unsafeBitCast(old.__sigaction_handler.sa_handler, to: Int.self) != unsafeBitCast(SIG_IGN, to: Int.self)
            else { continue }
            sigaction(s, &action, nil)
        }
    }

    private static let handler: @convention(c) (Int32) -> Void = { sig in
        if DeferredSignals.hold(sig) { return }   // raised again when the step ends
        let fd = PartialFile.dirfd.exchange(-1, ordering: .acquiring)
        if fd >= 0 { _ = unlinkat(fd, PartialFile.name, 0) }
        MadeDirectories.Records.removeEmptyOnSignal()
        InterruptNote.write()
        signal(sig, SIG_DFL)
        raise(sig)
    }

    /// `tmp` in `dirfd` is about to be created: a signal from now on removes it.
    static func register(_ dirfd: Int32, _ tmp: [CChar]) {
        precondition(tmp.count <= capacity && tmp.last == 0, "temp name too long")
        PartialFile.dirfd.store(-1, ordering: .releasing)
        for (i, c) in tmp.enumerated() { name[i] = c }
        PartialFile.dirfd.store(dirfd, ordering: .releasing)
    }

    /// The registered file is in place under its name, or removed.
    static func clear() { dirfd.store(-1, ordering: .releasing) }
}

/// The line a signal that ends an offline import or export writes to standard error before
/// the command dies (a Ctrl-C printed nothing, exit 130, so the user did not know what was
/// kept or how to go on). The command keeps it current (`set`, after each file it starts or
/// completes); the handler only loads an atomic and calls write(2), which is
/// async-signal-safe. Two buffers: `set` fills the one the handler is not pointed at, then
/// points it there.
public enum InterruptNote {
    static let capacity = 4096
    private static let buffers: UnsafeMutablePointer<UInt8> = {
        let p = UnsafeMutablePointer<UInt8>.allocate(capacity: 2 * capacity)
        p.initialize(repeating: 0, count: 2 * capacity)
        return p
    }()
    /// Which buffer (bit 32) and how many bytes of it (low bits); 0 when there is no note.
    private static let current = Atomic<Int64>(0)

    /// The note a signal would print now (cut at `capacity` bytes).
    public static func set(_ text: String) {
        let bytes = Array(text.utf8.prefix(capacity))
        let which: Int64 = (current.load(ordering: .acquiring) >> 32) & 1 == 0 ? 1 : 0
        let base = buffers + Int(which) * capacity
        for (i, b) in bytes.enumerated() { base[i] = b }
        current.store(which << 32 | Int64(bytes.count), ordering: .releasing)
    }

    /// No note (the command is past the point where one applies).
    public static func clear() { current.store(0, ordering: .releasing) }

    /// For the signal handler.
    static func write() {
        let c = current.load(ordering: .acquiring)
        let count = Int(c & 0xffff_ffff)
        guard count > 0 else { return }
        _ = Glibc.write(STDERR_FILENO, buffers + Int((c >> 32) & 1) * capacity, count)
    }
}
