/// The result of parsing one command line for one command. Option values are keyed by the
/// option's long name without dashes ("store", "passfile"); positionals by argument name.
public struct ParsedArguments: Equatable, Sendable {
    public let command: [String]
    /// Every positional in order, as typed (after `--` too).
    public let positionals: [String]
    /// Positionals assigned to their argument specs: name -> values (one, or several if variadic).
    public let arguments: [String: [String]]
    public let values: [String: [String]]
    public let flags: Set<String>

    public init(command: [String], positionals: [String] = [], arguments: [String: [String]] = [:],
                values: [String: [String]] = [:], flags: Set<String> = []) {
        self.command = command
        self.positionals = positionals
        self.arguments = arguments
        self.values = values
        self.flags = flags
    }

    /// Last value of a value option, nil if absent.
    public func value(_ long: String) -> String? { values[long]?.last }
    /// All values of a repeatable option, in order.
    public func allValues(_ long: String) -> [String] { values[long] ?? [] }
    public func flag(_ long: String) -> Bool { flags.contains(long) }
    /// The value of a (non-variadic) positional argument, nil if it was optional and omitted.
    public func argument(_ name: String) -> String? { arguments[name]?.first }
    /// The values of a variadic positional argument.
    public func argumentList(_ name: String) -> [String] { arguments[name] ?? [] }

    /// True if the option was given at all (flag or value).
    public func has(_ long: String) -> Bool { flags.contains(long) || values[long] != nil }

    /// A usage error about this command, for handlers that validate values themselves.
    public func usageError(_ problem: String) -> UsageError { UsageError(problem, command: command) }
}

/// A malformed command line: exit code 2 and one line on stderr.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    public let problem: String
    /// The command whose help the message points to; empty for the top level.
    public let command: [String]

    public init(_ problem: String, command: [String] = []) {
        self.problem = problem
        self.command = command
    }

    /// `photovault: <problem> (see 'photovault <cmd> --help')`
    public var description: String {
        let cmd = command.isEmpty ? "" : command.joined(separator: " ") + " "
        return "photovault: \(problem) (see 'photovault \(cmd)--help')"
    }
}
