import Foundation
import PhotoVaultCrypto
import PhotoVaultStore
import CLinux

/// `photovault class set/get/list`. A path on a live mount goes through the xattr
/// `user.photovault.class` (the daemon rewraps the key); any other path is a path inside
/// the vault (the password is needed): `set` goes through the mount too while that vault
/// is mounted, and is offline otherwise.
enum ClassCommands {
    static func set(_ args: ParsedArguments) throws -> Int32 {
        guard let path = args.argument("PATH"), let name = args.argument("CLASS") else { throw args.usageError("PATH and CLASS are required") }
        guard let cls = ProtectionClass(name: name) else {
            throw args.usageError("CLASS must be complete, complete-unless-open, until-first-auth or none")
        }
        try OfflineAccess.refuseDeadMount(path)
        if OfflineAccess.isOnLiveMount(path) {
            try MountRoute.setClass(Array(path.utf8CString), cls, display: path)
        } else {
            let vault = try OfflineAccess.open(args)
            if let mp = try vault.writableMount() {
                // A vault path while that vault is mounted: through the mount, the only writer.
                let vp = try VaultPath(path)
                try MountRoute.setClass(Array(MountRoute.path(mp, vp).utf8CString), cls, display: vp.description)
            } else {
                try vault.writing { try ClassTool(tree: vault.tree).set(path, to: cls) }
            }
        }
        print("\(DisplayText.escape(path)): \(cls.name)")
        return 0
    }

    static func get(_ args: ParsedArguments) throws -> Int32 {
        guard let path = args.argument("PATH") else { throw args.usageError("PATH is required") }
        try OfflineAccess.refuseDeadMount(path)
        if OfflineAccess.isOnLiveMount(path) {
            print(try MountRoute.className(Array(path.utf8CString), display: path) ?? "-")
            return 0
        }
        let info = try ClassTool(tree: OfflineAccess.openTree(args)).get(path)
        print(info.protectionClass?.name ?? "-")
        return 0
    }

    /// One line per entry, `CLASS<tab>VAULT_PATH` sorted by path bytes, the same through a
    /// mount as offline; `-` for entries without a class (symlinks).
    static func list(_ args: ParsedArguments) throws -> Int32 {
        guard let dir = args.argument("DIR") else { throw args.usageError("DIR is required") }
        try OfflineAccess.refuseDeadMount(dir)
        if let vaultDir = OfflineAccess.vaultPath(onLiveMount: dir) {
            let names = try FileManager.default.contentsOfDirectory(atPath: dir)
                .sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            for n in names {
                let cls = try? MountRoute.className(Array(StorePath.join(dir, n).utf8CString), display: n)
                print("\(cls ?? "-")\t\(DisplayText.escape(StorePath.join(vaultDir, n)))")
            }
            return 0
        }
        for info in try ClassTool(tree: OfflineAccess.openTree(args)).list(dir) {
            print("\(info.protectionClass?.name ?? "-")\t\(DisplayText.escape(info.path))")
        }
        return 0
    }
}
