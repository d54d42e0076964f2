// The table of every `photovault` command. Help, the man page, the bash completion and the
// parser are all generated from this text, so this is the one place to change a command.
// Names here are an interface: other tools script against them.

extension CommandSpec {
    /// Options accepted by every command (and before the command word).
    public static let globalOptions: [OptionSpec] = [
        OptionSpec("store", value: "PATH",
                   help: "The store directory holding the encrypted vault.",
                   default: "$PHOTOVAULT_STORE if set, else ${XDG_DATA_HOME:-~/.local/share}/photovault/store",
                   completion: .directory),
    ]

    /// Where the password comes from. Exactly one, or none for a no-echo terminal prompt.
    public static let passwordOptions: [OptionSpec] = [
        OptionSpec("passfile", value: "FILE",
                   help: "Read the password from the first line of FILE (the trailing newline is removed). "
                       + "Keep FILE yours and mode 600: one other users can read or write, or another user's, "
                       + "is used with a warning. A FIFO must be opened for writing within 5 s and give the line "
                       + "within 120 s."),
        OptionSpec("password-stdin",
                   help: "Read the password from the first line of standard input."),
        OptionSpec("extpass", value: "CMD",
                   help: "Run CMD with /bin/sh -c and use the first line it prints as the password "
                       + "(for a password manager or pinentry). CMD must print that line within 120 s, then "
                       + "end within 5 s, printing at most 1 MiB more; else it is stopped.",
                   completion: .command),
    ]

    static let passwordNote = "Without --passfile, --password-stdin or --extpass the password is asked on the "
        + "terminal without echo. A password is never taken from the command line or the environment."

    static let userOption = OptionSpec("user", value: "NAME", help: "The account whose vault to use.",
                                       default: "your login name", completion: .nothing)
    static let userArgument = ArgumentSpec("USER", help: "The account name.", optional: true,
                                           default: "your login name", completion: .nothing)
    static let newPassfileOption = OptionSpec(
        "new-passfile", value: "FILE",
        help: "Read the new password from the first line of FILE instead of asking twice on the terminal.")
    static let mountpointArgument = ArgumentSpec("MOUNTPOINT", help: "Where the vault is mounted.", optional: true,
                                                 default: "~/PhotoVault", completion: .directory)
    static let classNames = ["complete", "complete-unless-open", "until-first-auth", "none"]

    static let classExplanation = "Classes: complete (unreadable while locked, open files included), "
        + "complete-unless-open (open files keep working while locked; new files can still be written), "
        + "until-first-auth (readable from the first unlock until unmount), none (readable whenever mounted)."

    public static let groups: [CommandGroup] = [
        CommandGroup(name: "user", summary: "Manage the accounts in a store",
                     discussion: "Each account has its own vault inside the store, its own password and a "
                         + "recovery key. Accounts cannot see each other's photos."),
        CommandGroup(name: "class", summary: "Show or change a file's protection class",
                     discussion: "Every file has a protection class that decides whether it can be read "
                         + "while the vault is locked. " + classExplanation),
    ]

