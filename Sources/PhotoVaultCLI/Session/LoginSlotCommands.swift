import Glibc
import PhotoVaultCrypto
import PhotoVaultStore

/// `photovault user add-login` and `user remove-login`: the account's login slot, which lets
/// the PAM line open the vault with the login password (CREDENTIALS.md section 12).
enum LoginSlotCommands {
    static func add(_ args: ParsedArguments) throws -> Int32 {
        let user = try args.userName()
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        try UserCommands.requireAccount(accounts, user)
        let password = try PasswordInput().password(args)
        defer { password.wipe() }
        // Before the login password is typed twice, the vault password is checked, so a wrong
        // one is said first (from --login-passfile nothing is typed: one Argon2id is enough).
        if !args.has("login-passfile") { try accounts.open(user: user, password: password).wipe() }
        let login = try loginPassword(args)
        defer { login.wipe() }
        try accounts.addLoginSlot(user: user, password: password, loginPassword: login,
                                  parameters: KDFProfile.forNewAccounts)
        print("Your login password now opens the vault of \(user) (through the PAM line; see the README)")
        return 0
    }

    static func remove(_ args: ParsedArguments) throws -> Int32 {
        let user = try args.userName()
        let accounts = try AccountStore(layout: StoreLayout(root: args.storePath))
        try UserCommands.requireAccount(accounts, user)
        let password = try PasswordInput().password(args)
        defer { password.wipe() }
        let removed = try accounts.removeLoginSlot(user: user, password: password)
        print(removed ? "The login password no longer opens the vault of \(user)"
                      : "The vault of \(user) had no login slot; nothing changed")
        return 0
    }

    /// From --login-passfile, else asked twice on the terminal. The password rules for new
    /// vault passwords are not applied: the login password is whatever the system accepts.
    static func loginPassword(_ args: ParsedArguments) throws -> SecureBytes {
        let input = PasswordInput()
        if let f = args.value("login-passfile") {
            return try input.read(from: .file(f), confirm: false, prompt: "", fileKind: "login password file")
        }
        let first = try input.readFromTerminal(prompt: "Login password: ")
        let second: SecureBytes
        do { second = try input.readFromTerminal(prompt: "Retype login password: ") } catch { first.wipe(); throw error }
        defer { second.wipe() }
        guard PasswordInput.equal(first, second) else {
            first.wipe()
            throw CLIError.passwordsDoNotMatch
        }
        return first
    }
}
