/// Errors of the crypto layer. Every authentication failure is `authenticationFailed`:
/// callers map it to EIO and never see partial plaintext.
public enum CryptoError: Error, Equatable, CustomStringConvertible {
    case authenticationFailed
    case invalidLength(expected: Int, got: Int)
    case invalidEncoding
    case keyUnavailable
    case libsodiumFailure(String)

    public var description: String {
        switch self {
        case .authenticationFailed: return "authentication failed (data modified or wrong key)"
        case .invalidLength(let e, let g): return "invalid length: expected \(e), got \(g)"
        case .invalidEncoding: return "invalid encoding"
        case .keyUnavailable: return "key not available (locked)"
        case .libsodiumFailure(let what): return "libsodium: \(what)"
        }
    }
}
