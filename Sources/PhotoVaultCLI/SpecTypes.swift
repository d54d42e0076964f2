/// How the shell should complete a value (used by the generated bash completion).
public enum CompletionKind: Equatable, Sendable {
    case nothing
    case file
    case directory
    case command          // a shell command line (--extpass)
    case commandName      // a photovault command (for `help`)
    case choices([String])
}

/// One `--long[=VALUE]` option of a command. `valueName == nil` means a flag.
public struct OptionSpec: Equatable, Sendable {
    public let long: String
    public let short: Character?
    public let valueName: String?
    public let help: String
    /// Shown in help and man page as "(default: ...)"; describes, never computes, so the
    /// generated documents do not depend on the machine they were generated on.
    public let defaultText: String?
    public let repeats: Bool
    public let completion: CompletionKind

    public init(_ long: String, short: Character? = nil, value: String? = nil, help: String,
                default defaultText: String? = nil, repeats: Bool = false, completion: CompletionKind? = nil) {
        self.long = long
        self.short = short
        self.valueName = value
        self.help = help
        self.defaultText = defaultText
        self.repeats = repeats
        self.completion = completion ?? (value == nil ? .nothing : .file)
    }

    public var takesValue: Bool { valueName != nil }

    /// Values the parser accepts, if the option is restricted to a fixed set.
    public var choices: [String]? {
        if case .choices(let c) = completion { return c }
        return nil
    }

    /// "-f, --foreground" or "--store PATH".
    public var synopsis: String {
        var s = short.map { "-\($0), " } ?? ""
        s += "--\(long)"
        if let v = valueName { s += " \(v)" }
        return s
    }
}

/// One positional argument.
public struct ArgumentSpec: Equatable, Sendable {
    public let name: String
    public let help: String
    public let optional: Bool
    public let variadic: Bool
    public let defaultText: String?
    public let completion: CompletionKind

    public init(_ name: String, help: String, optional: Bool = false, variadic: Bool = false,
                default defaultText: String? = nil, completion: CompletionKind = .file) {
        self.name = name
        self.help = help
        self.optional = optional
        self.variadic = variadic
        self.defaultText = defaultText
        self.completion = completion
    }

    /// "USER", "[USER]", "SOURCE..." as printed in usage lines.
    public var synopsis: String {
        let base = variadic ? "\(name)..." : name
        return optional ? "[\(base)]" : base
    }
}

public struct Example: Equatable, Sendable {
    public let command: String
    public let explanation: String
    public init(_ command: String, _ explanation: String) {
        self.command = command
        self.explanation = explanation
    }
}

/// A runnable command: `path` is its words after `photovault`, e.g. ["user", "add"].
public struct CommandSpec: Equatable, Sendable {
    public let path: [String]
    public let summary: String
    public let discussion: String
    public let arguments: [ArgumentSpec]
    /// The command's own options; `CommandSpec.globalOptions` are added to every command.
    public let options: [OptionSpec]
    public let examples: [Example]

    public init(_ path: [String], summary: String, discussion: String, arguments: [ArgumentSpec] = [],
                options: [OptionSpec] = [], examples: [Example] = []) {
        self.path = path
        self.summary = summary
        self.discussion = discussion
        self.arguments = arguments
        self.options = options
        self.examples = examples
    }

    public var name: String { path.joined(separator: " ") }

    /// Own options followed by the global ones.
    public var allOptions: [OptionSpec] { options + CommandSpec.globalOptions }

    public var usage: String {
        var s = "photovault \(name) [options]"
        for a in arguments { s += " \(a.synopsis)" }
        return s
    }
}

/// A word that only groups subcommands (`user`, `class`).
public struct CommandGroup: Equatable, Sendable {
    public let name: String
    public let summary: String
    public let discussion: String
}
