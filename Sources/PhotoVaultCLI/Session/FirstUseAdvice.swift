import Foundation
import PhotoVaultStore

/// What `photovault mount` says when it is started without a terminal (a systemd unit, a
/// display manager's autostart, a login script) and would need one: the first use, which
/// offers to create the store and account only at a terminal, and a password with no source
/// but the terminal. One line naming what to do in that setting, with the exit code of the
/// error it stands for (3: no store; 27: no terminal for the password).
struct FirstUseAdvice: Error, CustomStringConvertible {
    let description: String
    let exitCode: Int32

    /// Started by systemd (a service has INVOCATION_ID; a Type=notify one NOTIFY_SOCKET).
    static var underSystemd: Bool {
        let env = ProcessInfo.processInfo.environment
        return env["INVOCATION_ID"] != nil || env["NOTIFY_SOCKET"] != nil
    }

    /// No store yet, and nobody at a terminal to accept the offer to create it.
    static func noStore(_ path: String) -> FirstUseAdvice {
        FirstUseAdvice(description: "no PhotoVault store at \(path) yet, and no terminal to create it from: run "
                           + "'photovault mount' once in a terminal (it offers to create the store and your account), "
                           + "then start this again",
                       exitCode: StoreError.storeNotInitialised(path: path).exitCode)
    }

    /// The password could only have come from a terminal, and there is none.
    static func noPasswordSource() -> FirstUseAdvice {
        let code = CLIError.noTerminal.exitCode
        if underSystemd {
            return FirstUseAdvice(description: "no terminal to ask the password on (started by systemd): give it with "
                                      + "--extpass 'systemd-ask-password --credential=photovault-password ...' and a "
                                      + "LoadCredential= line, as the shipped photovault.service does (README, "
                                      + "'Starting at login with systemd')", exitCode: code)
        }
        return FirstUseAdvice(description: "no terminal to ask the password on: give it with --passfile, --password-stdin "
                                  + "or --extpass (passfile= or extpass= in an fstab line), or let your login open the "
                                  + "vault through PAM (README, 'Unlocking with your login')", exitCode: code)
    }
}
