// Stub: to be implemented. Each function gets the parsed command line and returns the exit code.
enum MountCommands {
    static func mount(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("mount")
    }

    static func unmount(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("unmount")
    }
}
