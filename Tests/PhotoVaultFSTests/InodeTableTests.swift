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
        let node = try table.insert(fd: fd, st: one, parent: table.root, backing: Array("one.jpg".utf8), name: Array("one.jpg".utf8))
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
        var parent = table.root
        var ids: [UInt64] = []
        for depth in 1...300 {
            let st = stat(ino: UInt(100 + depth), mode: S_IFDIR | 0o700)
            let name = Array("d\(depth)".utf8)
            let node = try table.insert(fd: open("/dev/null", O_RDONLY), st: st, parent: parent, backing: name, name: name)
            ids.append(node.nodeID)
            parent = node
        }
        XCTAssertEqual(table.path(of: ids[2]), "/d1/d2/d3")
        XCTAssertEqual(table.path(of: ids[255]), "/" + (1...256).map { "d\($0)" }.joined(separator: "/"), "256 deep: whole")
        XCTAssertEqual(table.path(of: ids[299]), "…/" + (45...300).map { "d\($0)" }.joined(separator: "/"))
        XCTAssertEqual(table.path(of: 1), "/")
    }

    /// A background daemon logs no names, so its table keeps none: a remembered file costs
    /// no plaintext name array (memory at 100,000 files), and none sits in its memory. The
    /// backing name, which reopens the file, is kept either way.
    func testATableThatKeepsNoNamesHoldsNoPlaintextName() throws {
        for keeps in [true, false] {
            let table = InodeTable(rootFD: -1, rootStat: stat(ino: 2, mode: S_IFDIR | 0o700), keepsNames: keeps)
            let st = stat(ino: 77, mode: S_IFREG | 0o600)
            let node = try table.insert(fd: open("/dev/null", O_RDONLY), st: st, parent: table.root,
                                        backing: Array("c2VhbGVk".utf8), name: Array("beach.jpg".utf8))
            XCTAssertEqual(node.name, keeps ? Array("beach.jpg".utf8) : [])
            XCTAssertEqual(node.backingName, Array("c2VhbGVk".utf8))
            XCTAssertEqual(table.path(of: node.nodeID).contains("beach"), keeps)
            table.renamed(st, parent: table.root, backing: Array("bmV3".utf8), name: Array("sunset.jpg".utf8))
            XCTAssertEqual(node.name, keeps ? Array("sunset.jpg".utf8) : [])
            XCTAssertEqual(node.backingName, Array("bmV3".utf8))
        }
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
        let na = try table.insert(fd: open("/dev/null", O_RDONLY), st: a, parent: table.root, backing: Array("a".utf8), name: Array("a".utf8))
        let nb = try table.insert(fd: open("/dev/null", O_RDONLY), st: b, parent: table.root, backing: Array("b".utf8), name: Array("b".utf8))
        XCTAssertFalse(na === nb, "two backing files, one node")
        XCTAssertEqual(na.nodeID, 77)
        XCTAssertEqual(na.shownIno, 77)
        let mask: UInt64 = 1 << 48 - 1
        XCTAssertEqual(nb.nodeID & (1 << 63 | mask), 1 << 63 | 77)
        XCTAssertNotEqual(nb.nodeID >> 48 & 0x7fff, 0, "range 0 is the root file system's")
        XCTAssertEqual(nb.shownIno, nb.nodeID)
        XCTAssertTrue(try table.insert(fd: open("/dev/null", O_RDONLY), st: b, parent: table.root, backing: Array("b".utf8), name: Array("b".utf8)) === nb)
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

    /// A scratch directory with `count` files; returns its path.
    private func scratch(_ count: Int) -> String {
        let dir = "/tmp/pv-inodes-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(dir, 0o700)
        mkdir(dir + "/sub", 0o700)
        for i in 0..<count { close(open(dir + "/sub/f\(i)", O_CREAT | O_WRONLY, 0o600)) }
        addTeardownBlock { [dir] in _ = system("rm -rf '\(dir)'") }
        return dir
    }

    private func lookUp(_ table: InodeTable, _ parent: Inode, _ name: String, listing: Bool = false) throws -> Inode {
        let b = Array(name.utf8)
        let o = Syscall.openat(try parent.fd, b, PV_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(o, 0, name)
        var st = Glibc.stat()
        XCTAssertEqual(fstatat(o, "", &st, PV_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW), 0)
        return try table.insert(fd: o, st: st, parent: parent, backing: b, name: b, listing: listing)
    }

    private func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    /// However many nodes the kernel remembers, the table keeps at most its capacity of
    /// descriptors open (plus what was retired and not yet closed); each node's `fd` still
    /// leads to its own file, reopened through a parent whose descriptor was closed too.
    func testDescriptorsStayWithinTheCacheAndReopenTheRightFile() throws {
        let dir = scratch(200)
        let rootFD = open(dir, PV_O_PATH | O_DIRECTORY | O_CLOEXEC)
        var rootStat = Glibc.stat()
        XCTAssertEqual(fstat(rootFD, &rootStat), 0)
        let before = openDescriptors()
        let table = InodeTable(rootFD: rootFD, rootStat: rootStat, descriptorCapacity: 16)
        let sub = try lookUp(table, table.root, "sub")
        var nodes: [Inode] = []
        for i in 0..<200 { nodes.append(try lookUp(table, sub, "f\(i)")) }
        XCTAssertLessThanOrEqual(table.descriptors.openCount, 16)
        table.descriptors.closeRetired {}
        XCTAssertLessThanOrEqual(openDescriptors() - before, 17, "descriptors grew with the nodes")
        for (i, n) in nodes.enumerated().reversed() {
            var st = Glibc.stat()
            XCTAssertEqual(fstatat(try n.fd, "", &st, PV_AT_EMPTY_PATH), 0)
            XCTAssertEqual(UInt64(st.st_ino), n.backingIno, "f\(i) reopened as another file")
            table.descriptors.closeRetired {}
        }
        XCTAssertLessThanOrEqual(openDescriptors() - before, 17)
        table.closeAll()
        close(rootFD)
    }

    /// A node whose name now leads to another file (replaced underneath, as a sync engine
    /// does) is ESTALE, never the other file; one renamed through the mount is reopened
    /// where it went; a pinned node (an open handle) keeps its descriptor after its name is
    /// gone.
    func testAReopenedNodeIsTheSameFileOrStale() throws {
        let dir = scratch(40)
        let rootFD = open(dir, PV_O_PATH | O_DIRECTORY | O_CLOEXEC)
        var rootStat = Glibc.stat()
        XCTAssertEqual(fstat(rootFD, &rootStat), 0)
        let table = InodeTable(rootFD: rootFD, rootStat: rootStat, descriptorCapacity: 8)
        let sub = try lookUp(table, table.root, "sub")
        let replaced = try lookUp(table, sub, "f0")
        let moved = try lookUp(table, sub, "f1")
        let pinned = try lookUp(table, sub, "f2")
        table.descriptors.pin(pinned)
        XCTAssertEqual(rename(dir + "/sub/f1", dir + "/f1-moved"), 0)
        var st = Glibc.stat()
        XCTAssertEqual(lstat(dir + "/f1-moved", &st), 0)
        table.renamed(st, parent: table.root, backing: Array("f1-moved".utf8), name: Array("f1-moved".utf8))
        XCTAssertEqual(unlink(dir + "/sub/f0"), 0)
        close(open(dir + "/sub/f0", O_CREAT | O_WRONLY, 0o600))   // another file, the same name
        XCTAssertEqual(unlink(dir + "/sub/f2"), 0)
        for i in 3..<40 { _ = try lookUp(table, sub, "f\(i)") }   // evicts the three
        XCTAssertThrowsError(try replaced.fd) { XCTAssertEqual(FSError.from($0).errno, ESTALE) }
        XCTAssertEqual(fstatat(try moved.fd, "", &st, PV_AT_EMPTY_PATH), 0)
        XCTAssertEqual(UInt64(st.st_ino), moved.backingIno)
        XCTAssertEqual(fstatat(try pinned.fd, "", &st, PV_AT_EMPTY_PATH), 0, "a pinned descriptor was closed")
        XCTAssertEqual(st.st_nlink, 0)
        table.descriptors.unpin(pinned)
        table.closeAll()
        close(rootFD)
    }
}
