import PhotoVaultStore

/// One row of the exit-status table printed by `--help`, the man page and the README.
public struct ExitCodeEntry: Equatable, Sendable {
    public let code: Int32
    public let meaning: String
}

public enum ExitCodes {
    public static let success: Int32 = 0
    public static let generic: Int32 = 1
    public static let usage: Int32 = 2
    /// StoreError.storeBusy's code, also used when the holder is a mount of the same vault.
    public static let storeBusy: Int32 = 11
    public static let noFuseDevice: Int32 = 14
    public static let mountpointNotEmptyDirectory: Int32 = 15
    public static let alreadyMounted: Int32 = 16
    public static let mountBusy: Int32 = 17
    public static let notMounted: Int32 = 18
    public static let fsckFoundDamage: Int32 = 21
    /// StoreError.locked's code, also used for a routed command whose mount is locked.
    public static let vaultLocked: Int32 = 23
    public static let deadMount: Int32 = 25
    public static let partialTransfer: Int32 = 26
    public static let passwordNotRead: Int32 = 27
    /// StoreError.notConfirmedOnDisk's code.
    public static let notConfirmedOnDisk: Int32 = 28
    public static let fsckRepairIncomplete: Int32 = 29
    public static let fsckRepaired: Int32 = 32

    /// Every code `photovault` can exit with, one meaning each: StoreError's codes (defined in
    /// PhotoVaultStore) and the CLI's own. A test checks every StoreError and CLIError maps
    /// into this table and that no code appears twice.
    public static let table: [ExitCodeEntry] = [
        ExitCodeEntry(code: success, meaning: "success"),
        ExitCodeEntry(code: generic, meaning: "other failure (I/O error, command failed)"),
        ExitCodeEntry(code: usage, meaning: "usage error: bad command line or invalid argument"),
        ExitCodeEntry(code: 3, meaning: "no store at the --store path (run 'photovault init')"),
        ExitCodeEntry(code: 4, meaning: "no such account"),
        ExitCodeEntry(code: 5, meaning: "wrong password"),
        ExitCodeEntry(code: 6, meaning: "the account already exists"),
        ExitCodeEntry(code: 7, meaning: "empty user name or password"),
        ExitCodeEntry(code: 8, meaning: "password too short"),
        ExitCodeEntry(code: 9, meaning: "corrupt account record or store"),
        ExitCodeEntry(code: 10, meaning: "unknown store format version"),
        ExitCodeEntry(code: storeBusy, meaning: "the store is busy (another photovault command or a mount holds it)"),
        ExitCodeEntry(code: 12, meaning: "key-derivation cost below the allowed floor (tampered account record or store config?)"),
        ExitCodeEntry(code: 13, meaning: "the account is bound to another device"),
        ExitCodeEntry(code: noFuseDevice, meaning: "no usable /dev/fuse (missing, not the FUSE device, or this process may not open it)"),
        ExitCodeEntry(code: mountpointNotEmptyDirectory, meaning: "the mountpoint is not an empty directory"),
        ExitCodeEntry(code: alreadyMounted, meaning: "already mounted (the mountpoint, or this vault elsewhere)"),
        ExitCodeEntry(code: mountBusy, meaning: "the mount is busy (files still open)"),
        ExitCodeEntry(code: notMounted, meaning: "not mounted"),
        ExitCodeEntry(code: 19, meaning: "no space left on the store's device (or on export's destination)"),
        ExitCodeEntry(code: 20, meaning: "the file or store already exists (use --force)"),
        ExitCodeEntry(code: fsckFoundDamage, meaning: "fsck found damage"),
        ExitCodeEntry(code: 22, meaning: "integrity check failed (data modified or corrupt)"),
        ExitCodeEntry(code: vaultLocked, meaning: "the vault is locked"),
        ExitCodeEntry(code: 24, meaning: "not found"),
        ExitCodeEntry(code: deadMount, meaning: "the mountpoint holds a dead mount (its daemon is gone; unmount it first)"),
        ExitCodeEntry(code: partialTransfer, meaning: "import or export skipped some entries (each named on stderr); the rest was copied"),
        ExitCodeEntry(code: passwordNotRead, meaning: "the password could not be read (no terminal, the two entries differ, too long, or its file or command failed or did not answer in time)"),
        ExitCodeEntry(code: notConfirmedOnDisk, meaning: "the change took effect but could not be confirmed on disk (a crash may undo it; the message says what)"),
        ExitCodeEntry(code: fsckRepairIncomplete, meaning: "fsck --repair could not move some damaged entries into lost+found (each named); the rest was repaired"),
        ExitCodeEntry(code: 30, meaning: "keys cannot be kept in memory locked against swapping (the locked-memory limit, ulimit -l, is too small)"),
        ExitCodeEntry(code: 31, meaning: "another command changed the account (passwd, reset-password, or remove and add) while passwd waited for the new password; nothing was written"),
        ExitCodeEntry(code: fsckRepaired, meaning: "fsck --repair found damage and repaired all of it (each repair named); the vault is consistent now"),
        ExitCodeEntry(code: 33, meaning: "the store, or a directory above it, belongs to another user or can be written by others (fix its owner or mode)"),
    ]

    public static func meaning(of code: Int32) -> String? { table.first { $0.code == code }?.meaning }
}
