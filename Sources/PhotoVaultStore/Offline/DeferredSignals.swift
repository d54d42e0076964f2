import Glibc
import Synchronization

/// Short steps of an offline import that a signal must not cut in two: making a directory
/// (a long name's companion, a `.pvtmp-` directory, its `.pvdir`, the rename to its name,
/// its listing in `MadeDirectories`), a symlink (companion, `.pvtmp-` link, its times, the
/// rename), a file's companion and final rename, and the removal of an empty directory
/// (`.pvdir`, rmdir, companion). Cut by a signal, each left a `.pvtmp-*` entry, an orphan
/// companion, or a directory without its `.pvdir`: only the partial file is known to
/// `PartialFile`'s handler, which removes it at once.
///
/// A signal that handler receives during a step is held, and raised again when the step
/// ends (done, or failed and cleaned up by its own error path): the handler then cleans up
/// as always and the signal ends the command. A step makes no more than a few system calls
/// and fsyncs, so the wait is short; a second signal during the same step acts at once (a
/// step stuck in a hung fsync can still be interrupted, at the price of its temp entry,
/// which `fsck --repair` removes).
public enum DeferredSignals {
    /// Steps in progress (the low 16 bits; steps nest) and the signal held (above them).
    private static let state = Atomic<Int32>(0)

    /// Runs `body` as one step. Not reentrant across threads: the offline tools run their
    /// steps on one thread.
    public static func during<T>(_ body: () throws -> T) rethrows -> T {
        state.wrappingAdd(1, ordering: .acquiringAndReleasing)
        defer { leave() }
        return try body()
    }

    /// Initialises the state before a handler can read it.
    static func prepare() { _ = state.load(ordering: .relaxed) }

    private static func leave() {
        let now = state.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue
        guard now & 0xffff == 0, now >> 16 != 0 else { return }
        let held = state.exchange(0, ordering: .acquiringAndReleasing) >> 16
        if held != 0 { raise(held) }
    }

    /// For the signal handler: whether `sig` is held for the end of a step (a step is in
    /// progress and holds no signal yet). Only atomics: async-signal-safe.
    static func hold(_ sig: Int32) -> Bool {
        var s = state.load(ordering: .acquiring)
        while s & 0xffff != 0 && s >> 16 == 0 {
            let (held, now) = state.compareExchange(expected: s, desired: s | (sig << 16), ordering: .acquiringAndReleasing)
            if held { return true }
            s = now
        }
        return false
    }
}
