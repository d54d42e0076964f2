import Foundation
import XCTest

/// GNOME's search indexer (tracker-miner-fs 3, Debian's tracker-miner-fs) over a default mount:
/// what it does with a vault inside an indexed folder, and with a vault mounted as one
/// (docs/PRIVACY.md, "Search indexers"). The miner runs once over its configured folders
/// (`--no-daemon`) on a private session bus; its database is then queried directly.
final class SearchIndexerTests: XCTestCase {
    static let miner = "/usr/libexec/tracker-miner-fs-3"

    /// Runs the miner for the sandbox's home and returns every URL it indexed.
    static func indexedURLs(_ sb: Sandbox, file: StaticString = #filePath, line: UInt = #line) -> [String] {
        // tracker skips configured folders under g_get_tmp_dir(), and the sandbox is in /tmp.
        let tmp = sb.plainDir("tracker-tmp")
        var env = sb.env
        env["TMPDIR"] = tmp
        env["XDG_CONFIG_HOME"] = sb.root + "/config"
        env["GSETTINGS_BACKEND"] = "memory"
        let db = sb.root + "/cache/tracker3/files"
        try? FileManager.default.removeItem(atPath: db)
        let r = Harness.run(["/usr/bin/dbus-run-session", "--", miner, "--no-daemon", "--initial-sleep", "0"], env: env, timeout: 120)
        XCTAssertEqual(r.status, 0, "tracker-miner-fs-3: \(r.stderr)", file: file, line: line)
        let q = Harness.run(["/usr/bin/tracker3", "sparql", "--database", db, "--query", "SELECT ?u WHERE { ?f nie:url ?u }"],
                            env: env, timeout: 60)
        XCTAssertEqual(q.status, 0, "tracker3 sparql: \(q.stderr)", file: file, line: line)
        return q.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { $0.hasPrefix("file://") }
    }

    static func sandbox(_ name: String, picturesDir: String) -> Sandbox {
        let sb = DesktopPrivacyTests.sandbox(name, quarantine: 1)
        try? FileManager.default.createDirectory(atPath: sb.root + "/config", withIntermediateDirectories: true)
        try? "XDG_PICTURES_DIR=\"$HOME/\(picturesDir)\"\n".write(toFile: sb.root + "/config/user-dirs.dirs", atomically: true, encoding: .utf8)
        sb.extraEnv["XDG_CONFIG_HOME"] = sb.root + "/config"
        return sb
    }

    /// A vault mounted inside the pictures folder (~/Pictures/Vault): the miner indexes the
    /// folder's own photo, and none of the vault's (a mountpoint is not crawled into).
    func testAVaultInsideAnIndexedFolderIsNotIndexed() throws {
        let sb = Self.sandbox("pv-index-inside", picturesDir: "Pictures")
        let pictures = sb.plainDir("Pictures")
        try ThumbnailKit.writePNG(to: pictures + "/beach.png", seed: 1)
        let mp = DesktopPrivacyTests.mount(sb, at: pictures + "/Vault")
        try FileManager.default.createDirectory(atPath: mp + "/Album", withIntermediateDirectories: true)
        for i in 0..<3 { try ThumbnailKit.writePNG(to: mp + "/Album/SECRET_\(i).png", seed: UInt64(10 + i)) }

        let urls = Self.indexedURLs(sb)
        XCTAssertTrue(urls.contains("file://" + pictures + "/beach.png"), "the miner indexed nothing: \(urls)")
        XCTAssertEqual(urls.filter { $0.contains("SECRET_") || $0.contains("/Vault/") }, [])
        sb.unmount(mp)
    }

    /// A vault mounted as the pictures folder itself is indexed, names included (the miner
    /// honours no marker at the root of a configured folder): `photovault mount` says so.
    func testAVaultMountedAsAnIndexedFolderIsWarnedAbout() throws {
        let sb = Self.sandbox("pv-index-root", picturesDir: "Pictures")
        let pictures = sb.plainDir("Pictures")
        let r = sb.pv(["mount", pictures, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        sb.mounts.append(pictures)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stderr.contains("photovault: warning: \(pictures) is a folder desktop search indexes (XDG_PICTURES_DIR in user-dirs.dirs)"),
                      r.stderr)
        try ThumbnailKit.writePNG(to: pictures + "/SECRET_ROOT.png", seed: 4)
        let urls = Self.indexedURLs(sb)
        XCTAssertTrue(urls.contains("file://" + pictures + "/SECRET_ROOT.png"),
                      "the miner no longer indexes a vault mounted as its folder; the warning may go: \(urls)")
        sb.unmount(pictures)

        // Elsewhere, no warning.
        let other = sb.pv(["mount", sb.plainDir("Elsewhere"), "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        sb.mounts.append(sb.root + "/Elsewhere")
        XCTAssertEqual(other.status, 0, other.stderr)
        XCTAssertFalse(other.stderr.contains("warning"), other.stderr)
        sb.unmount(sb.root + "/Elsewhere")
    }
}
