/// The one escaping rule for names and paths a command prints (docs/OFFLINE.md, "Names in
/// output"), on stdout and stderr alike. A name in the vault or a path given on the command
/// line can hold a newline or a terminal escape (`ESC]0;...BEL` retitles the terminal,
/// `ESC[31m` colours it): printed raw, it acts on the terminal and splits a line-based
/// listing into lines a script reads wrongly.
public enum DisplayText {
    /// `s` with `\` written as `\\`, newline, tab and carriage return as `\n`, `\t`, `\r`,
    /// the other C0 controls and DEL as `\xHH`, and the C1 controls, the Unicode line and
    /// paragraph separators and the bidirectional controls (which reorder what a terminal
    /// shows) as `\u{HHHH}`; everything else as it is. The result is one line, and two
    /// different names never print the same.
    public static func escape(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: needsEscape) else { return s }
        var out = ""
        for u in s.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case _ where u.value < 0x20 || u.value == 0x7f:
                out += "\\x" + (u.value < 0x10 ? "0" : "") + String(u.value, radix: 16)
            case _ where needsEscape(u):
                out += "\\u{" + String(u.value, radix: 16) + "}"
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }

    private static func needsEscape(_ u: Unicode.Scalar) -> Bool {
        switch u.value {
        case 0x5c, 0..<0x20, 0x7f, 0x80...0x9f, 0x2028, 0x2029, 0x200e, 0x200f, 0x202a...0x202e, 0x2066...0x2069: return true
        default: return false
        }
    }
}
