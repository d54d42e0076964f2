import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// The capability probe and the fallbacks PhotoVault uses where a drive lacks something
/// (docs/STORAGE.md), run on the local file system with the probe's answer overridden, so
/// that each fallback is checked on its own (StorageDriveTests and StorageNetworkTests run
/// them on the real drives).
final class StorageFallbackTests: XCTestCase {
    override func tearDown() {
        BackingCapabilities.override = nil
        BackingCapabilities.forget()
        super.tearDown()
    }

    private func directory() throws -> (path: String, fd: Int32) {
        let path = Fixture.tempDir(self)
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(path)") }
        addTeardownBlock { close(fd) }
        return (path, fd)
    }

    private func entries(_ fd: Int32) throws -> [String] {
        try OfflineSys.list(fd).map { String(decoding: $0.raw, as: UTF8.self) }
    }

    private func withoutLinksOrNoReplace(_ also: @escaping (inout BackingCapabilities) -> Void = { _ in }) {
        BackingCapabilities.forget()
        BackingCapabilities.override = { c in c.hardLinks = false; c.renameNoReplace = false; also(&c) }
    }

    func testTheProbeOfALocalFileSystemFindsEverythingAndLeavesNothing() throws {
        BackingCapabilities.forget()
        let (_, fd) = try directory()
        let caps = try BackingCapabilities.probeAgain(fd)
        XCTAssertTrue(caps.hardLinks && caps.renameNoReplace && caps.renameExchange && caps.symlinks && caps.fileLocks
                      && caps.directoryFsync && caps.renamedDirectoryKeepsNewFiles, caps.description)
        XCTAssertFalse(caps.caseInsensitive, caps.description)
        XCTAssertEqual(caps.mtimeResolutionNs, 1, caps.description)
        XCTAssertEqual(caps.nameMax, 255, caps.description)
        XCTAssertEqual(try entries(fd), [], "the probe removes its directory")
        XCTAssertEqual(BackingCapabilities.known(fd), caps, "kept for the device")
    }

    /// The store config and account records without link(2) and RENAME_NOREPLACE (exFAT):
    /// made whole or not at all, never over one that exists, and of many at once one wins.
    func testCreateIfAbsentWithoutHardLinksNeverReplacesAndOneOfManyWins() throws {
        withoutLinksOrNoReplace()
        let (_, fd) = try directory()
        try AtomicFile.place(Array("first".utf8), in: fd, name: "photovault.conf", replacing: false)
        XCTAssertThrowsError(try AtomicFile.place(Array("second".utf8), in: fd, name: "photovault.conf", replacing: false)) {
            XCTAssertEqual($0 as? StoreError, .exists("photovault.conf"))
        }
        XCTAssertEqual(try FileIO.readFile(in: fd, name: "photovault.conf"), Array("first".utf8))
        XCTAssertEqual(try entries(fd), ["photovault.conf"], "no temp file is left")

        // Sixteen writers at once, each with its own descriptor (flock belongs to the open
        // file description, so threads exclude each other as processes do).
        let won = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            let dfd = open("/proc/self/fd/\(fd)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(dfd) }
            if (try? AtomicFile.place(Array("writer \(i)".utf8), in: dfd, name: "record.rec", replacing: false)) != nil {
                won.add(1)
            }
        }
        XCTAssertEqual(won.value, 1)
        XCTAssertEqual(try entries(fd), ["photovault.conf", "record.rec"])
    }

    /// A drive that cannot fsync a directory (EINVAL), as the probe found: its new names are
    /// as durable as it makes them, and the write succeeds; where the probe found directory
    /// fsync working, the same failure is still an error, and EIO always is.
    func testADriveThatCannotSyncDirectoriesStillTakesFiles() throws {
        let (_, fd) = try directory()
        var st = stat()
        XCTAssertEqual(fstat(fd, &st), 0)
        let saved = FileIO.fsync
        defer { FileIO.fsync = saved }
        var failWith = EINVAL
        FileIO.fsync = { f in
            var s = stat()
            if fstat(f, &s) == 0 && s.st_mode & S_IFMT == S_IFDIR { errno = failWith; return -1 }
            return saved(f)
        }
        BackingCapabilities.forget()
        BackingCapabilities.override = { $0.directoryFsync = false }
        _ = try BackingCapabilities.probeAgain(fd)
        try AtomicFile.write(Array("kept".utf8), in: fd, name: "record.rec")
        XCTAssertEqual(try FileIO.readFile(in: fd, name: "record.rec"), Array("kept".utf8))
        failWith = EIO
        XCTAssertThrowsError(try AtomicFile.write(Array("x".utf8), in: fd, name: "other.rec"))
        failWith = EINVAL
        BackingCapabilities.forget()
        BackingCapabilities.override = nil
        _ = try BackingCapabilities.probeAgain(fd)
        XCTAssertThrowsError(try AtomicFile.write(Array("x".utf8), in: fd, name: "third.rec"))
    }

    func testNoReplaceRenameWithoutTheFlagRefusesATakenName() throws {
        withoutLinksOrNoReplace()
        let (path, fd) = try directory()
        for (name, body) in [("a", "A"), ("b", "B")] { try Array(body.utf8).write(to: path + "/" + name) }
        XCTAssertEqual(NoReplace.rename(fd, "a", fd, "b"), -1)
        XCTAssertEqual(errno, EEXIST)
        XCTAssertEqual(try FileIO.readFile(in: fd, name: "b"), Array("B".utf8))
        XCTAssertEqual(NoReplace.rename(fd, "a", fd, "c"), 0)
        XCTAssertEqual(try entries(fd), ["b", "c"])
    }

    /// A new vault directory without RENAME_NOREPLACE (the mkdir that failed with EINVAL on
    /// exFAT, NTFS and sshfs), and where a renamed directory loses new files (rclone: the
    /// directory is named first).
    func testNewDirectoriesWithEveryFallback() throws {
        let keyring = try Fixture.randomKeyring()
        for nameFirst in [false, true] {
            withoutLinksOrNoReplace { if nameFirst { $0.renamedDirectoryKeepsNewFiles = false } }
            let (_, fd) = try directory()
            let made = try DirectoryInfo.makeDirectory(in: fd, entry: "album", mode: 0o755, defaultClass: .default, keyring: keyring)
            XCTAssertThrowsError(try DirectoryInfo.makeDirectory(in: fd, entry: "album", mode: 0o755, defaultClass: .default,
                                                                 keyring: keyring)) {
                XCTAssertEqual($0 as? StoreError, .exists("album"))
            }
            XCTAssertEqual(try entries(fd), ["album"], "nothing but the directory (name first: \(nameFirst))")
            let dfd = openat(fd, "album", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(dfd) }
            XCTAssertEqual(try DirectoryInfo.read(dirfd: dfd, keyring: keyring), made, "name first: \(nameFirst)")
            var st = stat()
            XCTAssertEqual(fstat(dfd, &st), 0)
            XCTAssertEqual(st.st_mode & 0o777, 0o755)
        }
    }
}

private extension Array where Element == UInt8 {
    func write(to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.posix("create \(path)") }
        defer { close(fd) }
        try FileIO.writeAll(fd, self, offset: 0)
    }
}

/// A counter shared by the threads of `concurrentPerform`.
private final class Atomic<T: AdditiveArithmetic>: @unchecked Sendable {
    private var v: T
    private let lock = NSLock()
    init(_ v: T) { self.v = v }
    func add(_ d: T) { lock.lock(); v += d; lock.unlock() }
    var value: T { lock.lock(); defer { lock.unlock() }; return v }
}
