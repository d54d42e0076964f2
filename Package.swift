// swift-tools-version:6.0
// PhotoVault: an encrypted photo vault for Linux (FUSE + libsodium).
// Layers, each testable without the one above it:
//   C bridges (CSodium, COpenSSL, CIPSecMB, CFuse, CSystemd) -> PhotoVaultCrypto -> PhotoVaultStore
//   -> PhotoVaultFS / PhotoVaultLock / PhotoVaultSession / PhotoVaultPrivacy -> PhotoVaultCLI -> photovault
import PackageDescription

let package = Package(
    name: "PhotoVault",
    products: [
        .executable(name: "photovault", targets: ["photovault"]),
    ],
    targets: [
        // 1. C bridges, found through pkg-config.
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),   // bulk AES-GCM only
        // Bulk AES-GCM on CPUs with VAES (Debian ships no pkg-config file for it).
        .systemLibrary(name: "CIPSecMB", providers: [.apt(["libipsec-mb-dev"])]),
        .systemLibrary(name: "CLinux"),   // Linux syscalls Glibc's module lacks (renameat2, O_PATH...)
        // 2. Crypto: keys in secure memory, chunk AEAD, names, key wrapping. No file I/O.
        .target(name: "PhotoVaultCrypto", dependencies: ["CSodium", "COpenSSL", "CIPSecMB"]),
        // 3. Store: on-disk layout, credentials, headers, names. No FUSE.
        .target(name: "PhotoVaultStore", dependencies: ["PhotoVaultCrypto", "CSodium", "CLinux"]),
        // 4. Filesystem: libfuse3 low-level adapter over the store.
        .target(name: "PhotoVaultFS", dependencies: ["PhotoVaultStore", "PhotoVaultCrypto", "CFuse", "CLinux"]),
        // 5. Lock watching: D-Bus, signals, idle timer, control socket.
        .target(name: "PhotoVaultLock", dependencies: ["CSystemd"]),
        // 5b. Session: what starts and opens the vault with the user's session (mount(8)'s
        //     helper form, systemd's readiness protocol, pam_exec's input). No FUSE, no store writes.
        .target(name: "PhotoVaultSession", dependencies: ["PhotoVaultCrypto", "CSystemd"]),
        // 5c. Desktop privacy: the traces a desktop keeps of the files it shows (thumbnail cache,
        //     recent files, search indexers). Knows paths and file formats, not the store.
        .target(name: "PhotoVaultPrivacy", dependencies: ["CLinux"]),
        // 6. The command: argument parsing, help, and the commands themselves.
        .target(name: "PhotoVaultCLI", dependencies: ["PhotoVaultStore", "PhotoVaultFS", "PhotoVaultLock", "PhotoVaultSession", "PhotoVaultPrivacy", "PhotoVaultCrypto", "CLinux"]),
        .executableTarget(name: "photovault", dependencies: ["PhotoVaultCLI"]),

        .testTarget(name: "PhotoVaultCryptoTests", dependencies: ["PhotoVaultCrypto", "CSodium"]),
        .testTarget(name: "PhotoVaultStoreTests", dependencies: ["PhotoVaultStore", "PhotoVaultCrypto"],
                    resources: [.copy("Vectors")]),
        .testTarget(name: "PhotoVaultLockTests", dependencies: ["PhotoVaultLock"]),
        .testTarget(name: "PhotoVaultSessionTests", dependencies: ["PhotoVaultSession", "PhotoVaultCrypto"]),
        .testTarget(name: "PhotoVaultCLITests", dependencies: ["PhotoVaultCLI"]),
        .testTarget(name: "PhotoVaultPrivacyTests", dependencies: ["PhotoVaultPrivacy"]),
        // Integration tests: drive the built `photovault` binary and real tools on a real mount.
        .testTarget(name: "PhotoVaultFSTests", dependencies: ["PhotoVaultFS", "PhotoVaultStore", "PhotoVaultCrypto"]),
        // End-to-end: the built `photovault` binary, real mounts, real tools, a private D-Bus.
        .testTarget(name: "PhotoVaultIntegrationTests", dependencies: ["photovault", "PhotoVaultStore", "PhotoVaultCrypto", "CLinux"]),
    ],
    swiftLanguageModes: [.v5]
)
