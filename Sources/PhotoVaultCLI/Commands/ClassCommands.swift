// Stub: to be implemented. Each function gets the parsed command line and returns the exit code.
enum ClassCommands {
    static func set(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("class set")
    }

    static func get(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("class get")
    }

    static func list(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("class list")
    }
}
