import Foundation
import XCTest

/// Issue 35, item 3: a name with a terminal escape or a newline is printed escaped by every
/// command, on stdout and stderr, by the one rule fsck already used (OFFLINE.md, "Names in
/// output"). They came out raw: the escapes acted on the terminal, and a listing split.
final class HardeningNameEscapeTests: XCTestCase {
    typealias T = OfflineCommandTests

    static let title = "\u{1B}]0;PWNED\u{07}\u{1B}[31mred.jpg"
    static let titleShown = "\\x1b]0;PWNED\\x07\\x1b[31mred.jpg"
    static let split = "a\nb.jpg"
    static let splitShown = "a\\nb.jpg"
    static let slash = "back\\slash.jpg"
    static let slashShown = "back\\\\slash.jpg"

    /// No byte of C0 (but the newline ending each line and the tab between fields) or DEL,
    /// and the expected line count.
    private func assertClean(_ text: String, lines: Int? = nil, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let bad = text.unicodeScalars.filter { ($0.value < 0x20 && $0 != "\n" && $0 != "\t") || $0.value == 0x7f }
        XCTAssertTrue(bad.isEmpty, "\(what) printed control characters: \(text.debugDescription)", file: file, line: line)
        if let lines {
            XCTAssertEqual(text.split(separator: "\n", omittingEmptySubsequences: false).count - 1, lines,
                           "\(what): \(text.debugDescription)", file: file, line: line)
        }
    }

    private func sourceWithOddNames(_ sb: Sandbox) -> String {
        let src = sb.plainDir("odd")
        for n in [Self.title, Self.split, Self.slash] {
            XCTAssertTrue(FileManager.default.createFile(atPath: src + "/" + n, contents: Data("x".utf8)))
        }
        return src
    }

    func testOfflineCommandsPrintOddNamesEscaped() {
        let sb = Sandbox("pv-hard-names")
        sb.initStore()
        let src = sourceWithOddNames(sb)
        let imported = T.pv(sb, ["import", src, "/d"])
        XCTAssertEqual(imported.status, 0, imported.stderr)
        assertClean(imported.stderr, "import")

        let list = T.pv(sb, ["class", "list", "/d/odd"])
        XCTAssertEqual(list.status, 0, list.stderr)
        assertClean(list.stdout, lines: 3, "class list")
        for shown in [Self.titleShown, Self.splitShown, Self.slashShown] {
            XCTAssertTrue(list.stdout.contains("complete\t/d/odd/\(shown)\n"), "class list: \(list.stdout.debugDescription)")
        }
        let set = T.pv(sb, ["class", "set", "/d/odd/" + Self.title, "none"])
        XCTAssertEqual(set.status, 0, set.stderr)
        XCTAssertEqual(set.stdout, "/d/odd/\(Self.titleShown): none\n")

        // Errors name the entry escaped, in one line.
        let out = sb.plainDir("out")
        XCTAssertTrue(FileManager.default.createFile(atPath: out + "/" + Self.split, contents: Data("mine".utf8)))
        let export = T.pv(sb, ["export", "/d/odd/" + Self.split, out])
        XCTAssertEqual(export.status, 20, export.stderr)   // already exists
        assertClean(export.stderr, lines: 1, "export's already-exists error")
        XCTAssertTrue(export.stderr.contains(Self.splitShown), export.stderr.debugDescription)
        let missing = T.pv(sb, ["class", "get", "/d/odd/" + Self.title + "-gone"])
        XCTAssertNotEqual(missing.status, 0)
        assertClean(missing.stderr, lines: 1, "class get's error")
        XCTAssertTrue(missing.stderr.contains(Self.titleShown + "-gone"), missing.stderr.debugDescription)
        let badSource = T.pv(sb, ["import", src + "/" + Self.title + "-gone", "/e"])
        XCTAssertNotEqual(badSource.status, 0)
        assertClean(badSource.stderr, lines: 1, "import's error about its source")
        // fsck keeps its rule, now everyone's.
        let fsck = T.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stderr)
        assertClean(fsck.stdout + fsck.stderr, "fsck")
    }

    func testMountCommandsPrintAnOddMountpointEscaped() throws {
        let sb = Sandbox("pv-hard-mpname")
        sb.initStore()
        let name = "mnt\u{1B}[31m"
        let mp = sb.root + "/" + name
        XCTAssertEqual(mkdir(mp, 0o700), 0)
        let r = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(r.status, 0, r.stderr)
        sb.mounts.append(mp)
        assertClean(r.stdout + r.stderr, "mount")
        XCTAssertTrue(r.stdout.contains(sb.root + "/mnt\\x1b[31m"), r.stdout.debugDescription)
        let status = sb.pv(["status"])
        assertClean(status.stdout, lines: 1, "status")
        // Through the live mount, class list prints what it prints offline.
        let src = sourceWithOddNames(sb)
        XCTAssertEqual(sb.ok("mkdir \(Sandbox.quote(mp + "/d")) && cp -r \(Sandbox.quote(src)) \(Sandbox.quote(mp + "/d/")) && echo ok"), "ok\n")
        let list = sb.pv(["class", "list", mp + "/d/odd"])
        XCTAssertEqual(list.status, 0, list.stderr)
        assertClean(list.stdout, lines: 3, "class list through the mount")
        XCTAssertTrue(list.stdout.contains(Self.titleShown), list.stdout.debugDescription)
        let busy = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertNotEqual(busy.status, 0)
        assertClean(busy.stderr, lines: 1, "mount's already-mounted error")
        sb.unmount(mp)
    }
}
