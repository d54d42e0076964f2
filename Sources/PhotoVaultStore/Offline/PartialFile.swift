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
