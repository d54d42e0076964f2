import Foundation
import XCTest
@testable import PhotoVaultPrivacy

/// The recent-files scrub (`RecentFiles`) against files written by GLib's own XBEL writer
/// (GBookmarkFile, what GtkRecentManager uses), through python3-gi.
final class RecentFilesTests: XCTestCase {
    var dir = ""
    override func setUp() {
        dir = "/tmp/pv-recent-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    /// What a GTK application does to add a recent file (GtkRecentManager -> GBookmarkFile ->
    /// g_file_set_contents): read the whole list, add to it, write a temp file beside it, fsync,
    /// rename it over the list. Entries escaped as GLib's g_filename_to_uri escapes them.
    static let writer = """
    import os, sys, tempfile
    from gi.repository import GLib
    path, start, count, vault = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    head = ('<?xml version="1.0" encoding="UTF-8"?>\\n<xbel version="1.0"\\n'
            '      xmlns:bookmark="http://www.freedesktop.org/standards/desktop-bookmarks"\\n'
            '      xmlns:mime="http://www.freedesktop.org/standards/shared-mime-info"\\n>\\n</xbel>')
    def entry(p):
        uri = GLib.markup_escape_text(GLib.filename_to_uri(p, None))
        return ('  <bookmark href="%s" added="2026-12-07T04:00:00Z" modified="2026-12-07T04:00:00Z" visited="2026-12-07T04:00:00Z">\\n'
                '    <info>\\n      <metadata owner="http://freedesktop.org">\\n'
                '        <mime:mime-type type="image/jpeg"/>\\n      </metadata>\\n    </info>\\n  </bookmark>\\n') % uri
    for i in range(start, start + count):
        try:
            text = open(path).read()
        except FileNotFoundError:
            text = head
        add = entry('/home/me/Pictures/keep-%d.jpg' % i) + entry(vault + '/IMG_%d.jpg' % i)
        text = text.replace('</xbel>', add + '</xbel>')
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='recently-used.xbel.')
        os.write(fd, text.encode()); os.fsync(fd); os.close(fd)
        os.rename(tmp, path)
    """

    func runWriter(_ path: String, start: Int, count: Int, vault: String) -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = ["-c", Self.writer, path, String(start), String(count), vault]
        p.standardError = FileHandle.standardError
        try! p.run()
        return p
    }

    func uris(_ path: String) -> [String] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.components(separatedBy: "href=\"").dropFirst().compactMap { $0.components(separatedBy: "\"").first }
    }

    /// Vault entries go (under the mountpoint as given and as resolved, escaped as GLib
    /// writes them), every other entry stays byte for byte, and GLib still reads the file.
    func testVaultEntriesGoOthersStayAndTheFileStaysValid() throws {
        let path = dir + "/recently-used.xbel"
        let vault = "/home/me/Photo Vault"
        let w = runWriter(path, start: 0, count: 3, vault: vault)
        w.waitUntilExit()
        // One more vault entry through the resolved path, one that only shares a prefix.
        let w2 = runWriter(path, start: 10, count: 1, vault: "/mnt/real/Photo Vault")
        w2.waitUntilExit()
        let w3 = runWriter(path, start: 20, count: 1, vault: "/home/me/Photo Vault2")
        w3.waitUntilExit()
        let before = uris(path)
        XCTAssertEqual(before.count, 10)

        let r = RecentFiles.scrub(file: path, vaultPrefixes: [vault, "/mnt/real/Photo Vault"])
        XCTAssertEqual(r, RecentFiles.Result(removed: 4, failure: nil))
        let after = uris(path)
        XCTAssertEqual(after.filter { $0.contains("Photo%20Vault/") }, [])
        XCTAssertEqual(Set(after), Set(before.filter { !$0.contains("Photo%20Vault/") }))
        XCTAssertTrue(after.contains("file:///home/me/Photo%20Vault2/IMG_20.jpg"))
        // GLib reads the result (a fourth writer run loads it and adds to it).
        let w4 = runWriter(path, start: 30, count: 1, vault: "/elsewhere")
        w4.waitUntilExit()
        XCTAssertEqual(w4.terminationStatus, 0)
        XCTAssertEqual(uris(path).count, after.count + 2)
        // Nothing left behind in the directory.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["recently-used.xbel"])
    }

    /// A GTK application rewriting the list while it is scrubbed over and over loses none of
    /// its entries: the scrub never renames over a version it did not read.
    func testAnApplicationWritingMeanwhileLosesNothing() throws {
        let path = dir + "/recently-used.xbel"
        let vault = "/home/me/PhotoVault"
        let n = 150
        let w = runWriter(path, start: 0, count: n, vault: vault)
        var scrubs = 0, removed = 0
        while w.isRunning {
            let r = RecentFiles.scrub(file: path, vaultPrefixes: [vault])
            XCTAssertNil(r.failure)
            removed += r.removed
            scrubs += 1
            // A mount scrubs at a lock or an unmount, not in a loop: a pause between scrubs
            // keeps the test to many scrubs racing the writer (every few of its writes)
            // without widening, on a loaded machine, the documented window of microseconds in
            // which an application that reads the list builds on the scrubbed version.
            usleep(5_000)
        }
        XCTAssertEqual(w.terminationStatus, 0)
        XCTAssertGreaterThan(removed, 0, "the scrub never found anything to do (\(scrubs) scrubs)")
        _ = RecentFiles.scrub(file: path, vaultPrefixes: [vault])
        let left = uris(path)
        let keep = Set((0..<n).map { "file:///home/me/Pictures/keep-\($0).jpg" })
        XCTAssertEqual(keep.subtracting(left), [], "entries of the application were lost")
        XCTAssertEqual(left.filter { $0.hasPrefix("file:///home/me/PhotoVault/") }, [])
    }
}
