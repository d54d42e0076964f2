import Glibc
import PhotoVaultCrypto
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
        out: { s in _ = s.withCString { fputs($0, stdout) }; fflush(stdout) },
        err: { s in _ = s.withCString { fputs($0, stderr) }; fflush(stderr) })
}

public enum PhotoVaultCLI {
    public static let version = "0.1.0"

    /// The `photovault` program: parse argv, run the command, exit with its code.
    public static func main() -> Never {
        exit(run(Array(CommandLine.arguments.dropFirst())))
    }

    /// Runs one command line (without the program name) and returns the exit code.
    public static func run(_ args: [String], console: Console = .standard,
                           handlers: [String: CommandHandler] = Dispatch.handlers) -> Int32 {
        let invocation: Invocation
        do {
            invocation = try ArgumentParser().parse(args)
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

    /// The stderr line and exit code for any error a command may throw.
    public static func describe(_ error: Error) -> (String, Int32) {
        switch error {
        case let e as UsageError: return (e.description, ExitCodes.usage)
        case let e as TransferFailure:
            let (message, code) = describe(e.underlying)
            return ("\(message) (\(e.note))", code)
        case let e as StoreError: return ("photovault: \(e.description)", e.exitCode)
        case let e as CLIError: return ("photovault: \(e.description)", e.exitCode)
        // The background daemon reports its failure with the exit code it computed.
        case let e as DaemonFailure: return ("photovault: \(e.message)", e.code)
        case let e as CryptoError:
            if e == .memoryNotLocked { return describe(StoreError.keyMemoryNotLocked) }
            // An authentication failure outside the store's own checks is still an integrity failure.
            let code: Int32 = e == .authenticationFailed ? 22 : ExitCodes.generic
            return ("photovault: \(e.description)", code)
        default: return ("photovault: \(error)", ExitCodes.generic)
        }
    }
}
