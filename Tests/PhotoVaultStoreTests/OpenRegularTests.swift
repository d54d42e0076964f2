// FileIO.openRegular: a store file that is not a regular file is refused without being
// opened, also when it is swapped in while the name is being opened.
import XCTest
import Foundation
import Glibc
import CLinux
@testable import PhotoVaultStore

final class OpenRegularTests: XCTestCase {
    func refusedAsNotRegular(_ dir: String, _ name: String, _ flags: Int32, _ what: String) {
        let start = Date()
        XCTAssertThrowsError(try FileIO.openRegular(AT_FDCWD, dir + "/" + name, flags, mode: 0o600, what: name)) {
            XCTAssertEqual("\($0)", "the store is corrupt: \(name) is not a regular file", what)
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 2, "\(what): waited")
    }

    /// A FIFO without a writer, a device node, a socket, a directory and a symlink (to a
    /// regular file) in the file's place: each refused at once, reading, writing or creating.
    func testWhatIsNotARegularFileIsRefusedAtOnce() throws {
        let dir = OfflineFixture.tempDir(self)
        var null = stat()
        XCTAssertEqual(stat("/dev/null", &null), 0)
        OfflineFixture.write(dir + "/target", [1, 2, 3])
        XCTAssertEqual(mkfifo(dir + "/fifo", 0o600), 0)
        XCTAssertEqual(mknod(dir + "/device", S_IFCHR | 0o600, null.st_rdev), 0)
        XCTAssertEqual(mknod(dir + "/socket", S_IFSOCK | 0o600, 0), 0)
        XCTAssertEqual(mkdir(dir + "/directory", 0o700), 0)
        XCTAssertEqual(symlink(dir + "/target", dir + "/link"), 0)
        for name in ["fifo", "device", "socket", "directory", "link"] {
            for flags in [O_RDONLY, O_RDWR, O_RDWR | O_CREAT] {
                refusedAsNotRegular(dir, name, flags, "\(name) \(flags)")
            }
        }
        // The regular file itself opens, reading and writing, and a missing one is created.
        let fd = try FileIO.openRegular(AT_FDCWD, dir + "/target", O_RDWR, what: "target")
        XCTAssertEqual(try FileIO.readAll(fd, limit: 16), [1, 2, 3])
        XCTAssertEqual(pwrite(fd, [9], 1, 0), 1)
        close(fd)
        XCTAssertEqual(OfflineFixture.read(dir + "/target"), [9, 2, 3])
        let made = try FileIO.openRegular(AT_FDCWD, dir + "/new", O_RDWR | O_CREAT, mode: 0o600, what: "new")
        var st = stat()
        XCTAssertEqual(fstat(made, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFREG)
        close(made)
    }

    /// A FIFO swapped in for the file, again and again, while it is opened: it must never be
    /// opened, not even once for a moment. A writer blocked in open(2) on the FIFO (by
    /// another name) says whether it was: a reader's open lets it through. The old code
    /// checked with fstatat and then opened the name, so a FIFO renamed over it between the
    /// two was opened (O_NONBLOCK: no wait, but the open happened, and a device's driver
    /// would have run) before fstat refused it; here that let the writer through within a
    /// few thousand swaps. Now the name is opened with O_PATH, which opens no FIFO or
    /// device, and only a regular file is reopened through /proc/self/fd.
    func testAFifoSwappedInWhileTheFileIsOpenedIsNeverOpened() throws {
        let dir = OfflineFixture.tempDir(self)
        XCTAssertEqual(mkdir(dir + "/side", 0o700), 0)
        OfflineFixture.write(dir + "/file", [1, 2, 3])
        XCTAssertEqual(mkfifo(dir + "/other", 0o600), 0)
        XCTAssertEqual(link(dir + "/other", dir + "/side/writer-end"), 0)   // never renamed

        let writerOpened = ManagedAtomicFlag()
        let writer = Thread {
            let w = open(dir + "/side/writer-end", O_WRONLY | O_CLOEXEC)   // blocks until a reader opens
            writerOpened.set()
            if w >= 0 { close(w) }
        }
        writer.start()
        usleep(200_000)
        XCTAssertFalse(writerOpened.isSet, "a reader opened the FIFO before the test began")

        let stop = ManagedAtomicFlag()
        let swapper = Thread {
            while !stop.isSet {
                _ = pv_renameat2(AT_FDCWD, dir + "/file", AT_FDCWD, dir + "/other", UInt32(PV_RENAME_EXCHANGE))
            }
        }
        swapper.start()
        var opened = 0, refused = 0
        let deadline = Date().addingTimeInterval(4)
        while Date() < deadline && !writerOpened.isSet {
            do {
                let fd = try FileIO.openRegular(AT_FDCWD, dir + "/file", what: "file")
                var st = stat()
                XCTAssertEqual(fstat(fd, &st), 0)
                XCTAssertEqual(st.st_mode & S_IFMT, S_IFREG, "a descriptor that is not the regular file was returned")
                close(fd)
                opened += 1
            } catch {
                refused += 1
            }
        }
        stop.set()
        while !swapper.isFinished { usleep(10_000) }
        let leaked = writerOpened.isSet
        // Let the writer go (our own reader), then wait for it.
        let r = open(dir + "/side/writer-end", O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        while !writer.isFinished { usleep(10_000) }
        if r >= 0 { close(r) }
        XCTAssertFalse(leaked, "openRegular opened the FIFO swapped in for the file (\(opened) opened, \(refused) refused)")
        XCTAssertGreaterThan(opened, 0, "the regular file was never opened")
        XCTAssertGreaterThan(refused, 0, "the FIFO was never met: the swaps did not race the opens")
    }
}

/// A flag set by one thread and read by another.
final class ManagedAtomicFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.lock(); value = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
}
