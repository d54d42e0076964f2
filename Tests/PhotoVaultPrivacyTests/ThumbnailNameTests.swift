import Foundation
import XCTest
@testable import PhotoVaultPrivacy

/// Thumbnail names are `md5(file URI)`, with the URI escaped exactly as GLib escapes it: one
/// byte of difference and a thumbnail of a vault photo is not recognised. Checked against
/// GLib itself (python3-gi: `GLib.filename_to_uri`, `GLib.compute_checksum_for_string`).
final class ThumbnailNameTests: XCTestCase {
    static let paths = [
        "/home/me/PhotoVault/IMG_0042.jpg",
        "/home/me/Photo Vault/Ferien 2024/Strand & Meer (1).jpg",
        "/tmp/pv/a%b#c?d;e[f]g{h}i|j^k`l\"m<n>o\\p",
        "/tmp/pv/~user/it's=ok:@+$,!*-_.",
        "/tmp/pv/caf\u{e9}/\u{65e5}\u{672c}.png",
        "/tmp/pv/tab\there/new\nline",
    ]

    func testURIsAndNamesMatchGLib() throws {
        let py = """
        import sys
        from gi.repository import GLib
        for p in sys.stdin.read().split('\\0'):
            if not p: continue
            u = GLib.filename_to_uri(p, None)
            print(u)
            print(GLib.compute_checksum_for_string(GLib.ChecksumType.MD5, u, -1))
        """
        let r = try runPython(py, stdin: Self.paths.joined(separator: "\0") + "\0")
        let lines = r.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, Self.paths.count * 2, r)
        for (i, p) in Self.paths.enumerated() where lines.count == Self.paths.count * 2 {
            XCTAssertEqual(FileURI.uri(ofPath: p), lines[2 * i], p)
            XCTAssertEqual(FileURI.thumbnailName(ofURI: FileURI.uri(ofPath: p)), lines[2 * i + 1], p)
        }
    }

    /// The purge finds a thumbnail without `Thumb::URI` (pcmanfm's) by its name, in every
    /// size directory, `fail/*` and the legacy `~/.thumbnails`; it leaves others alone.
    func testPurgeByNameFindsThumbnailsWithoutURIEverywhere() throws {
        let root = NSTemporaryDirectory() + "/pv-names-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let vault = "/home/me/PhotoVault", resolved = "/mnt/data/me/PhotoVault"
        let names = Set(["IMG_1.jpg", "sub/IMG_2.jpg"].flatMap { FileURI.thumbnailNames(relativePath: $0, prefixes: [vault, resolved]) })
        var mine: [String] = [], others: [String] = []
        let dirs = ["normal", "large", "x-large", "xx-large", "fail/gnome-thumbnail-factory", "fail/pcmanfm"]
        for (i, d) in dirs.enumerated() {
            let dir = root + "/cache/" + d
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            let prefix = i % 2 == 0 ? vault : resolved
            let n = FileURI.thumbnailName(ofURI: FileURI.uri(ofPath: prefix + (i % 3 == 0 ? "/IMG_1.jpg" : "/sub/IMG_2.jpg")))
            mine.append(dir + "/" + n + ".png")
            others.append(dir + "/" + FileURI.thumbnailName(ofURI: FileURI.uri(ofPath: "/home/me/Pictures/x\(i).jpg")) + ".png")
        }
        try FileManager.default.createDirectory(atPath: root + "/legacy/normal", withIntermediateDirectories: true)
        mine.append(root + "/legacy/normal/" + FileURI.thumbnailName(ofURI: FileURI.uri(ofPath: vault + "/IMG_1.jpg")) + ".png")
        for f in mine + others { XCTAssertTrue(FileManager.default.createFile(atPath: f, contents: Data([137, 80, 78, 71]))) }

        let removed = ThumbnailPurge.purge(directories: [root + "/cache", root + "/legacy"], vaultPrefixes: [vault, resolved], names: names)
        XCTAssertEqual(Set(removed), Set(mine))
        for f in mine { XCTAssertFalse(FileManager.default.fileExists(atPath: f), f) }
        for f in others { XCTAssertTrue(FileManager.default.fileExists(atPath: f), f) }
    }

    func runPython(_ script: String, stdin: String) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = ["-c", script]
        let inPipe = Pipe(), outPipe = Pipe(), errPipe = Pipe()
        p.standardInput = inPipe; p.standardOutput = outPipe; p.standardError = errPipe
        try p.run()
        inPipe.fileHandleForWriting.write(Data(stdin.utf8))
        try inPipe.fileHandleForWriting.close()
        let out = outPipe.fileHandleForReading.readDataToEndOfFile()
        let err = errPipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, String(decoding: err, as: UTF8.self))
        return String(decoding: out, as: UTF8.self)
    }

    /// The MD5 thumbnail names are made with (our own, so that libcrypto's allocator stays
    /// PhotoVaultCrypto's: AESGCMEngineTests.testFastestEngineIsChosenForThisCPU fails when
    /// anything else calls libcrypto first): RFC 1321's test suite, and lengths around the
    /// padding's block boundary.
    func testMD5MatchesRFC1321() {
        func hex(_ s: String) -> String { MD5.digest(Array(s.utf8)).map { String(format: "%02x", $0) }.joined() }
        XCTAssertEqual(hex(""), "d41d8cd98f00b204e9800998ecf8427e")
        XCTAssertEqual(hex("a"), "0cc175b9c0f1b6a831c399e269772661")
        XCTAssertEqual(hex("abc"), "900150983cd24fb0d6963f7d28e17f72")
        XCTAssertEqual(hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0")
        XCTAssertEqual(hex("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b")
        XCTAssertEqual(hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"), "d174ab98d277d9f5a5611c2c9f419d9f")
        XCTAssertEqual(hex(String(repeating: "1234567890", count: 8)), "57edf4a22be3c955ac49da2e2107b67a")
        XCTAssertEqual(hex(String(repeating: "a", count: 55)), "ef1772b6dff9a122358552954ad0df65")
        XCTAssertEqual(hex(String(repeating: "a", count: 56)), "3b0c8ac703f828b04c6c197006d17218")
        XCTAssertEqual(hex(String(repeating: "a", count: 64)), "014842d480b571495a4a0363793f7367")
    }
}
