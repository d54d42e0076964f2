import Foundation
import Glibc
import PhotoVaultCrypto
import PhotoVaultFS
import PhotoVaultLock

/// Decides what a lock event does to a live mount (issue "Protection classes per file, and a
/// mount that locks itself"):
/// * `--on-lock unmount` (default): `complete` keys are zeroed at once; `complete-unless-open`
///   files open for writing may finish for up to `--lock-grace` while no new open succeeds;
///   then every key is zeroed and the filesystem unmounted.
/// * `--on-lock stay`: keys of `complete` and the `complete-unless-open` private key are
///   zeroed; the mount stays and `photovault unlock` restores them.
/// Never restores keys because of a signal: only `unlock` with the password does.
final class LockController: @unchecked Sendable {
    enum State: String { case unlocked, grace, locked, closing }

    private let fs: VaultFileSystem
    private let settings: MountSettings
    private let log: @Sendable (String) -> Void
    private var mutex = pthread_mutex_t()
    /// Held from a lock event's state change until its keys are zeroed, and by `unlock`, so an
    /// unlock cannot restore keys that a lock in progress then wipes.
    private var transition = pthread_mutex_t()
    private(set) var state: State = .unlocked
    /// Until when (monotonic ms) the grace period may last; a suspend during it shortens it.
    private var graceDeadline = Double.infinity
    /// Called once keys are gone before sleep, to release the logind delay inhibitor.
    var releaseSleepInhibitor: (@Sendable () -> Void)?
    /// Called after a successful `unlock`, once the state says unlocked: a delay inhibitor
    /// is wanted again (one not taken while locked, e.g. from a logind that restarted).
    var takeSleepInhibitor: (@Sendable () -> Void)?
    /// Called when an `unlock` succeeds, just before the state becomes unlocked (restarts the
    /// idle timer: it fired for the lock, or while locked, and was then ignored).
    var onUnlocked: (@Sendable () -> Void)?
    /// Called once per lock, after the `complete` keys are zeroed (off the FUSE threads): the
    /// desktop's recent-files list loses its vault entries (docs/PRIVACY.md).
    var onLocked: (@Sendable () -> Void)?
    /// Milliseconds from the lock event to keys zeroed, and to unmount requested (for tests and logs).
    private(set) var lastKeysZeroedMs: Double?
    /// Lock events so far, counted even when the vault was locked already (under `mutex`).
    /// `photovault unlock` reads it before deriving the key and sends it back with the key: an
    /// unlock that a lock overtook (the lid closed, or the screen locked, while Argon2id ran)
    /// is refused instead of opening the vault behind the locked screen.
    private var lockEvents: UInt64 = 0

    init(fs: VaultFileSystem, settings: MountSettings, log: @escaping @Sendable (String) -> Void) {
        self.fs = fs
        self.settings = settings
        self.log = log
        pthread_mutex_init(&mutex, nil)
        pthread_mutex_init(&transition, nil)
    }

    var currentState: State {
        pthread_mutex_lock(&mutex); defer { pthread_mutex_unlock(&mutex) }
        return state
    }

