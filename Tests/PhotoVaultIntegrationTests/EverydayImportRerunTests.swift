import Foundation
import XCTest

/// A rerun of an import or export that stopped partway continues (issue 38, item 5): what is
/// already in place with the same size and modification time (a symlink: the same target) is
/// skipped and counted; anything else in the way is still the `exists` error without --force.
/// It used to stop at the first file already copied (exit 20), leaving --force, which copies
/// everything again, as the only way on.
final class EverydayImportRerunTests: XCTestCase {
    typealias T = OfflineCommandTests

    func testARerunOfAnImportOrExportSkipsWhatIsAlreadyInPlace() {
        let (sb, src) = T.sandboxWithTree("pv-every-rerun")
        sb.ok("ln -s 2024/raw/IMG_0001.CR2 \(Sandbox.quote(src))/link")
        let first = T.pv(sb, ["import", src, "/albums"])
        XCTAssertEqual(first.status, 0, first.stderr)

        // A file added since (as if the first run had stopped before it): only it is copied.
        sb.ok("head -c 4000 /dev/urandom > \(Sandbox.quote(src))/2024/later.jpg")
        let rerun = T.pv(sb, ["import", src, "/albums"])
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertTrue(rerun.stderr.contains(" 0 symlinks, "), rerun.stderr)
        XCTAssertTrue(rerun.stderr.contains("; 7 already in place (same size and modification time), left as they were\n"),
                      rerun.stderr)
        let out = sb.plainDir("out")
        let exp = T.pv(sb, ["export", "/albums/src", out])
        XCTAssertEqual(exp.status, 0, exp.stderr)
        XCTAssertEqual(Self.entries(sb, out + "/src"), Self.entries(sb, src))
        XCTAssertEqual(T.checksums(sb, out + "/src"), T.checksums(sb, src))

        // A file that differs (size or time) is still refused without --force, as before.
        sb.ok("printf 'changed notes, longer now\\n' > \(Sandbox.quote(src))/notes.txt")
        let differs = T.pv(sb, ["import", src, "/albums"])
        XCTAssertEqual(differs.status, 20, differs.stderr)
        XCTAssertTrue(differs.stderr.contains("already exists: /albums/src/notes.txt"), differs.stderr)
        sb.ok("printf 'private notes\\n' > \(Sandbox.quote(src))/notes.txt; touch -d '2015-05-06 07:08:09.123456789' "
              + "\(Sandbox.quote(src))/notes.txt")
        sb.ok("touch -d '2001-01-01' \(Sandbox.quote(out))/src/photo.jpg")

        // Export: the files already out are skipped; one whose time differs is refused.
        let moved = T.pv(sb, ["export", "/albums/src", out])
        XCTAssertEqual(moved.status, 20, moved.stderr)
        XCTAssertTrue(moved.stderr.contains("already exists: \(out)/src/photo.jpg"), moved.stderr)
        sb.ok("rm \(Sandbox.quote(out))/src/photo.jpg \(Sandbox.quote(out))/src/2024/later.jpg")
        let again = T.pv(sb, ["export", "/albums/src", out])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stderr.contains("; 6 already in place (same size and modification time), left as they were\n"),
                      again.stderr)
        XCTAssertEqual(Self.entries(sb, out + "/src"), Self.entries(sb, src))
        XCTAssertEqual(T.checksums(sb, out + "/src"), T.checksums(sb, src))

        // Through a live mount too (cp -R -n underneath): same files pass, a new one is copied.
        sb.ok("head -c 999 /dev/urandom > \(Sandbox.quote(src))/live.jpg")
        let mp = sb.mount()
        let live = T.pv(sb, ["import", src, "/albums"])
        XCTAssertEqual(live.status, 0, live.stderr)
        XCTAssertEqual(live.stderr, "imported through the live mount at \(mp); 8 already in place (same size and "
                       + "modification time), left as they were\n")
        XCTAssertEqual(sb.ok("cmp \(Sandbox.quote(src))/live.jpg \(Sandbox.quote(mp))/albums/src/live.jpg && echo same"), "same\n")
        sb.ok("touch \(Sandbox.quote(src))/photo.jpg")
        let liveDiffers = T.pv(sb, ["import", src, "/albums"])
        XCTAssertEqual(liveDiffers.status, 20, liveDiffers.stderr)
        XCTAssertTrue(liveDiffers.stderr.contains("already exists: /albums/src/photo.jpg"), liveDiffers.stderr)
        sb.unmount(mp)
    }

    /// `T.listing` without 2024's line: a directory a run merges into keeps its own time
    /// (changed when the rerun added a file to it), as cp -r leaves it.
    static func entries(_ sb: Sandbox, _ dir: String) -> String {
        T.listing(sb, dir).split(separator: "\n").filter { !$0.hasPrefix("2024 ") }.joined(separator: "\n")
    }
}
