/// What a command line asks for.
public enum Invocation: Equatable, Sendable {
    case run(CommandSpec, ParsedArguments)
    /// Help for a command path: [] = top level, ["user"] = a group, ["user", "add"] = a command.
    case help([String])
    case version
    case generateManPage
    case generateCompletion(shell: String)
}

/// A small declarative parser over `CommandSpec`s.
///
/// Rules (shared with the help text, so keep them in sync with `Help.conventions`):
/// `--opt value` and `--opt=value` are the same; short flags may be clustered (`-fh`);
/// a short option's value may follow directly (`-xVALUE`) or as the next word; `--` ends
/// options; a lone `-` is a positional (stdin/stdout); options and positionals may be mixed;
/// global options may also come before the command.
public struct ArgumentParser: Sendable {
    public let commands: [CommandSpec]
    public let groups: [CommandGroup]
    public static let supportedShells = ["bash"]

    public init(commands: [CommandSpec] = CommandSpec.all, groups: [CommandGroup] = CommandSpec.groups) {
        self.commands = commands
        self.groups = groups
    }

    public func command(_ path: [String]) -> CommandSpec? { commands.first { $0.path == path } }
    public func group(_ name: String) -> CommandGroup? { groups.first { $0.name == name } }
    public func subcommands(of group: String) -> [CommandSpec] {
        commands.filter { $0.path.count == 2 && $0.path[0] == group }
    }

    /// Parses the arguments after the program name.
    public func parse(_ args: [String]) throws -> Invocation {
        var i = 0
        var early = OptionAccumulator(command: [])
        // Top-level options before the command word.
        while i < args.count, args[i].hasPrefix("-"), args[i] != "-" {
            let tok = args[i]
            i += 1
            if tok == "--" { break }
            let (name, inline) = splitLong(tok)
            switch name {
            case "--help", "-h": return .help([])
            case "--version": return .version
            case "--generate-man": return .generateManPage
            case "--generate-completion":
                guard let shell = inline ?? (i < args.count ? args[i] : nil) else {
                    throw UsageError("option '--generate-completion' needs a value (SHELL)")
                }
                if inline == nil { i += 1 }
                guard Self.supportedShells.contains(shell) else {
                    throw UsageError("unsupported shell '\(shell)' (supported: \(Self.supportedShells.joined(separator: ", ")))")
                }
                return .generateCompletion(shell: shell)
            default:
                guard name.hasPrefix("--"), let opt = CommandSpec.globalOptions.first(where: { "--\($0.long)" == name }) else {
                    throw UsageError("unknown option '\(name)'\(suggestion(for: name, among: CommandSpec.globalOptions.map { "--\($0.long)" } + ["--help", "--version"]))")
                }
                try early.apply(opt, spelled: name, inline: inline, args: args, index: &i)
            }
        }
        guard i < args.count else { throw UsageError("no command given") }

        let word = args[i]
        i += 1
        if word == "help" {
            let path = Array(args[i...].filter { !$0.hasPrefix("-") })
            if path.isEmpty { return .help([]) }
            if command(path) != nil || (path.count == 1 && group(path[0]) != nil) { return .help(path) }
            throw UsageError("unknown command '\(path.joined(separator: " "))'")
        }

        let spec: CommandSpec
        if let g = group(word) {
            let subs = subcommands(of: g.name).map { $0.path[1] }
            guard i < args.count else {
                throw UsageError("'\(word)' needs a subcommand: \(subs.joined(separator: ", "))", command: [word])
            }
            let sub = args[i]
            i += 1
            if sub == "--help" || sub == "-h" { return .help([word]) }
            guard let s = command([word, sub]) else {
                throw UsageError("unknown command '\(word) \(sub)'\(suggestion(for: sub, among: subs))", command: [word])
            }
            spec = s
        } else if let s = command([word]) {
            spec = s
        } else {
            let words = Set(commands.map { $0.path[0] }).sorted() + ["help"]
            throw UsageError("unknown command '\(word)'\(suggestion(for: word, among: words))")
        }

        var acc = OptionAccumulator(command: spec.path)
        acc.values = early.values
        var positionals: [String] = []
        var endOfOptions = false
        let options = spec.allOptions
        while i < args.count {
            let tok = args[i]
            i += 1
            if endOfOptions || tok == "-" || !tok.hasPrefix("-") {
                positionals.append(tok)
                continue
            }
            if tok == "--" {
                endOfOptions = true
                continue
            }
            if tok.hasPrefix("--") {
                let (name, inline) = splitLong(tok)
                if name == "--help" { return .help(spec.path) }
                guard let opt = options.first(where: { "--\($0.long)" == name }) else {
                    throw UsageError("unknown option '\(name)'\(suggestion(for: name, among: options.map { "--\($0.long)" }))",
                                     command: spec.path)
                }
                try acc.apply(opt, spelled: name, inline: inline, args: args, index: &i)
            } else {
                // A cluster of short options: -fh, or -xVALUE for a short option with a value.
                let chars = Array(tok.dropFirst())
                var k = 0
                while k < chars.count {
                    let c = chars[k]
                    k += 1
                    if c == "h" { return .help(spec.path) }
                    guard let opt = options.first(where: { $0.short == c }) else {
                        throw UsageError("unknown option '-\(c)'", command: spec.path)
                    }
                    if opt.takesValue {
                        let rest = k < chars.count ? String(chars[k...]) : nil
                        try acc.apply(opt, spelled: "-\(c)", inline: rest, args: args, index: &i)
                        break
                    }
                    try acc.apply(opt, spelled: "-\(c)", inline: nil, args: args, index: &i)
                }
            }
        }

        let assigned = try assign(positionals, to: spec)
        return .run(spec, ParsedArguments(command: spec.path, positionals: positionals, arguments: assigned,
                                          values: acc.values, flags: acc.flags))
    }

