import Foundation
import XCTest
@testable import PhotoVaultPrivacy

/// The mount's warning about a mountpoint that desktop search indexes as a folder of its own.
final class IndexedFoldersTests: XCTestCase {
    func testAnXDGUserDirectoryIsWarnedAboutThroughASymlinkedHomeToo() throws {
        let root = "/tmp/pv-indexed-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/real/home/Pictures/Vault", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/real/home/.config", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(root + "/real/home", root + "/home"), 0)
        try """
        # written by xdg-user-dirs-update
        XDG_DESKTOP_DIR="$HOME"
        XDG_PICTURES_DIR="$HOME/Pictures"
        """.write(toFile: root + "/real/home/.config/user-dirs.dirs", atomically: true, encoding: .utf8)
        let env = ["HOME": root + "/home"]
        let installed: (String) -> Bool = { $0 == "/usr/libexec/tracker-miner-fs-3" }

        let w = IndexedFolders.warning(mountpoint: root + "/real/home/Pictures", environment: env, installed: installed)
        XCTAssertEqual(w.map { $0.contains("(XDG_PICTURES_DIR in user-dirs.dirs)") }, true, String(describing: w))
        // Inside the folder, elsewhere, or with no indexer installed: nothing to say.
        XCTAssertNil(IndexedFolders.warning(mountpoint: root + "/real/home/Pictures/Vault", environment: env, installed: installed))
        XCTAssertNil(IndexedFolders.warning(mountpoint: root + "/real/home/PhotoVault", environment: env, installed: installed))
        XCTAssertNil(IndexedFolders.warning(mountpoint: root + "/real/home/Pictures", environment: env, installed: { _ in false }))
    }
}
