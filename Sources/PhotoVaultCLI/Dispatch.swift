/// A command's implementation: gets the parsed command line, returns the exit code, throws
/// `StoreError`, `CLIError` or `UsageError` on failure (the dispatcher prints them).
public typealias CommandHandler = (ParsedArguments) throws -> Int32

public enum Dispatch {
    /// Handler per command, keyed by `CommandSpec.name` ("user add"). A test checks this
    /// matches `CommandSpec.all` exactly.
    public static let handlers: [String: CommandHandler] = [
        "init": InitCommand.run,
        "user add": UserCommands.add,
        "user passwd": UserCommands.passwd,
        "user reset-password": UserCommands.resetPassword,
        "user remove": UserCommands.remove,
        "user list": UserCommands.list,
        "user check": UserCommands.check,
        "user add-login": LoginSlotCommands.add,
        "user remove-login": LoginSlotCommands.remove,
        "pam": PamCommand.run,
        "mount": MountCommands.mount,
        "unmount": MountCommands.unmount,
        "lock": LockCommands.lock,
        "unlock": LockCommands.unlock,
        "status": LockCommands.status,
        "class set": ClassCommands.set,
        "class get": ClassCommands.get,
        "class list": ClassCommands.list,
        "import": TransferCommands.importFiles,
        "export": TransferCommands.exportFiles,
        "fsck": FsckCommand.run,
    ]
}
