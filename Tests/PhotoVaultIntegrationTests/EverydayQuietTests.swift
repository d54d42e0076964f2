import Foundation
import XCTest

/// What import and export print, for scripts (issue 38, item 8): `--quiet` prints nothing but
/// errors and skipped entries; `export -` prints no summary on stderr unless `--summary` asks
/// for one; counts of one are singular ("1 file", not "1 files").
final class EverydayQuietTests: XCTestCase {
    typealias T = OfflineCommandTests

    func testQuietAndSummaryOptionsAndSingularCounts() {
        let sb = Sandbox("pv-every-quiet")
        sb.initStore()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        sb.ok("printf 'one photo\\n' > \(Sandbox.quote(src))/a.jpg; ln -s a.jpg \(Sandbox.quote(src))/link")

        let imp = T.pv(sb, ["import", src, "/v"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertTrue(imp.stderr.hasPrefix("imported 1 file, 1 directory, 1 symlink, "), imp.stderr)

        // export - : the file on stdout, nothing on stderr; with --summary, the summary.
        let plain = sb.run(T.pvLine(sb, ["export", "/v/src/a.jpg", "-"]))
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertEqual(plain.stdout, "one photo\n")
        XCTAssertEqual(plain.stderr, "")
        let asked = sb.run(T.pvLine(sb, ["export", "--summary", "/v/src/a.jpg", "-"]))
        XCTAssertEqual(asked.stdout, "one photo\n")
        XCTAssertTrue(asked.stderr.hasPrefix("exported 1 file, 0 directories, 0 symlinks, "), asked.stderr)

        // --quiet (and -q): nothing at all on success.
        for flag in ["--quiet", "-q"] {
            let q = T.pv(sb, ["export", flag, "--force", "/v/src", out])
            XCTAssertEqual(q.status, 0, q.stderr)
            XCTAssertEqual(q.stderr, "", flag)
            let qi = T.pv(sb, ["import", flag, "--force", src, "/w" + flag])
            XCTAssertEqual(qi.status, 0, qi.stderr)
            XCTAssertEqual(qi.stderr, "", flag)
        }
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/src/a.jpg"), "one photo\n")

        // A skipped entry is still named, with --quiet too (exit 26), and no summary follows.
        sb.ok("mkfifo \(Sandbox.quote(src))/pipe")
        let skipped = T.pv(sb, ["import", "--quiet", src, "/z"])
        XCTAssertEqual(skipped.status, 26, skipped.stderr)
        XCTAssertEqual(skipped.stderr, "photovault: skipped /z/src/pipe: not a regular file, directory or symlink\n")
    }
}
