import Glibc
import PhotoVaultCrypto

/// Every failure of the store layer, each with the errno a filesystem reports for it and the
/// exit code the `photovault` command ends with (documented in README and `--help`).
public enum StoreError: Error, Equatable, CustomStringConvertible {
    case emptyUsername
    case emptyPassword
    case passwordTooShort(minimum: Int)
    case accountExists
    case noSuchAccount
    case wrongPassword
    case storeNotInitialised(path: String)
    case storeExists(path: String)
    case corruptRecord(String)
    case corruptStore(String)
    case unknownVersion(found: Int, supported: Int)
    /// The same, for the header or `.pvdir` of one entry of a vault (offline tools name it).
    case unknownVersionOf(path: String, found: Int, supported: Int)
    case weakKDFParameters
    /// A cost in the store config (`kdfFloor`, `accountNameKDF`) below the allowed floor.
    case weakStoreKDFParameters(field: String)
    case storeBusy
    /// A password change whose account record was replaced between the check of the current
    /// password and the change (`AccountStore.finishPasswordChange`).
    case accountChangedMeanwhile
    case wrongDevice
    case integrity(path: String, detail: String)     // authentication failure of data
    case locked                                      // class key forgotten
    case notFound(String)
    case exists(String)
    case noSpace                                     // on the store's device
    case destinationFull(String)                     // on export's destination
    case io(errno: Int32, context: String)
    case invalidArgument(String)
    /// The change took effect (the file is in place under its name) but the fsync of its
    /// directory failed, so a crash may still undo it: neither a failure nor a plain success.
    case notConfirmedOnDisk(done: String, afterCrash: String, errno: Int32)
    /// A key could not be held in memory locked in RAM (RLIMIT_MEMLOCK without CAP_IPC_LOCK,
    /// `CryptoError.memoryNotLocked`): the file is not opened, the mount not made.
    case keyMemoryNotLocked
    /// A password attempt whose count of failures could not be written to the store
    /// (LoginThrottle): the password was not checked, so that filling the store's disk
    /// cannot turn the delays off.
    case attemptNotCounted(errno: Int32)
    /// The store, or a directory above it, is another user's or writable by others
    /// (`StoreTrust`); the message says which and how to fix it.
    case untrustedStore(String)

    public var errno: Int32 {
        switch self {
        case .integrity, .corruptRecord, .corruptStore, .unknownVersion, .unknownVersionOf: return EIO
        case .locked, .wrongPassword, .wrongDevice, .untrustedStore: return EACCES
        case .notFound, .noSuchAccount, .storeNotInitialised: return ENOENT
        case .exists, .accountExists, .storeExists: return EEXIST
        case .noSpace, .destinationFull: return ENOSPC
        case .storeBusy, .accountChangedMeanwhile: return EBUSY
        case .keyMemoryNotLocked: return ENOMEM
        case .io(let e, _), .notConfirmedOnDisk(_, _, let e), .attemptNotCounted(let e): return e
        default: return EINVAL
        }
    }

    /// Distinct exit codes; the table is in README.md and `photovault --help`.
    public var exitCode: Int32 {
        switch self {
        case .storeNotInitialised: return 3
        case .noSuchAccount: return 4
        case .wrongPassword: return 5
        case .accountExists: return 6
        case .emptyUsername, .emptyPassword: return 7
        case .passwordTooShort: return 8
        case .corruptRecord, .corruptStore: return 9
        case .unknownVersion, .unknownVersionOf: return 10
        case .storeBusy: return 11
        case .accountChangedMeanwhile: return 31
        case .weakKDFParameters, .weakStoreKDFParameters: return 12
        case .wrongDevice: return 13
        case .noSpace, .destinationFull: return 19
        case .exists, .storeExists: return 20
        case .integrity: return 22
        case .locked: return 23
        case .notFound: return 24
        case .invalidArgument: return 2
        case .untrustedStore: return 33
        case .io: return 1
        case .notConfirmedOnDisk: return 28
        case .keyMemoryNotLocked: return 30
        case .attemptNotCounted(let e): return e == ENOSPC || e == EDQUOT ? 19 : 1
        }
    }

    /// "version 1", or "versions 1 to 2" where a reader takes several (file headers).
    static func versions(upTo s: Int) -> String { s <= 1 ? "version \(s)" : "versions 1 to \(s)" }

    public var description: String {
        switch self {
        case .emptyUsername: return "the user name is empty"
        case .emptyPassword: return "the password is empty"
        case .passwordTooShort(let n): return "the password is too short: it needs at least \(n) characters"
        case .accountExists: return "that account already exists in this store"
        case .noSuchAccount: return "no such account in this store"
        case .wrongPassword: return "wrong password"
        case .storeNotInitialised(let p): return "no PhotoVault store at \(p) (run 'photovault init')"
        case .storeExists(let p): return "a PhotoVault store already exists at \(p)"
        case .corruptRecord(let d): return "the account record is corrupt: \(d)"
        case .corruptStore(let d): return "the store is corrupt: \(d)"
        case .unknownVersion(let f, let s): return "unknown format version \(f) (this photovault reads \(Self.versions(upTo: s)))"
        case .unknownVersionOf(let p, let f, let s): return "\(p): unknown format version \(f) (this photovault reads \(Self.versions(upTo: s)))"
        case .weakKDFParameters: return "the account record's Argon2id cost is below the allowed floor (tampered record?)"
        case .weakStoreKDFParameters(let f):
            return "the store config's \(f) Argon2id cost is below the allowed floor (tampered \(StoreConfig.fileName)?)"
        case .storeBusy: return "the store is locked by another photovault command; try again"
        case .accountChangedMeanwhile:
            return "the account was changed by another command (passwd, reset-password or remove) while the new password "
                + "was typed; nothing was changed: run 'photovault user passwd' again"
        case .wrongDevice: return "this account is bound to another device (--this-device-only) or the device secret changed"
        case .integrity(let p, let d): return "integrity check failed for \(p): \(d)"
        case .locked: return "the vault is locked"
        case .notFound(let p): return "not found: \(p)"
        case .exists(let p): return "already exists: \(p) (use --force to overwrite)"
        case .noSpace: return "no space left on the device holding the store"
        case .destinationFull(let p): return "no space left on the device holding \(p)"
        case .io(let e, let c): return "\(c): \(String(cString: strerror(e)))"
        case .invalidArgument(let d): return d
        case .untrustedStore(let d): return "refusing the store: " + d
        case .notConfirmedOnDisk(let done, let afterCrash, let e):
            return "\(done), but the change could not be confirmed on disk (fsync of its directory: "
                + "\(String(cString: strerror(e)))): after a crash \(afterCrash)"
        case .keyMemoryNotLocked: return CryptoError.memoryNotLockedMessage
        case .attemptNotCounted(let e):
            let what = "the password was not checked: the attempt could not be counted in the store"
            return e == ENOSPC || e == EDQUOT ? "\(what) (\(StoreError.noSpace)): free some space on that device and try again"
                                              : "\(what) (\(String(cString: strerror(e))))"
        }
    }

    /// Wraps the current `errno` after a failed system call.
    public static func posix(_ context: String, _ code: Int32 = Glibc.errno) -> StoreError {
        code == ENOSPC || code == EDQUOT ? .noSpace : .io(errno: code, context: context)
    }
}
