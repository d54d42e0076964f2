// Stub: to be implemented. Each function gets the parsed command line and returns the exit code.
enum TransferCommands {
    static func importFiles(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("import")
    }

    static func exportFiles(_ args: ParsedArguments) throws -> Int32 {
        throw CLIError.notImplemented("export")
    }
}
