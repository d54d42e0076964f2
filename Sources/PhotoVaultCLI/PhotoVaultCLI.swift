import Glibc
import PhotoVaultCrypto
import PhotoVaultSession
import PhotoVaultStore

/// Where the command writes. `standard` is stdout/stderr; tests capture into strings.
public struct Console {
    public var out: (String) -> Void
    public var err: (String) -> Void

    public init(out: @escaping (String) -> Void, err: @escaping (String) -> Void) {
        self.out = out
        self.err = err
    }

    public static let standard = Console(
        out: { s in
            if s.withCString({ fputs($0, stdout) }) == EOF || fflush(stdout) != 0 { PhotoVaultCLI.outputErrno = errno }
        },
        err: { s in _ = s.withCString { fputs($0, stderr) }; fflush(stderr) })
}

public enum PhotoVaultCLI {
    public static let version = "0.1.0"

    /// The errno of the last failed flush of `Console.standard`'s output (for the exit check).
    nonisolated(unsafe) static var outputErrno: Int32?

    /// The `photovault` program: parse argv, run the command, exit with its code.
    public static func main() -> Never {
        // Swift on Linux reads the arguments from /proc/self/cmdline: without /proc (a chroot
        // or container that lacks it) there are none, not even the program's name, and every
        // command line read as "no command given" (exit 2). photovault needs /proc anyway
        // (it opens store files through /proc/self/fd and starts its daemon as /proc/self/exe).
        guard !CommandLine.arguments.isEmpty else {
            exit(report(StoreError.io(errno: ENOENT, context: "cannot read this command's arguments from "
                                      + "/proc/self/cmdline (is /proc mounted? photovault needs it)"), .standard))
        }
        announceThrottleWaits()
        exit(finishStandardOutput(run(Array(CommandLine.arguments.dropFirst()))))
    }

    /// On a terminal, a wait after recent wrong passwords is said before it starts (1, 2,
    /// 4 s..., then Argon2id: it looked like a hang). Scripts (stderr not a terminal) get
    /// nothing new.
    static func announceThrottleWaits() {
        guard isatty(STDERR_FILENO) == 1 else { return }
        LoginThrottle.announceWait = { seconds in
            let s = max(1, Int(seconds.rounded(.up)))
            let line = Array("photovault: waiting \(s) s after recent wrong passwords\n".utf8)
            _ = line.withUnsafeBytes { Glibc.write(STDERR_FILENO, $0.baseAddress, $0.count) }
        }
    }

    /// What a command printed must have reached its standard output, as coreutils' commands
    /// check at exit: `class list > file` on a full disk exited 0 with the listing lost. A
    /// command that succeeded but whose output could not be written exits with that error
    /// (19 on a full device, else 1) and one line on stderr. A stdout the caller closed
    /// (`>&-`: read-only /dev/null, `ProcessSetup.openStandardDescriptors`) was discarded on
    /// purpose and is not judged here (`export -` and the recovery key check their writes).
    static func finishStandardOutput(_ code: Int32) -> Int32 {
        let flushed = fflush(stdout) == 0
        let flushErrno = errno
        guard !flushed || ferror(stdout) != 0 else { return code }
        let mode = fcntl(STDOUT_FILENO, F_GETFL)
        guard code == ExitCodes.success, mode >= 0, mode & O_ACCMODE != O_RDONLY else { return code }
        let e = flushed ? outputErrno ?? EIO : flushErrno
        let failure: StoreError = e == ENOSPC || e == EDQUOT
            ? .destinationFull("standard output") : .io(errno: e, context: "write standard output")
        return report(failure, .standard)
    }

    /// Runs one command line (without the program name) and returns the exit code.
    public static func run(_ args: [String], console: Console = .standard,
                           handlers: [String: CommandHandler] = Dispatch.handlers) -> Int32 {
        let invocation: Invocation
        do {
            // `photovault STORE MOUNTPOINT -o OPTIONS`, as mount.fuse3 runs it, is `mount`.
            if let helper = try MountHelperForm.commandLine(for: args) {
                SessionEnvironment.adoptUserRuntimeDirectory()   // mount(8) passed none
                invocation = try ArgumentParser().parse(helper)
            } else {
                invocation = try ArgumentParser().parse(args)
            }
        } catch {
            return report(error, console)
        }
        switch invocation {
        case .help(let path):
            console.out(Help.text(for: path) ?? Help.topLevel())
            return ExitCodes.success
        case .version:
            console.out("photovault \(version)\n")
            return ExitCodes.success
        case .generateManPage:
            console.out(ManPage.render())
            return ExitCodes.success
        case .generateCompletion(let shell):
            guard let script = Completion.script(shell: shell) else {
                return report(UsageError("unsupported shell '\(shell)'"), console)
            }
            console.out(script)
            return ExitCodes.success
        case .run(let spec, let parsed):
            guard let handler = handlers[spec.name] else {
                return report(CLIError.notImplemented(spec.name), console)
            }
            do {
                return try handler(parsed)
            } catch {
                return report(error, console)
            }
        }
    }

    /// Prints one line for a failure and returns its exit code.
    static func report(_ error: Error, _ console: Console) -> Int32 {
        let (message, code) = describe(error)
        console.err(message + "\n")
        return code
    }

    /// The stderr line and exit code for any error a command may throw. Names and paths in
    /// it are escaped (`DisplayText`): an error line is one line, whatever a name holds.
    public static func describe(_ error: Error) -> (String, Int32) {
        let (message, code) = unescapedDescription(error)
        return (DisplayText.escape(message), code)
    }

    private static func unescapedDescription(_ error: Error) -> (String, Int32) {
        switch error {
        case let e as UsageError: return (e.description, ExitCodes.usage)
        case let e as SessionError: return ("photovault: \(e.description)", e.exitCode)
        case let e as FirstUseAdvice: return ("photovault: \(e.description)", e.exitCode)
        case let e as TransferFailure:
            let (message, code) = unescapedDescription(e.underlying)
            return ("\(message) (\(e.note))", code)
        case let e as StoreError: return ("photovault: \(e.description)", e.exitCode)
        case let e as CLIError: return ("photovault: \(e.description)", e.exitCode)
        // The background daemon reports its failure with the exit code it computed.
        case let e as DaemonFailure: return ("photovault: \(e.message)", e.code)
        case let e as CryptoError:
            if e == .memoryNotLocked { return unescapedDescription(StoreError.keyMemoryNotLocked) }
            // An authentication failure outside the store's own checks is still an integrity failure.
            let code: Int32 = e == .authenticationFailed ? 22 : ExitCodes.generic
            return ("photovault: \(e.description)", code)
        default: return ("photovault: \(error)", ExitCodes.generic)
        }
    }
}
