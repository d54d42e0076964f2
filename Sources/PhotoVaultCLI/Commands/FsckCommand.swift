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
        // The account's record is outside the tree, but a conflict there is the same story.
        if (try? AccountStore(layout: StoreLayout(root: args.storePath)).recordIsInConflict(user: vault.user)) == true {
            print("account record: syncConflict: " + UserCommands.conflictLine(1))
        }
        for a in summary.actions { print("repair: " + summary.sentence(for: a)) }
        let c = OfflineAccess.count
        let specials = summary.specialFiles == 0 ? "" : c(summary.specialFiles, "special file", nil) + ", "
        print("checked \(c(summary.files, "file", nil)), \(c(summary.directories, "directory", "directories")), "
              + "\(c(summary.symlinks, "symlink", nil)), " + specials
              + "\(c(Int(clamping: summary.chunksChecked), "chunk", nil)): \(c(summary.damageCount, "problem", nil))"
              + syncNotes(summary))
        if summary.leftInPlace > 0 {
            throw CLIError.fsckRepairIncomplete(problems: summary.damageCount, leftInPlace: summary.leftInPlace)
        }
        // A repair that dealt with every problem has its own code (32): the vault is
        // consistent now; 21 said "damage" as if nothing had been done. Sync conflicts and
        // debris are not damage and never repaired: they do not count either way.
        if repair && !summary.isClean && summary.unrepaired.allSatisfy({ !$0.isDamage }) {
            throw CLIError.fsckRepaired(problems: summary.damageCount)
        }
        if !summary.isClean { throw CLIError.fsckFoundDamage(problems: summary.damageCount) }
        return 0
    }

    /// `, 2 sync conflicts, 1 sync engine file`: reported, not damage (docs/SYNC.md).
    static func syncNotes(_ summary: FsckSummary) -> String {
        let conflicts = summary.problems.filter { $0.kind == .syncConflict }.count
        let debris = summary.problems.filter { $0.kind == .syncDebris }.count
        var out = ""
        if conflicts > 0 { out += ", \(conflicts) sync conflict\(conflicts == 1 ? "" : "s") (docs/SYNC.md says how to settle them)" }
        if debris > 0 { out += ", \(debris) sync engine file\(debris == 1 ? "" : "s") left alone" }
        return out
    }
}
