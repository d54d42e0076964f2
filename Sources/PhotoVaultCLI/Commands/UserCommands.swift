// Stub: to be implemented. Each function gets the parsed command line and returns the exit code.
enum UserCommands {
    static func add(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("user add")
    }

    static func passwd(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("user passwd")
    }

    static func resetPassword(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("user reset-password")
    }

    static func remove(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("user remove")
    }

    static func list(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("user list")
    }

    static func check(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("user check")
    }
}
