/// The command line `mount(8)` gives a FUSE file system: for an fstab line or
/// `mount -t fuse.photovault STORE MOUNTPOINT -o OPTIONS`, util-linux runs /sbin/mount.fuse3,
/// which runs `photovault STORE MOUNTPOINT -o OPTIONS` (found on the shell's default PATH:
/// mount(8) passes no PATH of its own). This turns that form into the `photovault mount`
/// command line it means.
///
/// How it is told apart from a command: the first word holds a slash. No command word
/// does, and mount.fuse3 passes the fstab's source unchanged, so a store written as an
/// absolute path (or `./store`) is never taken for a command, even one named `mount` or `user`.
/// A first word without a slash stays a command word, as before.
public enum MountHelperForm {
    /// The `photovault mount` arguments for a mount(8) command line, or nil when `args` is
    /// not one (the first word is an option or has no slash). Throws for a malformed one.
    public static func commandLine(for args: [String]) throws -> [String]? {
        guard let store = args.first, !store.hasPrefix("-"), store.contains("/") else { return nil }
        guard args.count >= 2, !args[1].hasPrefix("-") else { throw SessionError.helperUsage }
        let mountpoint = args[1]
        var words: [String] = []
        var i = 2
        while i < args.count {
            let tok = args[i]
            i += 1
            if tok == "-o" {
                guard i < args.count else { throw SessionError.helperUsage }
                words += split(args[i])
                i += 1
            } else if tok.hasPrefix("-o") {
                words += split(String(tok.dropFirst(2)))
            } else {
                throw SessionError.helperUsage
            }
        }
        return ["mount", "--store", store] + (try longOptions(for: words))
            // After the options: a mountpoint starting with a dash is no option (`--` ends them).
            + ["--", mountpoint]
    }

    /// The `photovault mount` options that mount(8)-style words stand for (the words of
    /// `-o`, split at commas): ["ro", "idle=10m"] gives ["--idle", "10m", "--read-only"].
    /// Generic words are dropped; an unknown word throws.
    public static func longOptions(for words: [String]) throws -> [String] {
        var result: [String] = []
        var readOnly = false
        for word in words {
            let (name, value) = splitOption(word)
            if name == "user" && value == nil {
                continue   // fstab's "user" (users may mount it): mount(8)'s business
            } else if let long = valueOptions[name] {
                guard let v = value, !v.isEmpty else { throw SessionError.mountOptionNeedsValue(name) }
                result += ["--\(long)", v]
            } else if let long = flagOptions[name] {
                guard value == nil else { throw SessionError.mountOptionTakesNoValue(name) }
                result.append("--\(long)")
            } else if name == "ro" || name == "rw" {
                guard value == nil else { throw SessionError.mountOptionTakesNoValue(name) }
                readOnly = name == "ro"   // the last one given wins, as for mount(8)
            } else if ignored.contains(name) || name.hasPrefix("x-") || name == "comment" {
                continue
            } else {
                throw SessionError.unknownMountOption(word)
            }
        }
        if readOnly { result.append("--read-only") }
        return result
    }

    /// `-o` words that carry a `photovault mount` option's value.
    static let valueOptions = ["user": "user", "passfile": "passfile", "extpass": "extpass", "idle": "idle",
                               "on-lock": "on-lock", "lock-grace": "lock-grace"]
    /// `-o` words for `photovault mount` flags (both spellings of the FUSE-style names).
    static let flagOptions = ["allow_other": "allow-other", "allow-other": "allow-other",
                              "private-thumbnails": "private-thumbnails",
                              "no-private-thumbnails": "no-private-thumbnails", "no-dbus": "no-dbus"]
    /// Generic words mount(8), systemd or mount.fuse3 pass along or that fstab lines carry, which
    /// mean nothing to the vault: the mount is always nosuid and nodev (libfuse's default, and a
    /// vault holds no device or setuid file), and the rest concern mount(8) or systemd.
    static let ignored: Set<String> = ["defaults", "auto", "noauto", "nofail", "_netdev", "dev", "nodev",
                                       "suid", "nosuid", "exec", "user", "users", "nouser", "owner", "group",
                                       "atime", "noatime", "relatime", "nodiratime", "strictatime",
                                       "lazytime", "nolazytime", "async", "loud", "silent"]

    /// mount(8) options are comma-separated; empty words (",,") are skipped.
    public static func split(_ text: String) -> [String] { text.split(separator: ",").map(String.init) }

    static func splitOption(_ word: String) -> (String, String?) {
        guard let eq = word.firstIndex(of: "=") else { return (word, nil) }
        return (String(word[..<eq]), String(word[word.index(after: eq)...]))
    }
}
