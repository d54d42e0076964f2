import Glibc
import XCTest
@testable import PhotoVaultFS

/// The pthread locks the filesystem's tables and open files use.
final class LockTests: XCTestCase {
    /// Four readers that take turns holding a read lock, so that it is never free: a writer
    /// waits (`writerGotIn` false after `window`) unless the lock prefers writers.
    private func writerGetsIn(_ lock: PRWLock, window: Double) -> Bool {
        final class Flag: @unchecked Sendable {
            private let m = PMutex()
            private var value = false
            func set() { m.withLock { value = true } }
            var isSet: Bool { m.withLock { value } }
        }
        let stop = Flag(), writerGotIn = Flag()
        let readers = (0..<4).map { i in
            Thread {
                usleep(useconds_t(i * 250))
                while !stop.isSet { lock.withReadLock { usleep(1_000) } }
            }
        }
        readers.forEach { $0.start() }
        usleep(20_000)   // both readers are in their loop: the lock is held for reading all along
        let writer = Thread { lock.withWriteLock { writerGotIn.set() } }
        writer.start()
        let deadline = Date().addingTimeInterval(window)
        while !writerGotIn.isSet && Date() < deadline { usleep(1_000) }
        let got = writerGotIn.isSet
        stop.set()
        while !writerGotIn.isSet { usleep(1_000) }   // the writer gets in once the readers stop
        usleep(10_000)
        return got
    }

    func testAWriterPreferringLockLetsAWriterPastOverlappingReaders() {
        XCTAssertTrue(writerGetsIn(PRWLock(preferWriters: true), window: 2))
    }

    /// The control: glibc's default lock starves the writer, so the check above means something.
    func testTheDefaultLockStarvesAWriterBehindOverlappingReaders() {
        XCTAssertFalse(writerGetsIn(PRWLock(), window: 0.5))
    }

    /// An open file's content lock (taken by a device lock's key wipe and by writes) prefers
    /// writers: a reader keeping reads in flight cannot hold a lock's key wipe off.
    func testOpenFileContentLockPrefersWriters() throws {
        let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let content = ContentState(fd: fd, file: PlainContent(fd: fd), writable: false)
        XCTAssertTrue(writerGetsIn(content.rw, window: 2))
    }
}
