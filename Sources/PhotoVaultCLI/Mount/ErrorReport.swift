import PhotoVaultFS

/// Maps mount-time failures (from the FS layer and the daemon) onto the command's exit codes.
enum ErrorReport {
    static func cliError(_ error: Error) -> Error {
        guard let m = error as? MountError else { return error }
        switch m {
        case .fuseUnavailable(let e): return CLIError.noFuseDevice(e)
        case .mountpointMissing(let p), .mountpointNotDirectory(let p), .mountpointNotEmpty(let p):
            return CLIError.mountpointNotEmptyDirectory(p)
        case .alreadyMounted(let p): return CLIError.alreadyMounted(p)
        default: return CLIError.failed(m.description)
        }
    }

    /// (exit code, message without the "photovault: " prefix).
    static func describe(_ error: Error) -> (Int32, String) {
        if let d = error as? DaemonFailure { return (d.code, d.message) }
        let (msg, code) = PhotoVaultCLI.describe(cliError(error))
        let prefix = "photovault: "
        return (code, msg.hasPrefix(prefix) ? String(msg.dropFirst(prefix.count)) : msg)
    }
}
