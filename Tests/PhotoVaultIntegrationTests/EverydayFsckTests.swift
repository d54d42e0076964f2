import Foundation
import XCTest

/// What `fsck --repair` tells its user (issue 38, items 13 and 14): a sentence per repair, its
/// own exit status (32) when everything it found is repaired, and lost+found names a user can
/// read. It printed Swift debug descriptions (`repair: movedToLostAndFound(storePath: ...)`)
/// and exited 21, "found damage", after repairing everything.
final class EverydayFsckTests: XCTestCase {
    typealias T = OfflineCommandTests

    /// The tree root of alice's vault in the store.
    static func treeRoot(_ sb: Sandbox) -> String {
        sb.ok("ls -d \(Sandbox.quote(sb.store))/users/*").trimmingCharacters(in: .newlines)
    }

    /// Flips a byte in the middle of the store's largest file (the tree's 250,000-byte big.bin).
    static func damageLargestFile(_ sb: Sandbox) {
        sb.ok("""
        f=$(find \(Sandbox.quote(treeRoot(sb))) -type f -printf '%s %p\\n' | sort -n | tail -1 | cut -d' ' -f2-)
        printf '\\xff' | dd of="$f" bs=1 seek=100000 conv=notrunc status=none
        """)
    }

    func testARepairSaysWhatItDidInSentencesAndExits32WhenEverythingIsRepaired() {
        let (sb, _) = T.importedTree("pv-every-fsck", at: "/v")
        let root = Self.treeRoot(sb)
        Self.damageLargestFile(sb)
        sb.ok("printf 'half' > \(Sandbox.quote(root))/.pvtmp-interrupted")
        let check = T.pv(sb, ["fsck"])
        XCTAssertEqual(check.status, 21, check.stdout + check.stderr)

        let repair = T.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(repair.status, 32, repair.stdout + repair.stderr)
        let lines = repair.stdout.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("repair: moved /v/src/2024/big.bin into /lost+found as v%2Fsrc%2F2024%2Fbig.bin"),
                      repair.stdout)
        XCTAssertTrue(lines.contains("repair: removed /.pvtmp-interrupted, a temp file an interrupted write left"), repair.stdout)
        XCTAssertFalse(repair.stdout.contains("movedToLostAndFound") || repair.stdout.contains("removedTemp"), repair.stdout)
        XCTAssertEqual(repair.stderr, "photovault: fsck found 2 problems and repaired all of them; a new check finds none\n")
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)

        // Damage repair does not touch (an xattr whose name fails authentication) stays 21.
        sb.ok("setfattr -n user.pv.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA -v 0x00 "
              + "$(find \(Sandbox.quote(root)) -type f -printf '%s %p\\n' | sort -n | tail -2 | head -1 | cut -d' ' -f2-)")   // IMG_0001.CR2 (big.bin is in lost+found)
        let partial = T.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(partial.status, 21, partial.stdout + partial.stderr)
        XCTAssertEqual(partial.stderr, "photovault: fsck found 1 problem\n")
    }

    /// lost+found gets nothing that fails every read: debris in which nothing can be read (a
    /// foreign file, an orphan long-name companion) is set aside in the store's .pvdebris,
    /// which the mount does not show (they used to show in /lost+found as files that fail
    /// every read). A sync engine's conflict copies are not damage and are never moved (they
    /// went into /lost+found as `bad-name v%2Fsrc%2F<ciphertext>...`): the copy of a file
    /// shows beside it under a marked name, and a copy of a `.pvdir` is read as another
    /// version of the folder's names (SyncConflictTests).
    func testLostAndFoundHoldsPlaintextNamedEntriesAndNoUnreadableDebris() {
        let (sb, src) = T.importedTree("pv-every-lf", at: "/v")
        let root = Self.treeRoot(sb)
        sb.ok("""
        set -e
        f=$(find \(Sandbox.quote(root)) -type f -printf '%s %p\\n' | sort -n | tail -3 | head -1 | cut -d' ' -f2-)   # photo.jpg
        d=$(dirname "$f")
        cp -p "$f" "$f.sync-conflict-20261206-101010-ABCDEFG"
        cp "$d/.pvdir" "$d/.sync-conflict-20261206-101010-7RXRS6P.pvdir"
        printf 'dropped here by hand\\n' > "$d/dropped.txt"
        printf 'x' > "$d/~AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.name"
        """)
        let repair = T.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(repair.status, 32, repair.stdout + repair.stderr)
        let lines = repair.stdout.split(separator: "\n").map(String.init)
        for debris in ["dropped.txt", "~AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.name"] {
            XCTAssertTrue(lines.contains { $0.hasPrefix("repair: set aside /v/src/\(debris), which holds nothing readable, "
                                                        + "out of the mount's view (the store keeps it as .pvdebris/") },
                          "\(debris): \(repair.stdout)")
        }
        XCTAssertFalse(lines.contains { $0.hasPrefix("repair:") && $0.contains("sync-conflict") }, repair.stdout)
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(root))/.pvdebris | wc -l"), "2\n")
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)

        let mp = sb.mount()
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))"), "v\n", "nothing went into /lost+found")
        let copy = "photo (conflict 2026-12-06 101010).jpg"
        XCTAssertTrue(sb.ok("ls -A \(Sandbox.quote(mp))/v/src").split(separator: "\n").contains(Substring(copy)))
        XCTAssertEqual(sb.ok("cmp \(Sandbox.quote(mp + "/v/src/" + copy)) \(Sandbox.quote(src))/photo.jpg && echo same"), "same\n")
        sb.unmount(mp)
    }
}
