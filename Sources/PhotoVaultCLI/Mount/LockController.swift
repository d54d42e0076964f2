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
    private(set) var state: State = .unlocked
    /// Called once keys are gone before sleep, to release the logind delay inhibitor.
    var releaseSleepInhibitor: (@Sendable () -> Void)?
    /// Milliseconds from the lock event to keys zeroed, and to unmount requested (for tests and logs).
    private(set) var lastKeysZeroedMs: Double?

    init(fs: VaultFileSystem, settings: MountSettings, log: @escaping @Sendable (String) -> Void) {
        self.fs = fs
        self.settings = settings
        self.log = log
        pthread_mutex_init(&mutex, nil)
    }

    var currentState: State {
        pthread_mutex_lock(&mutex); defer { pthread_mutex_unlock(&mutex) }
        return state
    }

    func handle(_ reason: LockReason) {
        if case .terminate(let sig) = reason {
            log("signal \(sig): unmounting")
            setState(.closing)
            fs.wipeAll()
            fs.requestExit()
            return
        }
        let t0 = monotonicMs()
        pthread_mutex_lock(&mutex)
        let previous = state
        if previous == .unlocked { state = settings.onLock == .stay ? .locked : .grace }
        pthread_mutex_unlock(&mutex)
        guard previous == .unlocked else {
            if case .prepareForSleep = reason { releaseSleepInhibitor?() }
            return   // already locking or locked: lock events are idempotent
        }
        if settings.onLock == .unmount { fs.refuseNewOpens() }
        fs.lock()
        let zeroed = monotonicMs() - t0
        lastKeysZeroedMs = zeroed
        log(String(format: "locked (%@): complete keys zeroed in %.1f ms", reason.description, zeroed))
        if settings.onLock == .stay {
            if case .prepareForSleep = reason { releaseSleepInhibitor?() }
            return
        }
        // Before sleep logind waits at most InhibitDelayMaxSec (5 s by default).
        var isSleep = false
        if case .prepareForSleep = reason { isSleep = true }
        let grace = isSleep ? min(settings.lockGrace, 3) : settings.lockGrace
        let thread = Thread { [self] in
            let deadline = monotonicMs() + grace * 1000
            while fs.openWriteHandles(of: .completeUnlessOpen) > 0 && monotonicMs() < deadline {
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

    /// `photovault unlock`: restores the forgotten keys from a freshly unwrapped master key.
    enum UnlockOutcome { case unlocked, notLocked, wrongKey }

    func unlock(masterKey: SecureBytes) -> UnlockOutcome {
        pthread_mutex_lock(&mutex); defer { pthread_mutex_unlock(&mutex) }
        guard state == .locked else { return .notLocked }
        guard fs.unlock(masterKey: masterKey) else {
            log("refused an unlock with a key that is not this vault's")
            return .wrongKey
        }
        state = .unlocked
        log("unlocked")
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