    func handle(_ reason: LockReason) {
        if case .terminate(let sig) = reason {
            log("signal \(sig): unmounting")
            shutDown()
            fs.requestExit()
            return
        }
        let t0 = monotonicMs()
        var isSleep = false
        if case .prepareForSleep = reason { isSleep = true }
        // Before sleep logind waits at most InhibitDelayMaxSec (5 s by default).
        let sleepGrace = 3.0
        // An idle timeout finds nothing to forget unless the vault is unlocked: then it is no
        // lock event. Counted, it refused an unlock whose key derivation it overtook (`--on-lock
        // stay`: the timer runs on while locked). Checked before `transition` too, so a timeout
        // seen while locked that waits there for an unlock does not lock the vault just opened.
        if case .idle = reason, currentState != .unlocked { return }
        pthread_mutex_lock(&transition)
        pthread_mutex_lock(&mutex)
        if case .idle = reason, state != .unlocked {
            pthread_mutex_unlock(&mutex)
            pthread_mutex_unlock(&transition)
            return
        }
        lockEvents &+= 1
        let previous = state
        if previous == .unlocked {
            state = settings.onLock == .stay ? .locked : .grace
            graceDeadline = t0 + (isSleep ? min(settings.lockGrace, sleepGrace) : settings.lockGrace) * 1000
        } else if previous == .grace && isSleep {
            // A suspend during the grace period: it ends within the sleep delay, and the
            // grace thread releases the inhibitor once every key is zeroed.
            graceDeadline = min(graceDeadline, t0 + min(settings.lockGrace, sleepGrace) * 1000)
        }
        pthread_mutex_unlock(&mutex)
        guard previous == .unlocked else {
            pthread_mutex_unlock(&transition)
            if isSleep && previous != .grace {
                // Locked and staying (keys of `complete` files already zeroed), or closing,
                // whose wipe this waits for (wipeAll returns once the keys are gone).
                if previous == .closing { fs.wipeAll() }
                releaseSleepInhibitor?()
            }
            return   // already locking or locked: lock events are idempotent
        }
        if settings.onLock == .unmount { fs.refuseNewOpens() }
        fs.lock()
        pthread_mutex_unlock(&transition)
        let zeroed = monotonicMs() - t0
        lastKeysZeroedMs = zeroed
        log(String(format: "locked (%@): complete keys zeroed in %.1f ms", reason.description, zeroed))
        if let hook = onLocked { Thread { hook() }.start() }
        if settings.onLock == .stay {
            if isSleep { releaseSleepInhibitor?() }
            return
        }
        let thread = Thread { [self] in
            while fs.openWriteHandles(of: .completeUnlessOpen) > 0 && monotonicMs() < currentGraceDeadline {
                usleep(50_000)
            }
            setState(.closing)
            fs.wipeAll()
            releaseSleepInhibitor?()
            log(String(format: "all keys zeroed %.1f ms after the lock; unmounting", monotonicMs() - t0))
            fs.requestExit()
        }
        thread.start()
    }

    /// The mount is going away (a terminating signal, or the loop has ended): every key is
    /// zeroed, and an `unlock` waiting for `transition` then finds `.closing` and restores none.
    func shutDown() {
        pthread_mutex_lock(&transition)
        setState(.closing)
        fs.wipeAll()
        pthread_mutex_unlock(&transition)
    }

    /// How many lock events there have been (see `lockEvents`).
    var lockEventCount: UInt64 {
        pthread_mutex_lock(&mutex); defer { pthread_mutex_unlock(&mutex) }
        return lockEvents
    }

    private var currentGraceDeadline: Double {
        pthread_mutex_lock(&mutex); defer { pthread_mutex_unlock(&mutex) }
        return graceDeadline
    }

    /// `photovault unlock`: restores the forgotten keys from a freshly unwrapped master key.
    /// `noLockedMemory`: the keys found no memory locked against swapping (RLIMIT_MEMLOCK
    /// reached); the mount stays locked, with no part of the key set restored.
    enum UnlockOutcome { case unlocked, notLocked, wrongKey, lockedSince, noLockedMemory }

    /// `seenLockEvents`: `lockEventCount` when the client started (nil from a client that
    /// predates it); any lock event since then wins over this unlock.
    func unlock(masterKey: SecureBytes, seenLockEvents: UInt64?) -> UnlockOutcome {
        pthread_mutex_lock(&transition); defer { pthread_mutex_unlock(&transition) }
        guard currentState == .locked else { return .notLocked }
        if let seen = seenLockEvents, seen != lockEventCount {
            log("refused an unlock that a lock event overtook")
            return .lockedSince
        }
        do {
            guard try fs.unlock(masterKey: masterKey) else {
                log("refused an unlock with a key that is not this vault's")
                return .wrongKey
            }
        } catch {
            log("unlock failed, the vault stays locked: \(error)")
            return .noLockedMemory
        }
        // The idle timer restarts from now before the state says unlocked, so that no tick
        // after that counts the time spent locked as idle time of the unlocked vault.
        onUnlocked?()
        setState(.unlocked)
        log("unlocked")
        takeSleepInhibitor?()
        return .unlocked
    }

    private func setState(_ s: State) {
        pthread_mutex_lock(&mutex); state = s; pthread_mutex_unlock(&mutex)
    }
}

func monotonicMs() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) * 1000 + Double(ts.tv_nsec) / 1_000_000
}
