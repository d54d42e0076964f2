import Glibc

/// Errors of the crypto layer. Every authentication failure is `authenticationFailed`:
/// callers map it to EIO and never see partial plaintext.
public enum CryptoError: Error, Equatable, CustomStringConvertible {
    case authenticationFailed
    case invalidLength(expected: Int, got: Int)
    case invalidEncoding
    case keyUnavailable
    case libsodiumFailure(String)
    /// Memory for a key could not be locked in RAM (RLIMIT_MEMLOCK reached without
    /// CAP_IPC_LOCK): the operation that needed the key fails instead of using memory that
    /// can be swapped.
    case memoryNotLocked

    public var description: String {
        switch self {
        case .authenticationFailed: return "authentication failed (data modified or wrong key)"
        case .invalidLength(let e, let g): return "invalid length: expected \(e), got \(g)"
        case .invalidEncoding: return "invalid encoding"
        case .keyUnavailable: return "key not available (locked)"
        case .libsodiumFailure(let what): return "libsodium: \(what)"
        case .memoryNotLocked: return CryptoError.memoryNotLockedMessage
        }
    }
}

extension CryptoError {
    /// The one line that explains `memoryNotLocked`, with the limit in force.
    public static var memoryNotLockedMessage: String {
        "keys cannot be kept in locked memory: the locked-memory limit (ulimit -l) is \(lockedMemoryLimit ?? "reached"); "
            + "raise it to at least 1024 KiB or run with CAP_IPC_LOCK"
    }

    /// This process's locked-memory limit (RLIMIT_MEMLOCK) as "N KiB"; nil when unlimited.
    public static var lockedMemoryLimit: String? {
        var lim = rlimit()
        return getrlimit(__rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue), &lim) == 0 && lim.rlim_cur != rlim_t.max
            ? "\(lim.rlim_cur / 1024) KiB" : nil
    }
}
