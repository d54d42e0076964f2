import Foundation
import Glibc

/// Holds at most one logind delay-inhibitor fd. Taking happens on the system-bus thread; release
/// happens from the owner after keys are evicted, on any thread, hence the lock.
final class SleepInhibitor: @unchecked Sendable {
    private let lock = NSLock()
    private var fd: Int32 = -1

    var isHeld: Bool { lock.withLock { fd >= 0 } }

    /// Keeps `newFD` unless one is already held (then `newFD` is closed: never hold two).
    func hold(_ newFD: Int32) {
        let extra: Int32 = lock.withLock {
            if fd >= 0 { return newFD }
            fd = newFD
            return -1
        }
        if extra >= 0 { close(extra) }
    }

    /// Closes the held fd, letting logind proceed with the suspend. Returns whether one was held.
    @discardableResult
    func release() -> Bool {
        let old: Int32 = lock.withLock {
            let o = fd
            fd = -1
            return o
        }
        if old >= 0 { close(old) }
        return old >= 0
    }
}
