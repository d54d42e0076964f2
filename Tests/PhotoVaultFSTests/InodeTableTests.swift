import Glibc
import XCTest
@testable import PhotoVaultFS

/// Node IDs: the backing inode number, with FUSE's root ID (1) kept for the backing root.
final class InodeTableTests: XCTestCase {
    private func stat(ino: UInt, mode: mode_t) -> stat {
        var st = Glibc.stat()
        st.st_ino = ino
        st.st_mode = mode
        return st
    }

    func testABackingEntryNumberedOneDoesNotTakeTheRootsID() throws {
        let table = InodeTable(rootFD: -1, rootStat: stat(ino: 4242, mode: S_IFDIR | 0o700))
        XCTAssertEqual(table.nodeID(for: stat(ino: 4242, mode: S_IFDIR | 0o700)), 1)
        XCTAssertEqual(table.nodeID(for: stat(ino: 77, mode: S_IFREG | 0o600)), 77)
        let one = stat(ino: 1, mode: S_IFREG | 0o600)
        let fd = open("/dev/null", O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let node = table.insert(fd: fd, st: one, parent: 1, name: Array("one.jpg".utf8))
        XCTAssertNotEqual(node.nodeID, 1)
        XCTAssertEqual(node.backingIno, 1)
        XCTAssertTrue(table.get(1) === table.root, "the root was replaced")
        XCTAssertTrue(table.get(node.nodeID) === node)
        table.forget(node.nodeID, 1)
        XCTAssertTrue(table.get(1) === table.root)
    }
}
