// Stub: to be implemented. Each function gets the parsed command line and returns the exit code.
enum LockCommands {
    static func lock(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("lock")
    }

    static func unlock(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("unlock")
    }

    static func status(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("status")
    }
}
