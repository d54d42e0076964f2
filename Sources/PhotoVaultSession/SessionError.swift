/// What goes wrong in the session machinery (mount(8)'s helper form, systemd, PAM), said in
/// one line; the CLI maps each case to its exit code.
public enum SessionError: Error, Equatable, CustomStringConvertible {
    /// A mount(8) command line that is not `STORE MOUNTPOINT [-o OPTIONS]`.
    case helperUsage
    case unknownMountOption(String)
    case mountOptionNeedsValue(String)
    case mountOptionTakesNoValue(String)

    /// Each is a malformed command line.
    public var exitCode: Int32 { 2 }

    public var description: String {
        switch self {
        case .helperUsage:
            return "a first word with a slash is a store: the mount(8) form is 'photovault STORE MOUNTPOINT "
                + "[-o OPTIONS]' (see the README, 'Mounting from fstab')"
        case .unknownMountOption(let w):
            return "unknown mount option '\(w)' (photovault takes user=, passfile=, extpass=, ro, allow_other, "
                + "idle=, on-lock=, lock-grace=, private-thumbnails, no-private-thumbnails, no-dbus)"
        case .mountOptionNeedsValue(let n): return "mount option '\(n)' needs a value (\(n)=...)"
        case .mountOptionTakesNoValue(let n): return "mount option '\(n)' takes no value"
        }
    }
}
