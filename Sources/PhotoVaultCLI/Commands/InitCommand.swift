// Stub: to be implemented. Each function gets the parsed command line and returns the exit code.
enum InitCommand {
    static func run(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("init")
    }
}
