/// Plain-text help, generated from the command table.
public enum Help {
    public static let width = 80
    static let column = 26

    public static let tagline = "an encrypted photo vault for Linux"

    public static let overview = "PhotoVault keeps photos encrypted in a store directory and shows them "
        + "decrypted in a folder while you are logged in. Files are encrypted with per-file keys; "
        + "each file has a protection class that decides whether it stays readable while the "
        + "desktop session is locked. Start with 'photovault init', 'photovault user add' and "
        + "'photovault mount'."

    /// How the parser reads a command line (ArgumentParser implements exactly this).
    public static let conventions = "Options may come before or after arguments; '--opt VALUE' and "
        + "'--opt=VALUE' are the same. '--' ends the options, so later words are arguments even if "
        + "they start with '-'. A lone '-' means standard input or output where a command says so."

    static let helpOption = OptionSpec("help", short: "h", help: "Show this help.")
    static let versionOption = OptionSpec("version", help: "Print the version.")

    /// Help for [] (top level), a group name, or a command path; nil if unknown.
    public static func text(for path: [String], parser: ArgumentParser = ArgumentParser()) -> String? {
        if path.isEmpty { return topLevel(parser) }
        if let c = parser.command(path) { return command(c) }
        if path.count == 1, let g = parser.group(path[0]) { return group(g, parser) }
        return nil
    }

    public static func topLevel(_ parser: ArgumentParser = ArgumentParser()) -> String {
        var out = "photovault \(PhotoVaultCLI.version) - \(tagline)\n\n"
        out += "Usage: photovault [--store PATH] COMMAND [options] [arguments]\n\n"
        out += wrap(overview, indent: 0) + "\n\n"
        out += "Commands:\n"
        for c in parser.commands { out += row(c.name, c.summary) }
        out += row("help [COMMAND]", "Show help for a command")
        out += "\nGlobal options:\n"
        for o in CommandSpec.globalOptions + [helpOption, versionOption] { out += optionRow(o) }
        out += "\n" + wrap(conventions, indent: 0) + "\n"
        out += "\nExit status:\n"
        for e in ExitCodes.table { out += row(String(e.code), e.meaning, indent: 4, column: 8) }
        out += "\nRun 'photovault help COMMAND' for a command's options and examples.\n"
        return out
    }

    public static func group(_ g: CommandGroup, _ parser: ArgumentParser = ArgumentParser()) -> String {
        var out = "photovault \(g.name) - \(g.summary)\n\n"
        out += "Usage: photovault \(g.name) SUBCOMMAND [options] [arguments]\n\n"
        out += wrap(g.discussion, indent: 0) + "\n\nSubcommands:\n"
        for c in parser.subcommands(of: g.name) { out += row(c.path[1], c.summary) }
        out += "\nRun 'photovault \(g.name) SUBCOMMAND --help' for its options and examples.\n"
        return out
    }

    public static func command(_ c: CommandSpec) -> String {
        var out = "photovault \(c.name) - \(c.summary)\n\n"
        out += "Usage: \(c.usage)\n\n"
        out += wrap(c.discussion, indent: 0) + "\n"
        if !c.arguments.isEmpty {
            out += "\nArguments:\n"
            for a in c.arguments {
                out += row(a.variadic ? "\(a.name)..." : a.name, withDefault(a.help, a.defaultText))
            }
        }
        out += "\nOptions:\n"
        for o in c.options { out += optionRow(o) }
        out += "\nGlobal options:\n"
        for o in CommandSpec.globalOptions + [helpOption] { out += optionRow(o) }
        if !c.examples.isEmpty {
            out += "\nExamples:\n"
            for e in c.examples {
                out += "  $ \(e.command)\n"
                out += wrap(e.explanation, indent: 6) + "\n"
            }
        }
        return out
    }

    static func withDefault(_ help: String, _ defaultText: String?) -> String {
        guard let d = defaultText else { return help }
        return "\(help) (default: \(d))"
    }

    static func optionRow(_ o: OptionSpec) -> String {
        var help = o.help
        if let choices = o.choices { help += " One of: \(choices.joined(separator: ", "))." }
        if o.repeats { help += " May be repeated." }
        return row(o.synopsis, withDefault(help, o.defaultText))
    }

    /// "  left        right..." with the right column wrapped; a long left gets its own line.
    static func row(_ left: String, _ right: String, indent: Int = 2, column: Int = column) -> String {
        let lead = String(repeating: " ", count: indent) + left
        let body = wrap(right, indent: column)
        if lead.count + 2 <= column {
            return lead + String(body.dropFirst(lead.count)) + "\n"
        }
        return lead + "\n" + body + "\n"
    }

    /// Greedy word wrap to `width`, every line indented by `indent` spaces.
    public static func wrap(_ text: String, indent: Int, width: Int = width) -> String {
        let pad = String(repeating: " ", count: indent)
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if !line.isEmpty && pad.count + line.count + 1 + word.count > width {
                lines.append(pad + line)
                line = String(word)
            } else {
                line = line.isEmpty ? String(word) : line + " " + word
            }
        }
        lines.append(pad + line)
        return lines.joined(separator: "\n")
    }
}
