import Glibc
import PhotoVaultCrypto
import PhotoVaultStore

/// Failure of one filesystem request. Every case maps to the errno the kernel passes on to
/// the application; nothing else crosses the FUSE boundary.
enum FSError: Error, Equatable, CustomStringConvertible {
    case notFound
    case exists
    case notDirectory
    case isDirectory
    case notEmpty
    case permissionDenied            // EPERM: the operation is never allowed (read-only virtual xattr)
    case locked                      // EACCES: the class key is forgotten (device locked)
    case integrity(String)           // EIO: authentication failed; the detail names the plaintext path
    case invalidArgument
    case nameTooLong
    case notSupported
    case noAttribute
    case rangeTooSmall
    case badHandle
    case posix(Int32)

    var errno: Int32 {
        switch self {
        case .notFound: return ENOENT
        case .exists: return EEXIST
        case .notDirectory: return ENOTDIR
        case .isDirectory: return EISDIR
        case .notEmpty: return ENOTEMPTY
        case .permissionDenied: return EPERM
        case .locked: return EACCES
        case .integrity: return EIO
        case .invalidArgument: return EINVAL
        case .nameTooLong: return ENAMETOOLONG
        case .notSupported: return EOPNOTSUPP
        case .noAttribute: return ENODATA
        case .rangeTooSmall: return ERANGE
        case .badHandle: return EBADF
        case .posix(let e): return e
        }
    }

    /// The error of the last failed system call.
    static func last() -> FSError { .posix(Glibc.errno) }

    /// Converts any error thrown below the adapter (store, crypto) into a request failure.
    static func from(_ error: Error) -> FSError {
        switch error {
        case let e as FSError: return e
        case let e as StoreError:
            switch e {
            case .locked: return .locked
            case .integrity(let p, let d): return .integrity(p.isEmpty ? d : "\(p): \(d)")
            // A damaged or unreadable header or directory record is an integrity failure
            // too: EIO with a log line, not a silent EIO.
            case .corruptStore, .corruptRecord, .unknownVersion, .unknownVersionOf: return .integrity(e.description)
            case .notFound: return .notFound
            case .exists: return .exists
            default: return .posix(e.errno)
            }
        case let e as CryptoError:
            switch e {
            case .keyUnavailable: return .locked
            case .authenticationFailed: return .integrity("authentication failed")
            case .memoryNotLocked: return .posix(ENOMEM)
            default: return .posix(EIO)
            }
        default: return .posix(EIO)
        }
    }

    var description: String {
        switch self {
        case .integrity(let d): return "integrity failure: \(d)"
        default: return String(cString: strerror(errno))
        }
    }
}

/// Why the filesystem could not be mounted. The CLI prints `description` and exits.
public enum MountError: Error, Equatable, CustomStringConvertible {
    case fuseUnavailable(Int32)           // /dev/fuse missing (ENOENT: module not loaded, container) or unusable
    case mountpointMissing(String)
    case mountpointNotDirectory(String)
    case mountpointNotEmpty(String)
    case alreadyMounted(String)
    case backingUnavailable(String, Int32)
    case sessionFailed
    case mountFailed(String)

    public var description: String {
        switch self {
        case .fuseUnavailable(let e): return "/dev/fuse is not available: \(String(cString: strerror(e)))"
        case .mountpointMissing(let p): return "mount point \(p) does not exist"
        case .mountpointNotDirectory(let p): return "mount point \(p) is not a directory"
        case .mountpointNotEmpty(let p): return "mount point \(p) is not empty"
        case .alreadyMounted(let p): return "something is already mounted at \(p)"
        case .backingUnavailable(let p, let e): return "cannot open the encrypted tree \(p): \(String(cString: strerror(e)))"
        case .sessionFailed: return "libfuse could not create a session (bad mount options?)"
        case .mountFailed(let p): return "mounting at \(p) failed (see the message above; is fusermount3 installed and setuid?)"
        }
    }
}
