import Foundation
import PhotoVaultStore

/// `photovault fsck`: checks every header, chunk, name and xattr; `--repair` may only move
/// undecryptable entries into /lost+found and remove leftover temp files (docs/OFFLINE.md).
enum FsckCommand {
    static func run(_ args: ParsedArguments) throws -> Int32 {
        let repair = args.flag("repair")
        let vault = try OfflineAccess.open(args)
        // A mount of this vault, seen in the registry or through the lock it holds, is
        // refused the same way: exit 11 (store busy) and one line (docs/OFFLINE.md); exit 16
        // while it is closing after a lock.
        if repair, let e = vault.mountEntry {
            throw TreeLockHolder.closing(.init(pid: e.pid, mountpoint: e.mountpoint))
                ?? CLIError.repairWhileMounted(user: vault.user, mountpoint: e.mountpoint, pid: nil)
        }
        let check = { try Fsck(tree: vault.tree).run(repair: repair, progress: { _ in }) }
        let summary: FsckSummary
        if repair {
            do { summary = try vault.writing(check) }
            catch CLIError.vaultMounted(let user, let mp, let pid) {
                throw CLIError.repairWhileMounted(user: user, mountpoint: mp, pid: pid)
            }
        } else {
            summary = try check()
        }
        if summary.lostAndFound != Fsck.lostAndFoundName {
            print("/\(Fsck.lostAndFoundName) cannot take entries (not a directory, or a damaged one): /\(summary.lostAndFound) holds what repair moves")
        }
        for p in summary.problems { print(p.description) }
        for a in summary.actions { print("repair: " + summary.sentence(for: a)) }
        let c = OfflineAccess.count
        let specials = summary.specialFiles == 0 ? "" : c(summary.specialFiles, "special file", nil) + ", "
        print("checked \(c(summary.files, "file", nil)), \(c(summary.directories, "directory", "directories")), "
              + "\(c(summary.symlinks, "symlink", nil)), " + specials
              + "\(c(Int(clamping: summary.chunksChecked), "chunk", nil)): \(c(summary.problems.count, "problem", nil))")
        if summary.leftInPlace > 0 {
            throw CLIError.fsckRepairIncomplete(problems: summary.problems.count, leftInPlace: summary.leftInPlace)
        }
        // A repair that dealt with every problem has its own code (32): the vault is
        // consistent now; 21 said "damage" as if nothing had been done.
        if repair && !summary.isClean && summary.unrepaired.isEmpty {
            throw CLIError.fsckRepaired(problems: summary.problems.count)
        }
        if !summary.isClean { throw CLIError.fsckFoundDamage(problems: summary.problems.count) }
        return 0
    }
}