    /// Distributes positionals over the argument specs: required ones first get one each,
    /// optional ones get one each left to right while extra words remain, a variadic argument
    /// takes the rest. This supports `SOURCE... DEST` as well as `PATH [CLASS]`.
    func assign(_ words: [String], to spec: CommandSpec) throws -> [String: [String]] {
        let specs = spec.arguments
        let required = specs.filter { !$0.optional }
        if words.count < required.count {
            throw UsageError("missing argument \(required[words.count].name)", command: spec.path)
        }
        if !specs.contains(where: { $0.variadic }) && words.count > specs.count {
            throw UsageError("unexpected argument '\(words[specs.count])'", command: spec.path)
        }
        var extra = words.count - required.count
        var result: [String: [String]] = [:]
        var pos = 0
        for a in specs {
            var take = a.optional ? 0 : 1
            if a.variadic {
                take += extra
                extra = 0
            } else if a.optional && extra > 0 {
                take = 1
                extra -= 1
            }
            if take > 0 {
                if case .choices(let choices) = a.completion,
                   let bad = words[pos..<(pos + take)].first(where: { !choices.contains($0) }) {
                    throw UsageError("invalid \(a.name) '\(bad)' (expected \(choices.joined(separator: ", ")))",
                                     command: spec.path)
                }
                result[a.name] = Array(words[pos..<(pos + take)])
                pos += take
            }
        }
        return result
    }

    private func splitLong(_ tok: String) -> (String, String?) {
        guard tok.hasPrefix("--"), let eq = tok.firstIndex(of: "=") else { return (tok, nil) }
        return (String(tok[..<eq]), String(tok[tok.index(after: eq)...]))
    }
}

/// Collects option values while parsing, enforcing "takes a value", choices and repeats.
struct OptionAccumulator {
    let command: [String]
    var values: [String: [String]] = [:]
    var flags: Set<String> = []

    mutating func apply(_ opt: OptionSpec, spelled: String, inline: String?, args: [String], index i: inout Int) throws {
        guard opt.takesValue else {
            if inline != nil { throw UsageError("option '\(spelled)' takes no value", command: command) }
            flags.insert(opt.long)
            return
        }
        let value: String
        if let v = inline {
            value = v
        } else if i < args.count {
            // Like getopt: the next word is the value even if it starts with a dash.
            value = args[i]
            i += 1
        } else {
            throw UsageError("option '\(spelled)' needs a value (\(opt.valueName!))", command: command)
        }
        if let choices = opt.choices, !choices.contains(value) {
            throw UsageError("invalid value '\(value)' for '\(spelled)' (expected \(choices.joined(separator: ", ")))",
                             command: command)
        }
        if values[opt.long] != nil && !opt.repeats {
            throw UsageError("option '--\(opt.long)' given more than once", command: command)
        }
        values[opt.long, default: []].append(value)
    }
}

/// ", did you mean 'x'?" when a close spelling exists (edit distance <= 2).
func suggestion(for word: String, among candidates: [String]) -> String {
    let best = candidates.map { ($0, editDistance(word, $0)) }.min { $0.1 < $1.1 }
    guard let (c, d) = best, d <= 2, d < word.count else { return "" }
    return "; did you mean '\(c)'?"
}

func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    if a.isEmpty { return b.count }
    var prev = Array(0...b.count)
    for i in 1...a.count {
        var cur = [i] + Array(repeating: 0, count: b.count)
        for j in 1...max(b.count, 1) where j <= b.count {
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        prev = cur
    }
    return prev[b.count]
}
