import Foundation
import PhotoVaultStore

/// `photovault fsck`: checks every header, chunk, name and xattr; `--repair` may only move
/// undecryptable entries into /lost+found and remove leftover temp files (docs/OFFLINE.md).
enum FsckCommand {
    static func run(_ args: ParsedArguments) throws -> Int32 {
        let repair = args.flag("repair")
        if repair && !OfflineAccess.liveMounts(store: args.storePath).isEmpty {
            throw CLIError.failed("unmount the vault before 'fsck --repair' (a live mount must be the only writer)")
        }
        let vault = try OfflineAccess.open(args)
        let check = { try Fsck(tree: vault.tree).run(repair: repair, progress: { _ in }) }
        let summary = repair ? try vault.writing(check) : try check()
        if summary.lostAndFound != Fsck.lostAndFoundName {
            print("/\(Fsck.lostAndFoundName) is not a directory: /\(summary.lostAndFound) holds what repair moves")
        }
        for p in summary.problems { print(p.description) }
        for a in summary.actions { print("repair: \(a)") }
        print("checked \(summary.files) files, \(summary.directories) directories, \(summary.symlinks) symlinks, "
              + "\(summary.chunksChecked) chunks: \(summary.problems.count) problem\(summary.problems.count == 1 ? "" : "s")")
        if !summary.isClean { throw CLIError.fsckFoundDamage(problems: summary.problems.count) }
        return 0
    }
}