    public static let all: [CommandSpec] = [
        CommandSpec(
            ["init"], summary: "Create an empty store",
            discussion: "Creates a new, empty store in the --store directory (which must not already hold "
                + "one). The store has no accounts yet: add one with 'photovault user add'. The cipher and "
                + "chunk size are fixed for the life of the store.",
            options: [
                OptionSpec("cipher", value: "CIPHER", help: "The content cipher.",
                           default: "aes256gcm when the CPU has AES-NI, else xchacha20poly1305",
                           completion: .choices(["aes256gcm", "xchacha20poly1305"])),
                OptionSpec("chunk-size", value: "BYTES",
                           help: "Plaintext bytes per encrypted chunk; each chunk is authenticated separately.",
                           default: "4096", completion: .nothing),
            ],
            examples: [
                Example("photovault init", "Create a store in the default place."),
                Example("photovault init --store /mnt/usb/vault --cipher xchacha20poly1305",
                        "Create a store on a USB disk with XChaCha20-Poly1305."),
            ]),

        CommandSpec(
            ["user", "add"], summary: "Create an account and print its recovery key",
            discussion: "Creates the account USER with a new password (asked twice on the terminal, or "
                + "read once from the given source) and prints a recovery key exactly once. Write the "
                + "recovery key down: it is the only way back in if the password is forgotten. "
                + passwordNote,
            arguments: [userArgument],
            options: [
                OptionSpec("this-device-only",
                           help: "Bind the account to this machine: the store copied elsewhere cannot be "
                               + "opened, even with the password."),
            ] + passwordOptions,
            examples: [
                Example("photovault user add", "Create an account for yourself, asking the password twice."),
                Example("photovault user add alice --passfile ~/.secret/alice",
                        "Create the account alice with the password in a file."),
            ]),

        CommandSpec(
            ["user", "passwd"], summary: "Change an account's password",
            discussion: "Checks the current password, then sets a new one (asked twice on the terminal, "
                + "or read from --new-passfile). Photos are not re-encrypted: only the key wrapping changes. "
                + passwordNote,
            arguments: [userArgument],
            options: passwordOptions + [newPassfileOption],
            examples: [
                Example("photovault user passwd", "Change your own password interactively."),
                Example("photovault user passwd --passfile old.txt --new-passfile new.txt",
                        "Change it non-interactively."),
            ]),

        CommandSpec(
            ["user", "reset-password"], summary: "Set a new password using the recovery key",
            discussion: "For a forgotten password: proves ownership with the recovery key printed by "
                + "'photovault user add' and sets a new password. The recovery key is asked on the "
                + "terminal unless --recovery-key-file is given.",
            arguments: [userArgument],
            options: [
                OptionSpec("recovery-key-file", value: "FILE",
                           help: "Read the recovery key from the first line of FILE."),
                newPassfileOption,
            ],
            examples: [
                Example("photovault user reset-password", "Asks for the recovery key, then the new password twice."),
                Example("photovault user reset-password bob --recovery-key-file key --new-passfile pw",
                        "Reset bob's password from files."),
            ]),

        CommandSpec(
            ["user", "remove"], summary: "Remove an account",
            discussion: "Removes the account USER after checking its password. Its photos stay in the "
                + "store (unreadable without the account) unless --delete-photos is given. "
                + "Refused, with nothing removed, while its vault is mounted: unmount it first. "
                + passwordNote,
            arguments: [userArgument],
            options: [
                OptionSpec("delete-photos", help: "Also delete every encrypted file of the account "
                               + "(refused, with nothing removed, while its vault is mounted or "
                               + "an import, export or fsck works in it)."),
            ] + passwordOptions,
            examples: [
                Example("photovault user remove bob --delete-photos", "Remove bob and his photos."),
            ]),

        CommandSpec(
            ["user", "list"], summary: "Print how many accounts the store has",
            discussion: "Account names are stored encrypted, so the store can only tell how many accounts "
                + "it holds, not who they are. Use 'photovault user check' to test for one name.",
            examples: [Example("photovault user list", "Prints e.g. '2 accounts'.")]),

        CommandSpec(
            ["user", "check"], summary: "Test whether an account exists",
            discussion: "Exits with 0 if the account USER exists in the store, or with the no-such-account "
                + "code (4) if it does not. Prints nothing; meant for scripts. No password is needed.",
            arguments: [userArgument],
            examples: [Example("photovault user check alice && echo yes", "Print yes if alice has an account.")]),

        CommandSpec(
            ["mount"], summary: "Unlock a vault and mount it as a folder",
            discussion: "Asks for the password, then mounts the account's vault at MOUNTPOINT (an empty "
                + "directory) through FUSE; photos are decrypted as they are read "
                + "and encrypted as they are written. The vault locks when the desktop session locks "
                + "(also when it was locked already as the mount came up) "
                + "or its D-Bus connection drops (watched again once the bus is back), "
                + "after --idle without activity or on 'photovault lock'; a locked vault "
                + "is unmounted (--on-lock unmount) or stays mounted with the files of class "
                + "complete unreadable (--on-lock stay) until 'photovault unlock'. DURATION is a number "
                + "with an optional unit s, m or h (90s, 10m, 1h); a bare number means seconds. "
                + passwordNote,
            arguments: [mountpointArgument],
            options: [
                userOption,
                OptionSpec("foreground", short: "f", help: "Stay in the foreground instead of detaching; "
                               + "Ctrl-C unmounts."),
                OptionSpec("read-only", help: "Mount read-only."),
                OptionSpec("allow-other", help: "Let other users (and root) see the files; needs "
                               + "user_allow_other in /etc/fuse.conf."),
                OptionSpec("idle", value: "DURATION", help: "Lock after DURATION in which no folder is listed "
                               + "and no file is opened or changed (polling stat, extended attributes, symlinks or df does "
                               + "not count; time the machine spends suspended does).",
                           default: "never", completion: .nothing),
                OptionSpec("on-lock", value: "ACTION", help: "What locking does: unmount, or stay mounted "
                               + "with class-complete files unreadable.",
                           default: "unmount", completion: .choices(["unmount", "stay"])),
                OptionSpec("lock-grace", value: "DURATION",
                           help: "With --on-lock unmount: on a lock, complete keys are zeroed at once "
                               + "and no new open succeeds; files of class complete-unless-open that "
                               + "are open for writing get up to DURATION to finish, then every key is "
                               + "zeroed and the vault unmounted (at most 3s before suspend).",
                           default: "60s", completion: .nothing),
                OptionSpec("private-thumbnails", help: "Keep thumbnails of vault photos out of the "
                               + "desktop's plaintext thumbnail cache (~/.cache/thumbnails)."),
                OptionSpec("no-dbus", help: "Do not watch the desktop session's lock over D-Bus "
                               + "(lock only on --idle, signal or 'photovault lock')."),
            ] + passwordOptions,
            examples: [
                Example("photovault mount", "Mount your vault at ~/PhotoVault."),
                Example("photovault mount ~/Private --idle 10m --on-lock stay",
                        "Mount elsewhere, lock after 10 idle minutes and stay mounted when locked."),
                Example("pass show photovault | photovault mount --password-stdin -f",
                        "Take the password from a password manager and stay in the foreground."),
            ]),

        CommandSpec(
            ["unmount"], summary: "Unmount a vault",
            discussion: "Unmounts the vault at MOUNTPOINT and forgets its keys. Fails with the mount-busy "
                + "code if a program still has files open there. Also clears a dead mount, left when the "
                + "daemon was killed, which 'photovault mount' refuses to mount over.",
            arguments: [mountpointArgument],
            examples: [Example("photovault unmount", "Unmount ~/PhotoVault.")]),

        CommandSpec(
            ["lock"], summary: "Lock a mounted vault now",
            discussion: "Locks the vault at MOUNTPOINT as if the session had locked: keys of class "
                + "complete are forgotten, and the vault is unmounted if it was mounted with "
                + "--on-lock unmount.",
            arguments: [mountpointArgument],
            examples: [Example("photovault lock", "Lock ~/PhotoVault.")]),

        CommandSpec(
            ["unlock"], summary: "Unlock a locked, still mounted vault",
            discussion: "Asks for the password of the account mounted at MOUNTPOINT and makes every "
                + "file readable again. A lock that comes while the key is being derived (the screen "
                + "locks or the machine suspends right after the password was given) wins: the unlock "
                + "is refused and the vault stays locked. " + passwordNote,
            arguments: [mountpointArgument],
            options: [userOption] + passwordOptions,
            examples: [Example("photovault unlock", "Unlock ~/PhotoVault after a lock.")]),

        CommandSpec(
            ["status"], summary: "Show mounted vaults and whether they are locked",
            discussion: "Lists every vault mounted by this user, one line each: the mountpoint, the "
                + "daemon's pid, state=locked or state=unlocked, the number of files of each protection "
                + "class and of open handles. A mount whose daemon is gone (killed) is listed as "
                + "state=dead, with the command that clears it. Prints 'no vault mounted' when there is none.",
            examples: [Example("photovault status", "Show all mounts.")]),

        CommandSpec(
            ["class", "set"], summary: "Set a file's protection class",
            discussion: "Sets the protection class of PATH, a path on a live mount or a path inside the "
                + "vault (then the password is needed; while that vault is mounted, the change goes "
                + "through the mount). " + classExplanation,
            arguments: [
                ArgumentSpec("PATH", help: "A file on a mounted vault, or a path inside the vault."),
                ArgumentSpec("CLASS", help: "complete, complete-unless-open, until-first-auth or none.",
                             completion: .choices(classNames)),
            ],
            options: [userOption] + passwordOptions,
            examples: [
                Example("photovault class set ~/PhotoVault/passport.jpg complete",
                        "Make a scan unreadable whenever the vault is locked."),
                Example("photovault class set /Screenshots none", "Inside the vault, without a mount."),
            ]),

        CommandSpec(
            ["class", "get"], summary: "Print a file's protection class",
            discussion: "Prints the protection class of PATH (on a live mount or inside the vault); "
                + "- for a symlink, which has none.",
            arguments: [ArgumentSpec("PATH", help: "A file on a mounted vault, or a path inside the vault.")],
            options: [userOption] + passwordOptions,
            examples: [Example("photovault class get ~/PhotoVault/passport.jpg", "Prints e.g. 'complete'.")]),

        CommandSpec(
            ["class", "list"], summary: "Print the protection class of every file in a directory",
            discussion: "Prints one line per entry of DIR: its class (- for a symlink), a tab, and its "
                + "path inside the vault (/2024/a.jpg), the same for a DIR on a live mount as inside the vault.",
            arguments: [ArgumentSpec("DIR", help: "A directory on a mounted vault, or inside the vault.",
                                     completion: .directory)],
            options: [userOption] + passwordOptions,
            examples: [Example("photovault class list ~/PhotoVault/2024", "List classes in a folder.")]),

        CommandSpec(
            ["import"], summary: "Copy files into the vault without mounting it",
            discussion: "Encrypts each SOURCE (a file or a directory, copied recursively) into "
                + "DEST_DIR_IN_VAULT. A SOURCE of - reads a single file from standard input (it cannot "
                + "be combined with --password-stdin). Existing files are kept unless --force is given. "
                + "If the import fails or is interrupted (Ctrl-C, SIGTERM), the files it copied completely stay, "
                + "nothing of the file it was copying does (no temporary entry is left), and the directories it "
                + "made that hold nothing are removed; a directory that was there before is never removed. "
                + "While the same account's vault is mounted, the files go through the mount. "
                + passwordNote,
            arguments: [
                ArgumentSpec("SOURCE", help: "Files or directories to import; - for standard input.", variadic: true),
                ArgumentSpec("DEST_DIR_IN_VAULT", help: "Directory inside the vault, e.g. /2024/Holidays.",
                             completion: .nothing),
            ],
            options: [
                userOption,
                OptionSpec("class", value: "CLASS", help: "Protection class of the imported files.",
                           default: "the default class of the directory each file lands in, which "
                               + "is complete unless set with 'class set' on that directory",
                           completion: .choices(classNames)),
                OptionSpec("force", help: "Overwrite files that already exist in the vault."),
            ] + passwordOptions,
            examples: [
                Example("photovault import ~/DCIM/*.jpg /2024", "Import camera pictures into /2024."),
                Example("curl -s https://e.org/a.jpg | photovault import --passfile pw - /web",
                        "Import from standard input."),
            ]),

        CommandSpec(
            ["export"], summary: "Copy files out of the vault without mounting it",
            discussion: "Decrypts each PATH_IN_VAULT (a file or a directory, copied recursively) into "
                + "DEST, a local directory; a DEST of - writes a single file to standard output. "
                + "Existing files are kept unless --force is given. " + passwordNote,
            arguments: [
                ArgumentSpec("PATH_IN_VAULT", help: "Files or directories inside the vault.", variadic: true,
                             completion: .nothing),
                ArgumentSpec("DEST", help: "Local directory, or - for standard output."),
            ],
            options: [
                userOption,
                OptionSpec("force", help: "Overwrite existing local files."),
            ] + passwordOptions,
            examples: [
                Example("photovault export /2024 ~/Desktop", "Export a folder."),
                Example("photovault export /2024/a.jpg - | display -", "Show one photo without writing it to disk."),
            ]),

        CommandSpec(
            ["fsck"], summary: "Check a vault for damage",
            discussion: "Reads every file of the account's vault and verifies its authentication tags, "
                + "headers and directory entries; prints each problem and exits with the fsck-damage "
                + "code (21) if any is found. With --repair it also fixes what can be fixed and "
                + "reports the rest. " + passwordNote,
            options: [
                userOption,
                OptionSpec("repair", help: "Repair what can be repaired instead of only reporting."),
            ] + passwordOptions,
            examples: [Example("photovault fsck --user alice", "Check alice's vault.")]),
    ]
}
