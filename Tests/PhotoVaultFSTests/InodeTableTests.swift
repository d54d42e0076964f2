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
        XCTAssertEqual(table.nodeID(dev: 0, ino: 4242), 1)
        XCTAssertEqual(table.nodeID(dev: 0, ino: 77), 77)
        let one = stat(ino: 1, mode: S_IFREG | 0o600)
        let fd = open("/dev/null", O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let node = try table.insert(fd: fd, st: one, parent: 1, name: Array("one.jpg".utf8))
        XCTAssertNotEqual(node.nodeID, 1)
        XCTAssertEqual(node.backingIno, 1)
        XCTAssertTrue(table.get(1) === table.root, "the root was replaced")
        XCTAssertTrue(table.get(node.nodeID) === node)
        table.forget(node.nodeID, 1)
        XCTAssertTrue(table.get(1) === table.root)
    }

    /// Log lines name a node by its path, cut to the last 256 names: a deeper one starts with
    /// "…/" (it started with "/", as if whole); one within the limit is whole.
    func testALogPathCutAtItsDepthLimitSaysSo() throws {
        let table = InodeTable(rootFD: -1, rootStat: stat(ino: 2, mode: S_IFDIR | 0o700))
        var parent: UInt64 = 1
        var ids: [UInt64] = []
        for depth in 1...300 {
            let st = stat(ino: UInt(100 + depth), mode: S_IFDIR | 0o700)
            let node = try table.insert(fd: open("/dev/null", O_RDONLY), st: st, parent: parent, name: Array("d\(depth)".utf8))
            ids.append(node.nodeID)
            parent = node.nodeID
        }
        XCTAssertEqual(table.path(of: ids[2]), "/d1/d2/d3")
        XCTAssertEqual(table.path(of: ids[255]), "/" + (1...256).map { "d\($0)" }.joined(separator: "/"), "256 deep: whole")
        XCTAssertEqual(table.path(of: ids[299]), "…/" + (45...300).map { "d\($0)" }.joined(separator: "/"))
        XCTAssertEqual(table.path(of: 1), "/")
    }

    /// Backing files are told apart by (st_dev, st_ino): a tree may span file systems that
    /// number files alike. The tree's own file system keeps its numbers; the others (and
    /// numbers of 2^48 or more) get the top bit, a range per (dev, ino >> 48) and the low 48
    /// bits: the same every time they are asked for, and in a new table (a remount) whatever
    /// order the files are met in.
    func testFilesOfTwoFileSystemsWithOneInodeNumberAreTwoNodes() throws {
        var rootStat = stat(ino: 2, mode: S_IFDIR | 0o700)
        rootStat.st_dev = 100
        let table = InodeTable(rootFD: -1, rootStat: rootStat)
        var a = stat(ino: 77, mode: S_IFREG | 0o600), b = a
        a.st_dev = 100
        b.st_dev = 200
        let na = try table.insert(fd: open("/dev/null", O_RDONLY), st: a, parent: 1, name: Array("a".utf8))
        let nb = try table.insert(fd: open("/dev/null", O_RDONLY), st: b, parent: 1, name: Array("b".utf8))
        XCTAssertFalse(na === nb, "two backing files, one node")
        XCTAssertEqual(na.nodeID, 77)
        XCTAssertEqual(na.shownIno, 77)
        let mask: UInt64 = 1 << 48 - 1
        XCTAssertEqual(nb.nodeID & (1 << 63 | mask), 1 << 63 | 77)
        XCTAssertNotEqual(nb.nodeID >> 48 & 0x7fff, 0, "range 0 is the root file system's")
        XCTAssertEqual(nb.shownIno, nb.nodeID)
        XCTAssertTrue(try table.insert(fd: open("/dev/null", O_RDONLY), st: b, parent: 1, name: Array("b".utf8)) === nb)
        XCTAssertEqual(table.nodeID(dev: 200, ino: 78), nb.nodeID + 1, "one range per device")
        XCTAssertEqual(table.nodeID(dev: 100, ino: 1), 1 << 63 | 1, "the root file system's number 1, as before")
        XCTAssertEqual(table.nodeID(dev: 100, ino: 2), 1)
        XCTAssertEqual(table.shownIno(dev: 100, ino: 2), 2, "the root shows its backing number")
        XCTAssertEqual(table.root.shownIno, 2)

        // Many devices: every range distinct; a new table meeting them in reverse order
        // (a remount) gives each file the same number.
        let devices = (0..<300).map { UInt64(1000 + $0 * 7) }
        let high: UInt64 = 5 << 48
        let first = devices.map { table.nodeID(dev: $0, ino: high | 9)! }
        XCTAssertEqual(Set(first.map { $0 >> 48 }).count, devices.count)
        XCTAssertTrue(first.allSatisfy { $0 & mask == 9 && $0 >> 63 == 1 })
        let again = InodeTable(rootFD: -1, rootStat: rootStat)
        _ = again.nodeID(dev: 200, ino: 1)
        var reversed: [UInt64] = []
        for d in devices.reversed() { reversed.insert(again.nodeID(dev: d, ino: high | 9)!, at: 0) }
        let collided = zip(first, reversed).filter { $0 != $1 }.count
        XCTAssertLessThanOrEqual(collided, 6, "numbers move only where two ranges collide")
        XCTAssertEqual(again.nodeID(dev: 200, ino: 77), nb.nodeID)
    }
}
