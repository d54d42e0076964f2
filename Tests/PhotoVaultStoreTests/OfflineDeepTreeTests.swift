// Offline import and export of trees nested thousands of directories deep (a mount makes one
// as easily as a shallow one): both recursed once per level and crashed (SIGSEGV, stack
// overflow) at some 1,500 levels, as fsck did.
import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class OfflineDeepTreeTests: XCTestCase {
    static let depth = 2500

    /// Opens `name` in `fd` (a directory) and closes `fd`.
    static func descend(_ fd: Int32, _ name: String) -> Int32 {
        let sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        close(fd)
        return sub
    }

    /// The bytes of `bottom.txt` at the bottom of a local chain of `depth` directories named
    /// `d` below `top` (deeper than PATH_MAX: walked with descriptors); nil if the chain or
    /// the file is not there.
    static func bottomOfLocalChain(_ top: String) -> [UInt8]? {
        var fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for _ in 0..<depth {
            guard fd >= 0 else { return nil }
            fd = descend(fd, "d")
        }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return try? FileIO.readFile(in: fd, name: "bottom.txt")
    }

    func testADeeplyNestedTreeIsExportedWithoutACrash() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        var fd = open(tree.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var info = try DirectoryInfo.read(dirfd: fd, keyring: tree.keyring)
        for _ in 0..<Self.depth {
            let name = tree.names.encode(Array("d".utf8), in: info).entry
            info = try DirectoryInfo.makeDirectory(in: fd, entry: name, mode: 0o700, defaultClass: .complete, keyring: tree.keyring)
            fd = Self.descend(fd, name)
            XCTAssertGreaterThanOrEqual(fd, 0)
        }
        let bottom = tree.names.encode(Array("bottom.txt".utf8), in: info).entry
        close(openat(fd, bottom, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))   // 0 bytes: an empty file
        close(fd)

        let out = scratch + "/out"
        let s = try Exporter(tree: tree).export(paths: ["/"], to: out)
        XCTAssertEqual(s.directories, Self.depth)
        XCTAssertEqual(s.files, 1)
        XCTAssertEqual(s.skipped, [])
        XCTAssertEqual(Self.bottomOfLocalChain(out), [])
    }

    func testADeeplyNestedTreeIsImportedWithoutACrash() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src"
        XCTAssertEqual(mkdir(src, 0o755), 0)
        var fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for _ in 0..<Self.depth {
            XCTAssertEqual(mkdirat(fd, "d", 0o755), 0)
            fd = Self.descend(fd, "d")
            XCTAssertGreaterThanOrEqual(fd, 0)
        }
        let file = openat(fd, "bottom.txt", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        XCTAssertEqual(write(file, "deep", 4), 4)
        close(file)
        close(fd)

        let s = try Importer(tree: tree).import(sources: [src], into: "/")
        XCTAssertEqual(s.directories, Self.depth + 1)
        XCTAssertEqual(s.files, 1)
        // Whole (every directory finished, its .pvdir and names authentic), and it reads back.
        let f = try Fsck(tree: tree).run()
        XCTAssertEqual(f.problems, [])
        XCTAssertEqual(f.directories, Self.depth + 2)
        XCTAssertEqual(f.files, 1)
        let out = scratch + "/out"
        XCTAssertEqual(try Exporter(tree: tree).export(paths: ["/src"], to: out).directories, Self.depth + 1)
        XCTAssertEqual(Self.bottomOfLocalChain(out + "/src"), Array("deep".utf8))
    }
}
