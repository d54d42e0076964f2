import Foundation
import Glibc
import PhotoVaultStore

/// Default values that depend on the environment. The help text describes them in words
/// (CommandSpec); these compute them.
public enum Defaults {
    /// `$PHOTOVAULT_STORE` if set and non-empty, else `${XDG_DATA_HOME:-$HOME/.local/share}/photovault/store`.
    /// A relative XDG_DATA_HOME is ignored, as the XDG base-directory spec asks (it would
    /// put the store under whatever directory the command happens to run in).
    public static func storePath(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let s = env["PHOTOVAULT_STORE"], !s.isEmpty { return s }
        let data: String
        if let x = env["XDG_DATA_HOME"], x.hasPrefix("/") {
            data = x
        } else {
            data = homeDirectory(environment: env) + "/.local/share"
        }
        return data + "/photovault/store"
    }

    /// `$HOME`, else the passwd entry's home directory.
    public static func homeDirectory(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let h = env["HOME"], !h.isEmpty { return h }
        if let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }

    /// The login name of the real user (`getpwuid(getuid())`), not `$USER`, which is easy to spoof
    /// by accident (sudo, su) and would pick the wrong account.
    public static func loginName() -> String? {
        guard let pw = getpwuid(getuid()), let name = pw.pointee.pw_name else { return nil }
        return String(cString: name)
    }

    public static func mountpoint(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        homeDirectory(environment: env) + "/PhotoVault"
    }

    /// Parses "90", "90s", "10m", "1h", "1.5h" into seconds; nil if malformed or negative.
    public static func parseDuration(_ text: String) -> Double? {
        var digits = Substring(text)
        var scale = 1.0
        switch text.last {
        case "s": digits = digits.dropLast()
        case "m": digits = digits.dropLast(); scale = 60
        case "h": digits = digits.dropLast(); scale = 3600
        default: break
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isNumber || $0 == "." }),
              let n = Double(digits), n >= 0 else { return nil }
        return n * scale
    }
}

extension ParsedArguments {
    /// The --store value, else the default store path.
    public var storePath: String { value("store") ?? Defaults.storePath() }

    /// The account named by the USER argument or --user, else the login name.
    public func userName() throws -> String {
        if let u = argument("USER") ?? value("user") {
            // Swift turns bytes that are not UTF-8 into U+FFFD, so '\xff' and '\xfe' would
            // both be the account named "\u{FFFD}": refuse them instead of merging them.
            if u.unicodeScalars.contains("\u{FFFD}") && RawArguments.anyInvalidUTF8(decodingTo: u) {
                throw StoreError.invalidArgument("the user name is not valid UTF-8 text")
            }
            RawArguments.hide(u)
            return u
        }
        guard let n = Defaults.loginName() else { throw CLIError.failed("cannot find your login name; give the user name") }
        return n
    }

    /// The MOUNTPOINT argument, else ~/PhotoVault.
    public var mountpoint: String { argument("MOUNTPOINT") ?? Defaults.mountpoint() }

    /// A DURATION option in seconds; nil if absent; a usage error if malformed.
    public func duration(_ long: String) throws -> Double? {
        guard let text = value(long) else { return nil }
        guard let d = Defaults.parseDuration(text) else {
            throw usageError("invalid duration '\(text)' for '--\(long)' (examples: 90s, 10m, 1h)")
        }
        return d
    }
}

/// The process's argv as the kernel gave it, before Swift decoded it.
enum RawArguments {
    /// Whether some argument is not valid UTF-8 and, decoded with U+FFFD for its bad bytes,
    /// contains `text` (an argument of its own or the value of `--user=...`).
    static func anyInvalidUTF8(decodingTo text: String) -> Bool {
        let argv = CommandLine.unsafeArgv
        for i in 1..<Int(CommandLine.argc) {
            guard let p = argv[i] else { continue }
            if String(validatingCString: p) == nil && String(cString: p).contains(text) { return true }
        }
        return false
    }

    /// Takes `value` (an argument of its own, or the value of `--user=`) out of this process's
    /// command line as other processes read it (`/proc/PID/cmdline`, `ps`, `top`), which every
    /// local user may read: an account name given on the command line was shown to all of
    /// them for as long as the command ran, a password prompt included. The kernel lays the
    /// arguments out back to back and reads them from this memory, so they are rewritten in
    /// place, the others moved up, the end filled with NULs (the length of the whole command
    /// line stays; the kernel keeps it). `argv` is pointed at the moved strings; a dropped one
    /// becomes "". Nothing is done unless the layout is the kernel's. Call after the last
    /// read of the value from the raw arguments (`anyInvalidUTF8`).
    static func hide(_ value: String) {
        let argc = Int(CommandLine.argc)
        let argv = CommandLine.unsafeArgv
        guard argc > 1, !value.isEmpty, let first = argv[0] else { return }
        var strings: [[CChar]] = []
        var end = first
        for i in 0..<argc {
            guard let p = argv[i], p == end else { return }
            let n = strlen(p)
            strings.append(Array(UnsafeBufferPointer(start: p, count: n)))
            end = p + n + 1
        }
        let target = Array(value.utf8CString.dropLast())
        let option = Array("--user=".utf8CString.dropLast())
        var kept: [[CChar]] = [strings[0]]
        for s in strings.dropFirst() {
            if s == target { continue }
            if s.count > option.count, s.starts(with: option), Array(s.dropFirst(option.count)) == target {
                kept.append(option)
            } else {
                kept.append(s)
            }
        }
        guard kept != strings else { return }
        let total = end - first
        var out = [CChar](repeating: 0, count: total)
        var offset = 0
        var starts: [Int] = []
        for s in kept {
            starts.append(offset)
            out.replaceSubrange(offset..<offset + s.count, with: s)
            offset += s.count + 1
        }
        out.withUnsafeBufferPointer { first.update(from: $0.baseAddress!, count: total) }
        for i in 0..<argc { argv[i] = i < starts.count ? first + starts[i] : end - 1 }
    }
}
