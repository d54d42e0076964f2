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
}
