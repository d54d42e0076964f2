import Foundation
import PhotoVaultCrypto
import PhotoVaultStore

/// `photovault init`: creates an empty store (config + accounts/ + users/).
enum InitCommand {
    static func run(_ args: ParsedArguments) throws -> Int32 {
        let layout = StoreLayout(root: args.storePath)
        var cipher = ContentCipher.preferred
        if let c = args.value("cipher") {
            switch c.lowercased() {
            case "aes256gcm", "aes-256-gcm": cipher = .aes256gcm
            case "xchacha20poly1305", "xchacha20-poly1305": cipher = .xchacha20poly1305
            default: throw args.usageError("--cipher takes aes256gcm or xchacha20poly1305")
            }
            guard cipher.isAvailable else { throw CLIError.failed("\(cipher.name) is not available on this CPU") }
        }
        var chunk = StoreConfig.defaultChunkSize
        if let s = args.value("chunk-size") {
            guard let n = Int(s), StoreConfig.isValidChunkSize(n) else {
                throw args.usageError("--chunk-size must be a multiple of 4096 from 4096 to 1048576")
            }
            chunk = n
        }
        try layout.initialise(config: StoreConfig(cipher: cipher, chunkSize: chunk))
        print("Created an empty PhotoVault store at \(DisplayText.escape(layout.root)) (\(cipher.name), \(chunk)-byte chunks).")
        // What the vault will refuse on this drive, said now rather than at the first `ln -s`
        // (the probe ran in initialise; docs/STORAGE.md).
        let caps = BackingCapabilities.of(path: layout.root)
        let refused = [(caps.hardLinks, "hard links"), (caps.symlinks, "symlinks"), (caps.xattrs, "extended attributes")]
            .filter { !$0.0 }.map { $0.1 }
        if !refused.isEmpty {
            print("Note: this drive keeps no \(refused.joined(separator: ", ")); the vault refuses them here (see docs/STORAGE.md).")
        }
        if !caps.renamedDirectoryKeepsNewFiles {
            print("Note: this drive loses new files in a renamed folder; the vault moves folders by copying (see docs/STORAGE.md).")
        }
        print("Next: photovault user add [USER] --store \(DisplayText.escape(layout.root))")
        return 0
    }
}

/// The Argon2id cost for new accounts. `PHOTOVAULT_KDF_PROFILE=floor` selects the floor cost
/// (ops 2, 64 MiB) for tests and benchmarks; nothing can select less than the floor.
enum KDFProfile {
    static var forNewAccounts: Argon2Parameters {
        ProcessInfo.processInfo.environment["PHOTOVAULT_KDF_PROFILE"] == "floor" ? .floor : .standard
    }
}
