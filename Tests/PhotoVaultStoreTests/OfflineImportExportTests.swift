// Offline import and export (Sources/PhotoVaultStore/Offline), plus the fixtures the other
// Offline*Tests use: a fresh user tree in a temp store, local file helpers, and a snapshot
// of a whole directory (names, types, modes, sizes, mtimes, contents, link targets, xattrs)
// to prove that something did or did not change.
import XCTest
import Foundation
import Glibc
import CSodium
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

enum OfflineFixture {
    static func tempDir(_ test: XCTestCase) -> String {
        var template = Array("/tmp/pv-offline-XXXXXX".utf8CString)
        let p = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(p != nil, "mkdtemp failed")
        let path = String(cString: p!)
        // TreeRemoval works through directory descriptors: Foundation's removeItem gives up on
        // the trees of thousands of levels the deep-tree tests build (paths past PATH_MAX), and
        // left them in /tmp.
        test.addTeardownBlock {
            do { try TreeRemoval.removeRecursively(path) } catch { XCTFail("cannot remove \(path): \(error)") }
        }
        return path
    }

    /// Routes the offline tools' fsyncs (`FileIO.fsync`) through `see` until the test ends:
    /// it sees each fd first, and returning false fails that fsync with EIO.
    static func hookFsync(_ test: XCTestCase, _ see: @escaping (Int32) -> Bool) {
        FileIO.fsync = { fd in
            guard see(fd) else { errno = EIO; return -1 }
            return Glibc.fsync(fd)
        }
        test.addTeardownBlock { FileIO.fsync = { Glibc.fsync($0) } }
    }

    /// Device and inode of an open file, to know which directory an fd is.
    static func identity(_ fd: Int32) -> [UInt64] {
        var st = stat()
        return Glibc.fstat(fd, &st) == 0 ? [UInt64(st.st_dev), UInt64(st.st_ino)] : []
    }

    static func identity(_ path: String) -> [UInt64] { lstat(path).map { [UInt64($0.st_dev), UInt64($0.st_ino)] } ?? [] }

    /// Same for a directory of a vault (its fd is closed with the VaultDirectory).
    static func identity(_ tree: UserTree, _ path: String) throws -> [UInt64] {
        let dir = try VaultResolver(tree: tree).directory(VaultPath(path))
        return withExtendedLifetime(dir) { identity(dir.fd) }
    }

    /// A new store directory with one initialised user tree; returns the tree and a scratch
    /// directory for local files.
    static func makeTree(_ test: XCTestCase, chunkSize: Int = 65536) throws -> (tree: UserTree, scratch: String) {
        let base = tempDir(test)
        let users = base + "/store/users"
        try FileManager.default.createDirectory(atPath: users, withIntermediateDirectories: true)
        let root = users + "/" + Base64Hex.random(16)
        let keyring = try UserKeyring(masterKey: SecureBytes(randomCount: 32))
        try UserTree.initialiseRoot(at: root, keyring: keyring)
        let tree = UserTree(root: root, keyring: keyring, layout: ChunkLayout(cipher: .preferred, chunkSize: chunkSize))
        let scratch = base + "/local"
        mkdir(scratch, 0o755)
        return (tree, scratch)
    }

    static func write(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        precondition(fd >= 0, "open \(path)")
        try! FileIO.writeAll(fd, bytes, offset: 0)
        fchmod(fd, mode)
        close(fd)
    }

    static func read(_ path: String) -> [UInt8] { (try? FileIO.readFile(path, limit: 64 << 20)) ?? [] }

    static func mkdirs(_ path: String) {
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// Sets atime/mtime (seconds, nanoseconds) without following a symlink.
    static func setTimes(_ path: String, atime: (Int, Int), mtime: (Int, Int)) {
        let ts = [timespec(tv_sec: atime.0, tv_nsec: atime.1), timespec(tv_sec: mtime.0, tv_nsec: mtime.1)]
        precondition(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) == 0, "utimensat \(path)")
    }

    static func lstat(_ path: String) -> stat? {
        var st = stat()
        return Glibc.lstat(path, &st) == 0 ? st : nil
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        _ = crypto_hash_sha256(&out, bytes, UInt64(bytes.count))
        return Base64Hex.hex(out)
    }

    static func setXattr(_ path: String, _ name: String, _ value: [UInt8]) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        precondition(fd >= 0)
        defer { close(fd) }
        try OfflineXattr.set(fd, name, value)
    }

    static func xattrs(_ path: String) -> [String: [UInt8]] {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return [:] }   // symlinks: none
        defer { close(fd) }
        var out: [String: [UInt8]] = [:]
        for n in (try? OfflineXattr.storedNames(fd)) ?? [] { out[n] = try? OfflineXattr.get(fd, n) }
        return out
    }

    /// relative path -> "type mode size mtime hash-or-target xattrs" for everything under
    /// `root` (root itself included as "."). `times: false` leaves directory mtimes out.
    static func snapshot(_ root: String, directoryTimes: Bool = true) -> [String: String] {
        var out: [String: String] = [:]
        func visit(_ rel: String) {
            let path = rel == "." ? root : root + "/" + rel
            guard let st = lstat(path) else { return }
            let type = st.st_mode & S_IFMT
            var d = "\(type) \(String(st.st_mode & 0o7777, radix: 8)) "
            let mt = "\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
            if type == S_IFDIR {
                if directoryTimes { d += mt }
                let xs = xattrs(path)
                d += " " + xs.keys.sorted().map { "\($0)=\(sha256(xs[$0]!))" }.joined(separator: ",")
                out[rel] = d
                let children = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                for c in children { visit(rel == "." ? c : rel + "/" + c) }
            } else if type == S_IFLNK {
                out[rel] = d + mt + " -> " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?")
            } else if type != S_IFREG {
                out[rel] = d + mt   // FIFOs and the like: never opened (a FIFO would block)
            } else {
                let xs = xattrs(path)
                out[rel] = d + "\(st.st_size) \(mt) \(sha256(read(path))) "
                    + xs.keys.sorted().map { "\($0)=\(sha256(xs[$0]!))" }.joined(separator: ",")
            }
        }
        visit(".")
        return out
    }

    /// `src/album` with a.jpg and `sub/b.jpg`, and an empty `src/mine`: for runs that fail
    /// inside album/sub (testAFailed…).
    static func makeAlbum(_ src: String) {
        mkdirs(src + "/album/sub")
        mkdirs(src + "/mine")
        write(src + "/album/a.jpg", SecureRandom.bytes(2_000))
        write(src + "/album/sub/b.jpg", SecureRandom.bytes(3_000))
    }

    /// Their modes (album 0751, rwx for its owner; sub 0550, not; mine 0755) and known times.
    static func setAlbumModesAndTimes(_ src: String) {
        chmod(src + "/mine", 0o755)
        chmod(src + "/album/sub", 0o550)
        chmod(src + "/album", 0o751)
        setTimes(src + "/album/sub", atime: (1_400_000_000, 1), mtime: (1_400_000_000, 2))
        setTimes(src + "/album", atime: (1_400_000_001, 3), mtime: (1_400_000_001, 4))
    }

    /// A local tree of known files for round trips.
    static func populate(_ dir: String, files: Int, size: Int, into sub: String = "photos", perDirectory: Int = 50) -> Int {
        var total = 0
        for i in 0..<files {
            let d = "\(dir)/\(sub)/\(2000 + i / perDirectory)/album-\(i % 3)"
            mkdirs(d)
            let p = "\(d)/IMG_\(String(format: "%04d", i)).jpg"
            write(p, SecureRandom.bytes(size + i % 977), mode: i % 5 == 0 ? 0o600 : 0o644)
            setTimes(p, atime: (1_600_000_000 + i, 123_456_789), mtime: (1_500_000_000 + i * 61, 987_654_321 - i))
            total += size + i % 977
        }
        return total
    }
}

final class OfflineImportExportTests: XCTestCase {
    func testBulkImportAndExportRoundTripKeepsContentModesAndTimes() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src"
        let expectedBytes = OfflineFixture.populate(src, files: 500, size: 200_000)
        // A handful of large camera files (several chunks and several 1 MiB import blocks).
        OfflineFixture.mkdirs(src + "/photos/raw")
        var large = 0
        for (i, size) in [3_000_000, 4_194_304, 5_000_001, 6_000_000].enumerated() {
            let p = src + "/photos/raw/DSC_\(i).NEF"
            OfflineFixture.write(p, SecureRandom.bytes(size), mode: 0o640)
            OfflineFixture.setTimes(p, atime: (1_700_000_000, 1), mtime: (1_650_000_000 + i, 500_000_000))
            large += size
        }
        chmod(src + "/photos/2001", 0o750)
        OfflineFixture.setTimes(src + "/photos/2001", atime: (1_400_000_000, 0), mtime: (1_400_000_000, 42))
        OfflineFixture.setTimes(src + "/photos", atime: (1_400_000_001, 0), mtime: (1_400_000_001, 43))

        var events = 0
        var completed = Set<String>()
        let summary = try Importer(tree: tree).import(sources: [src + "/photos"], into: "/2024/trip") { e in
            events += 1
            if case .file(let p, _) = e { completed.insert(p) }
        }
        XCTAssertEqual(summary.files, 504)
        XCTAssertEqual(summary.bytes, UInt64(expectedBytes + large))
        XCTAssertEqual(completed.count, 504)
        XCTAssertTrue(completed.contains("/2024/trip/photos/raw/DSC_2.NEF"))
        XCTAssertGreaterThan(events, 504)

        let out = scratch + "/out"
        let back = try Exporter(tree: tree).export(paths: ["/2024/trip/photos"], to: out)
        XCTAssertEqual(back.files, 504)
        XCTAssertEqual(back.bytes, summary.bytes)
        XCTAssertEqual(back.directories, summary.directories)
        // Same names, types, modes, sizes, mtimes (to the nanosecond) and sha256 of every file.
        XCTAssertEqual(OfflineFixture.snapshot(out + "/photos"), OfflineFixture.snapshot(src + "/photos"))

        // The ciphertext entries themselves carry mode and mtime in clear (FORMAT.md §8).
        let r = try VaultResolver(tree: tree)
        let e = try r.entry(VaultPath("/2024/trip/photos/raw/DSC_1.NEF"))
        let st = try XCTUnwrap(try e.stat())
        XCTAssertEqual(st.st_mode & 0o7777, 0o640)
        XCTAssertEqual(st.st_mtim.tv_sec, 1_650_000_001)
        XCTAssertEqual(st.st_mtim.tv_nsec, 500_000_000)
        XCTAssertEqual(UInt64(st.st_size), tree.layout.ciphertextSize(plaintextSize: 4_194_304))
    }

    func testSymlinksUnicodeLongNamesEmptyFilesAndXattrs() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src/set"
        OfflineFixture.mkdirs(src + "/ünïcødé 日本語 🌍/sub")
        let names = [
            "ünïcødé 日本語 🌍/café.jpg",                        // NFC é
            "ünïcødé 日本語 🌍/cafe\u{301}.jpg",                  // NFD: a different name, both must survive
            "ünïcødé 日本語 🌍/sub/" + String(repeating: "a", count: 251) + ".jpg",   // 255 bytes
            "ünïcødé 日本語 🌍/sub/" + String(repeating: "写", count: 85),            // 255 bytes, 3-byte chars
            "ünïcødé 日本語 🌍/sub/" + String(repeating: "b", count: 161),            // just over the short-name limit
            "plain.txt",
            "empty",
        ]
        for (i, n) in names.enumerated() {
            XCTAssertLessThanOrEqual(StorePath.basename(n).utf8.count, 255)
            OfflineFixture.write(src + "/" + n, n == "empty" ? [] : SecureRandom.bytes(1000 + i * 70_000), mode: 0o604)
            OfflineFixture.setTimes(src + "/" + n, atime: (1_600_000_000, 5), mtime: (1_500_000_000 + i, 7))
        }
        try OfflineFixture.setXattr(src + "/plain.txt", "user.comment", Array("Sunset at the beach".utf8))
        try OfflineFixture.setXattr(src + "/plain.txt", "user.rating", [5])
        try OfflineFixture.setXattr(src + "/ünïcødé 日本語 🌍", "user.album", Array("holiday".utf8))
        XCTAssertEqual(symlink("plain.txt", src + "/relative-link"), 0)
        XCTAssertEqual(symlink("/nonexistent/target/ü", src + "/dangling-link"), 0)
        XCTAssertEqual(symlink("../set/ünïcødé 日本語 🌍/sub", src + "/" + String(repeating: "L", count: 255)), 0)
        OfflineFixture.setTimes(src + "/relative-link", atime: (1_300_000_000, 0), mtime: (1_300_000_000, 99))
        mkfifo(src + "/a-fifo", 0o600)

        var skipped: [String] = []
        let s = try Importer(tree: tree).import(sources: [src], into: "/") { if case .skipped(let p, _) = $0 { skipped.append(p) } }
        XCTAssertEqual(s.symlinks, 3)
        XCTAssertEqual(s.files, names.count)
        XCTAssertEqual(skipped, ["/set/a-fifo"])

        // Long names use a companion file in the store.
        let r = try VaultResolver(tree: tree)
        let long = try r.entry(VaultPath("/set/ünïcødé 日本語 🌍/sub/" + String(repeating: "a", count: 251) + ".jpg"))
        XCTAssertNotNil(long.encoded.companion)
        XCTAssertNotNil(try OfflineSys.lstat(long.parent.fd, long.encoded.companion!))
        // Symlink targets are sealed in the store.
        let link = try r.entry(VaultPath("/set/relative-link"))
        let stored = try OfflineSys.readLink(link.parent.fd, Array(link.encoded.entry.utf8CString))
        XCTAssertNotEqual(stored, Array("plain.txt".utf8))
        XCTAssertEqual(try LinkTarget.open(stored, keyring: tree.keyring), Array("plain.txt".utf8))

        let out = scratch + "/out"
        let back = try Exporter(tree: tree).export(paths: ["/set"], to: out)
        XCTAssertEqual(back.symlinks, 3)
        // Everything but the FIFO comes back: names, modes, mtimes (directories too), contents,
        // link targets, xattrs.
        let expected = OfflineFixture.snapshot(src).filter { $0.key != "a-fifo" }
        // Swift's String keys treat the NFC and NFD names as one key, hence one less...
        XCTAssertEqual(expected.count, names.count - 1 + 3 + 3)   // files, symlinks, ".", two directories
        XCTAssertEqual(OfflineFixture.snapshot(out + "/set"), expected)
        // ...so every file is also compared by its exact path (String keeps the scalars).
        for n in names {
            XCTAssertEqual(OfflineFixture.read(out + "/set/" + n), OfflineFixture.read(src + "/" + n), n)
        }
        let unicodeDir = try FileManager.default.contentsOfDirectory(atPath: out + "/set/ünïcødé 日本語 🌍")
        XCTAssertEqual(Set(unicodeDir.map { Array($0.utf8) }).count, 3)   // café NFC, café NFD, sub
        XCTAssertNotEqual(OfflineFixture.read(out + "/set/ünïcødé 日本語 🌍/café.jpg"),
                          OfflineFixture.read(out + "/set/ünïcødé 日本語 🌍/cafe\u{301}.jpg"))
        XCTAssertEqual(OfflineFixture.xattrs(out + "/set/plain.txt")["user.comment"], Array("Sunset at the beach".utf8))
        XCTAssertEqual(OfflineFixture.xattrs(out + "/set/ünïcødé 日本語 🌍")["user.album"], Array("holiday".utf8))
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: out + "/set/dangling-link"), "/nonexistent/target/ü")
        XCTAssertNil(OfflineFixture.lstat(out + "/set/a-fifo"))
    }

    func testForceIsRespectedOnImportAndExport() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let v1 = SecureRandom.bytes(150_000), v2 = SecureRandom.bytes(90_000)
        OfflineFixture.mkdirs(scratch + "/a")
        OfflineFixture.write(scratch + "/a/pic.jpg", v1)
        let importer = Importer(tree: tree)
        try importer.import(sources: [scratch + "/a/pic.jpg"], into: "/album")

        // Import: an existing file is not replaced without force, and nothing is left behind.
        OfflineFixture.write(scratch + "/a/pic.jpg", v2)
        XCTAssertThrowsError(try importer.import(sources: [scratch + "/a/pic.jpg"], into: "/album")) {
            XCTAssertEqual($0 as? StoreError, .exists("/album/pic.jpg"))
        }
        let out = scratch + "/out"
        try Exporter(tree: tree).export(paths: ["/album/pic.jpg"], to: out)
        XCTAssertEqual(OfflineFixture.read(out + "/pic.jpg"), v1)
        let album = try VaultResolver(tree: tree).directory(VaultPath("/album"))
        XCTAssertEqual(try OfflineSys.list(album.fd).filter { $0.name.hasPrefix(AtomicFile.tempPrefix) }.count, 0)

        // Export: the local file is not replaced without force either.
        try importer.import(sources: [scratch + "/a/pic.jpg"], into: "/album", force: true)
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/album/pic.jpg"], to: out)) {
            XCTAssertEqual($0 as? StoreError, .exists(out + "/pic.jpg"))
        }
        XCTAssertEqual(OfflineFixture.read(out + "/pic.jpg"), v1)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), ["pic.jpg"])   // no temp file left
        try Exporter(tree: tree).export(paths: ["/album/pic.jpg"], to: out, force: true)
        XCTAssertEqual(OfflineFixture.read(out + "/pic.jpg"), v2)

        // A directory is never replaced by a file, even with force; directories merge.
        OfflineFixture.mkdirs(scratch + "/b/album")
        OfflineFixture.write(scratch + "/b/album/other.jpg", v1)
        try importer.import(sources: [scratch + "/b/album"], into: "/")
        XCTAssertEqual(try ClassTool(tree: tree).list("/album").map(\.path), ["/album/other.jpg", "/album/pic.jpg"])
        OfflineFixture.write(scratch + "/b/pic.jpg", v1)
        OfflineFixture.mkdirs(scratch + "/c/pic.jpg")
        XCTAssertThrowsError(try importer.import(sources: [scratch + "/c/pic.jpg"], into: "/album", force: true)) {
            XCTAssertEqual($0 as? StoreError, .exists("/album/pic.jpg"))
        }
        XCTAssertThrowsError(try importer.import(sources: [scratch + "/b/album"], into: "/album/pic.jpg")) {
            XCTAssertEqual(($0 as? StoreError)?.errno, ENOTDIR)
        }
    }

    func testStdinAndStdoutStreamThroughPipes() throws {
        let (tree, _) = try OfflineFixture.makeTree(self)
        let data = SecureRandom.bytes(3 * 1_048_576 + 12_345)   // larger than a pipe buffer and than one block
        var inPipe: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&inPipe), 0)
        let (inRead, inWrite) = (inPipe[0], inPipe[1])
        let writer = Thread {
            try! FileIO.writeAllStream(inWrite, data)
            close(inWrite)
        }
        writer.start()
        let s = try Importer(tree: tree, stdin: inRead).import(sources: ["-"], into: "/streams/in.bin")
        close(inRead)
        XCTAssertEqual(s.files, 1)
        XCTAssertEqual(s.bytes, UInt64(data.count))
        XCTAssertEqual(try ClassTool(tree: tree).get("/streams/in.bin").protectionClass, .complete)
        let st = try XCTUnwrap(try VaultResolver(tree: tree).entry(VaultPath("/streams/in.bin")).stat())
        XCTAssertEqual(st.st_mode & 0o7777, Importer.stdinMode)

        var outPipe: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&outPipe), 0)
        let (outRead, outWrite) = (outPipe[0], outPipe[1])
        final class Sink: @unchecked Sendable { var bytes: [UInt8] = [] }
        let received = Sink()
        let done = DispatchSemaphore(value: 0)
        let reader = Thread {
            var buf = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buf.withUnsafeMutableBytes { Glibc.read(outRead, $0.baseAddress!, $0.count) }
                if n <= 0 { break }
                received.bytes += buf[0..<n]
            }
            done.signal()
        }
        reader.start()
        let out = try Exporter(tree: tree, stdout: outWrite).export(paths: ["/streams/in.bin"], to: "-")
        close(outWrite)
        done.wait()
        close(outRead)
        XCTAssertEqual(out.bytes, UInt64(data.count))
        XCTAssertEqual(OfflineFixture.sha256(received.bytes), OfflineFixture.sha256(data))

        // The stdin rule: "-" is the only source, and stdout takes exactly one file.
        XCTAssertThrowsError(try Importer(tree: tree).import(sources: ["-", "/etc/hostname"], into: "/x")) {
            XCTAssertEqual(($0 as? StoreError)?.exitCode, 2)
        }
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/streams"], to: "-")) {
            XCTAssertEqual(($0 as? StoreError)?.exitCode, 2)
        }
    }

    func testStoreHoldsNoPlaintextNameOrContentAfterImport() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/Holiday-Secret-Album"
        OfflineFixture.mkdirs(src + "/Beach-Day-Folder")
        var needles: [[UInt8]] = [Array("Holiday-Secret-Album".utf8), Array("Beach-Day-Folder".utf8)]
        for i in 0..<20 {
            let name = "Sunset-Photo-\(i)-Grandma.jpg"
            // Recognisable, compressible text: the worst case for leaking content.
            let content = Array(String(repeating: "PLAINTEXT-CONTENT-MARKER-\(i);", count: 3000 + i * 50).utf8)
            OfflineFixture.write(src + "/Beach-Day-Folder/" + name, content)
            needles.append(Array(name.utf8))
            needles.append(Array("PLAINTEXT-CONTENT-MARKER-\(i);".utf8))
        }
        let longName = "Very-Long-Descriptive-Name-" + String(repeating: "Mountains-", count: 20) + ".jpg"
        OfflineFixture.write(src + "/" + longName, Array("LONG-NAME-FILE-BODY".utf8))
        needles += [Array(longName.prefix(60).utf8), Array("LONG-NAME-FILE-BODY".utf8)]
        XCTAssertEqual(symlink("Secret-Symlink-Target-Path", src + "/Link-To-Secret"), 0)
        needles += [Array("Secret-Symlink-Target-Path".utf8), Array("Link-To-Secret".utf8)]
        try OfflineFixture.setXattr(src + "/" + longName, "user.Private-Attr-Name", Array("Private-Attr-Value".utf8))
        needles += [Array("Private-Attr-Name".utf8), Array("Private-Attr-Value".utf8)]

        try Importer(tree: tree).import(sources: [src], into: "/")
        // Every name, link target, xattr name/value and file byte in the store.
        var haystacks: [[UInt8]] = []
        let storeRoot = tree.root
        let paths = try FileManager.default.subpathsOfDirectory(atPath: storeRoot)
        XCTAssertGreaterThanOrEqual(paths.count, 28)   // 2 dirs, 3 .pvdir, 21 files, 1 companion, 1 link
        for rel in paths {
            let p = storeRoot + "/" + rel
            haystacks.append(Array(rel.utf8))
            guard let st = OfflineFixture.lstat(p) else { continue }
            if st.st_mode & S_IFMT == S_IFLNK {
                haystacks.append(Array(try FileManager.default.destinationOfSymbolicLink(atPath: p).utf8))
            } else {
                if st.st_mode & S_IFMT == S_IFREG { haystacks.append(OfflineFixture.read(p)) }
                for (k, v) in OfflineFixture.xattrs(p) { haystacks.append(Array(k.utf8)); haystacks.append(v) }
            }
        }
        for needle in needles {
            let n = Data(needle)
            for h in haystacks {
                XCTAssertNil(Data(h).range(of: n), "plaintext \(String(decoding: needle, as: UTF8.self)) found in the store")
            }
        }
        // And the import is real: it comes back out.
        let out = scratch + "/out"
        try Exporter(tree: tree).export(paths: ["/Holiday-Secret-Album"], to: out)
        XCTAssertEqual(OfflineFixture.snapshot(out + "/Holiday-Secret-Album"), OfflineFixture.snapshot(src))
    }

    func testWritersExcludeEachOtherThroughTheTreeLock() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.write(scratch + "/f", [1, 2, 3])
        try Importer(tree: tree).import(sources: [scratch + "/f"], into: "/")
        let held = try TreeLock(root: tree.root, mode: .exclusive)
        XCTAssertThrowsError(try Importer(tree: tree, lockTimeout: 0.1).import(sources: [scratch + "/f"], into: "/d")) {
            XCTAssertEqual($0 as? StoreError, .storeBusy)
        }
        XCTAssertThrowsError(try Exporter(tree: tree, lockTimeout: 0.1).export(paths: ["/f"], to: scratch + "/o")) {
            XCTAssertEqual($0 as? StoreError, .storeBusy)
        }
        held.release()
        // Readers share: an export runs while another reader (e.g. a mount) holds a shared lock,
        // but a writer does not.
        let reader = try TreeLock(root: tree.root, mode: .shared)
        try Exporter(tree: tree, lockTimeout: 0.1).export(paths: ["/f"], to: scratch + "/o")
        XCTAssertEqual(OfflineFixture.read(scratch + "/o/f"), [1, 2, 3])
        XCTAssertThrowsError(try ClassTool(tree: tree, lockTimeout: 0.1).set("/f", to: .none)) {
            XCTAssertEqual($0 as? StoreError, .storeBusy)
        }
        XCTAssertThrowsError(try Fsck(tree: tree, lockTimeout: 0.1).run(repair: true)) {
            XCTAssertEqual($0 as? StoreError, .storeBusy)
        }
        XCTAssertTrue(try Fsck(tree: tree, lockTimeout: 0.1).run().isClean)
        reader.release()
        try ClassTool(tree: tree, lockTimeout: 0.1).set("/f", to: .none)
    }

    /// A power loss must not leave `export --force` having traded a good local file for an
    /// empty one: each file is fsync'ed under its temp name before the rename, each local
    /// directory after its entries, and a failed fsync stops the export before the rename.
    /// (Through `FileIO.fsync`, which records here what each call synced.)
    func testExportSyncsEachFileBeforeItsRenameAndEachDirectoryAfterItsEntries() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.mkdirs(scratch + "/src/album/sub")
        OfflineFixture.write(scratch + "/src/album/a.jpg", SecureRandom.bytes(70_000))
        OfflineFixture.write(scratch + "/src/album/sub/b.jpg", SecureRandom.bytes(5_000))
        try Importer(tree: tree).import(sources: [scratch + "/src/album"], into: "/")
        let out = scratch + "/out", old = SecureRandom.bytes(1_000)
        OfflineFixture.mkdirs(out + "/album")
        OfflineFixture.write(out + "/album/a.jpg", old)   // the good local file

        func path(_ fd: Int32) -> String {
            var buf = [CChar](repeating: 0, count: 4096)
            let n = readlink("/proc/self/fd/\(fd)", &buf, buf.count - 1)
            return n > 0 ? String(cString: buf) : "?"
        }
        // The first file fsync fails (EIO): no rename, the local file keeps its bytes.
        OfflineFixture.hookFsync(self) { !path($0).contains("/" + Exporter.tempPrefix) }
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/album"], to: out, force: true)) {
            guard case StoreError.io(let e, let context)? = $0 as? StoreError else { return XCTFail("\($0)") }
            XCTAssertEqual(e, EIO)
            XCTAssertTrue(context.hasPrefix("fsync " + out + "/album/"), context)
        }
        XCTAssertEqual(OfflineFixture.read(out + "/album/a.jpg"), old)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out + "/album").filter { $0.hasPrefix(".") }, [])

        // Each file under its temp name, then its directory; /album/sub before /album, DEST last.
        var synced: [String] = []
        OfflineFixture.hookFsync(self) { synced.append(path($0)); return true }
        try Exporter(tree: tree).export(paths: ["/album"], to: out, force: true)
        let real = try XCTUnwrap(RealPath.of(out))
        let rel = synced.map { $0.hasPrefix(real) ? String($0.dropFirst(real.count)) : $0 }
                        .map { $0.contains(Exporter.tempPrefix) ? StorePath.dirname($0) + "/TEMP" : $0 }
        XCTAssertEqual(rel.sorted(), ["", "/album", "/album/TEMP", "/album/sub", "/album/sub/TEMP"])
        XCTAssertEqual(rel.suffix(2), ["/album", ""], "\(rel)")
        XCTAssertLessThan(rel.firstIndex(of: "/album/sub/TEMP") ?? 9, rel.firstIndex(of: "/album/sub") ?? 0, "\(rel)")
        XCTAssertEqual(OfflineFixture.read(out + "/album/sub/b.jpg").count, 5_000)
    }

    /// Every directory the tools create survives a crash: its parent is fsync'ed after the
    /// rename (or mkdir) that made it, for the vault directories import creates for DEST and
    /// the local ones export creates for its DEST.
    func testEveryDirectoryCreatedForADestinationIsSyncedInItsParent() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.write(scratch + "/a.jpg", SecureRandom.bytes(1_000))
        var synced: Set<[UInt64]> = []
        OfflineFixture.hookFsync(self) { synced.insert(OfflineFixture.identity($0)); return true }
        try Importer(tree: tree).import(sources: [scratch + "/a.jpg"], into: "/new/deeper")
        XCTAssertTrue(synced.contains(try OfflineFixture.identity(tree, "/")), "the root, which holds /new")
        XCTAssertTrue(synced.contains(try OfflineFixture.identity(tree, "/new")), "/new, which holds /new/deeper")

        synced = []
        try Exporter(tree: tree).export(paths: ["/new/deeper/a.jpg"], to: scratch + "/out/new/deeper")
        for dir in ["", "/out", "/out/new"] {
            XCTAssertTrue(synced.contains(OfflineFixture.identity(scratch + dir)), "local " + scratch + dir)
        }
    }

    /// A long name's companion is written before its entry (FORMAT.md section 6). When the
    /// entry then is not made (the fsync after the companion fails, or the final rename
    /// does), the companion is removed again; it used to stay behind as an orphan that fsck
    /// reports. A long-named file that --force was replacing keeps its companion and bytes.
    func testAFailedImportLeavesNoOrphanCompanion() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let long = scratch + "/" + String(repeating: "n", count: 200) + ".jpg", short = scratch + "/s.jpg"
        let first = SecureRandom.bytes(5_000)
        OfflineFixture.write(long, first)
        OfflineFixture.write(short, [1])
        let importer = Importer(tree: tree)
        try importer.import(sources: [short], into: "/a")
        func storeNames() throws -> [String] {
            let dir = try VaultResolver(tree: tree).directory(VaultPath("/a"))
            return try withExtendedLifetime(dir) { try OfflineSys.list(dir.fd).map(\.name) }
        }
        let before = try storeNames()
        // Armed once: at the first fsync of a directory that holds a companion (the one
        // after the companion landed), `act` runs and decides whether the fsync succeeds.
        func failOnce(_ act: @escaping (Int32) -> Bool) {
            var armed = true
            OfflineFixture.hookFsync(self) { fd in
                guard armed, ((try? OfflineSys.list(fd)) ?? []).contains(where: { $0.name.hasSuffix(NameCodec.companionSuffix) }) else { return true }
                armed = false
                return act(fd)
            }
        }
        // The final rename fails: its temp file is gone (ENOENT).
        let dropTemp: (Int32) -> Bool = { fd in
            for e in (try? OfflineSys.list(fd)) ?? [] where e.name.hasPrefix(AtomicFile.tempPrefix) { unlinkat(fd, e.name, 0) }
            return true
        }
        failOnce { _ in false }
        XCTAssertThrowsError(try importer.import(sources: [long], into: "/a")) { XCTAssertEqual(($0 as? StoreError)?.errno, EIO) }
        XCTAssertEqual(try storeNames(), before, "a companion or temp file left behind after a failed fsync")
        failOnce(dropTemp)
        XCTAssertThrowsError(try importer.import(sources: [long], into: "/a")) { XCTAssertEqual(($0 as? StoreError)?.errno, ENOENT) }
        XCTAssertEqual(try storeNames(), before, "a companion or temp file left behind after a failed rename")
        XCTAssertTrue(try Fsck(tree: tree).run().isClean)

        // An existing long-named file being replaced keeps its companion when the rename fails.
        try importer.import(sources: [long], into: "/a")
        let withFile = try storeNames()
        XCTAssertEqual(withFile.filter { $0.hasSuffix(NameCodec.companionSuffix) }.count, 1)
        OfflineFixture.write(long, SecureRandom.bytes(7_000))
        failOnce(dropTemp)
        XCTAssertThrowsError(try importer.import(sources: [long], into: "/a", force: true))
        XCTAssertEqual(try storeNames(), withFile)
        XCTAssertTrue(try Fsck(tree: tree).run().isClean)
        try Exporter(tree: tree).export(paths: ["/a"], to: scratch + "/out")
        XCTAssertEqual(OfflineFixture.read(scratch + "/out/a/" + StorePath.basename(long)), first)
    }

    /// Directories are made 0700 and get their mode and times after their entries. A run
    /// that fails inside one used to leave it 0700 for good, and a second run did not fix
    /// it. Now it gets its mode anyway when that mode keeps it rwx for its owner (0751); a
    /// stricter one (0550) waits, with the rest of the directory, for the next run, which
    /// finishes every directory the failed run made. A directory the user had keeps its mode.
    func testAFailedImportGivesItsDirectoriesTheirModesAndARerunFinishesThem() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src"
        OfflineFixture.makeAlbum(src)
        // A symlink target longer than the vault takes: the import fails there.
        XCTAssertEqual(symlink(String(repeating: "t", count: 3_500), src + "/album/sub/zz-link"), 0)
        let importer = Importer(tree: tree)
        // The user's own /v/mine, 0700.
        chmod(src + "/mine", 0o700)
        try importer.import(sources: [src + "/mine"], into: "/v")
        OfflineFixture.setAlbumModesAndTimes(src)
        func mode(_ path: String) throws -> mode_t {
            try XCTUnwrap(try VaultResolver(tree: tree).entry(VaultPath(path)).stat()).st_mode & 0o7777
        }

        XCTAssertThrowsError(try importer.import(sources: [src + "/album", src + "/mine"], into: "/v")) {
            XCTAssertEqual(($0 as? StoreError)?.errno, ENAMETOOLONG)
        }
        XCTAssertEqual(try mode("/v/album"), 0o751)
        XCTAssertEqual(try mode("/v/album/sub"), 0o700, "0550 would lock the next run out")

        // The cause removed, a second run finishes both, without --force too: the files the
        // failed run copied are in place (same size and time) and are skipped, not refused
        // (it stopped at /v/album/a.jpg, exists, and only --force went on).
        unlink(src + "/album/sub/zz-link")
        OfflineFixture.setAlbumModesAndTimes(src)
        let rerun = try importer.import(sources: [src + "/album", src + "/mine"], into: "/v")
        XCTAssertGreaterThan(rerun.unchanged, 0)
        XCTAssertEqual(try mode("/v/album/sub"), 0o550)
        XCTAssertEqual(try mode("/v/mine"), 0o700, "a directory the user had")
        try Exporter(tree: tree).export(paths: ["/v/album"], to: scratch + "/out")
        XCTAssertEqual(OfflineFixture.snapshot(scratch + "/out/album"), OfflineFixture.snapshot(src + "/album"))
        XCTAssertTrue(try Fsck(tree: tree).run().isClean)
        // Finished, a directory carries no xattr but sealed ones (no marker left).
        let sub = try VaultResolver(tree: tree).directory(VaultPath("/v/album/sub"))
        XCTAssertEqual(try withExtendedLifetime(sub) { try OfflineXattr.storedNames(sub.fd) }.filter { !$0.hasPrefix(XattrCodec.storedPrefix) }, [])
    }

    /// The same for export: a damaged file stops it inside local directories it made; they
    /// get their modes where safe, and `export --force` after the repair finishes them. A
    /// local directory the user had keeps its mode.
    func testAFailedExportGivesItsDirectoriesTheirModesAndARerunFinishesThem() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src"
        OfflineFixture.makeAlbum(src)
        OfflineFixture.write(src + "/album/sub/c.jpg", SecureRandom.bytes(3_000))
        OfflineFixture.setAlbumModesAndTimes(src)
        try Importer(tree: tree).import(sources: [src + "/album", src + "/mine"], into: "/")
        let out = scratch + "/out"
        OfflineFixture.mkdirs(out + "/mine")
        chmod(out + "/mine", 0o700)

        // Flip one byte of c.jpg's chunk: the export fails inside /album/sub.
        let e = try VaultResolver(tree: tree).entry(VaultPath("/album/sub/c.jpg"))
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let off = Int(tree.layout.sealedOffset(ofChunk: 0)) + 40
        var st = stat()
        XCTAssertEqual(fstat(fd, &st), 0)
        func flip() {   // keeping its times, which are the file's
            var b: UInt8 = 0
            XCTAssertEqual(pread(fd, &b, 1, off), 1)
            b ^= 0x01
            XCTAssertEqual(pwrite(fd, &b, 1, off), 1)
            XCTAssertEqual(futimens(fd, [st.st_atim, st.st_mtim]), 0)
        }
        flip()
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/album", "/mine"], to: out)) {
            XCTAssertEqual(($0 as? StoreError)?.exitCode, 22)
        }
        XCTAssertEqual(OfflineFixture.lstat(out + "/album").map { $0.st_mode & 0o7777 }, 0o751)
        XCTAssertEqual(OfflineFixture.lstat(out + "/album/sub").map { $0.st_mode & 0o7777 }, 0o700)

        flip()
        try Exporter(tree: tree).export(paths: ["/album", "/mine"], to: out, force: true)
        XCTAssertEqual(OfflineFixture.snapshot(out + "/album"), OfflineFixture.snapshot(src + "/album"))
        XCTAssertEqual(OfflineFixture.lstat(out + "/mine").map { $0.st_mode & 0o7777 }, 0o700, "a directory the user had")
    }

    /// A source that cannot be read partway through a run (/proc/self/mem: a regular file
    /// whose read fails with EIO) stops the import with an I/O error that names that local
    /// file; the file before it stays complete, the failing one leaves nothing behind (not
    /// even its temp file), the one after it is not begun. The error used to say only
    /// "read: Input/output error".
    func testAnUnreadableSourceStopsTheImportNamingItAndLeavesNoPartialFile() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        OfflineFixture.write(scratch + "/a.jpg", [1, 2, 3])
        OfflineFixture.write(scratch + "/c.jpg", [4])
        let sources = [scratch + "/a.jpg", "/proc/self/mem", scratch + "/c.jpg"]
        XCTAssertThrowsError(try Importer(tree: tree).import(sources: sources, into: "/in")) {
            XCTAssertEqual($0 as? StoreError, .io(errno: EIO, context: "cannot import /proc/self/mem: read"))
        }
        let dir = try VaultResolver(tree: tree).directory(VaultPath("/in"))
        let stored = try withExtendedLifetime(dir) { try OfflineSys.list(dir.fd) }.map(\.name)
        XCTAssertEqual(Set(stored), [DirectoryInfo.fileName, tree.names.encode(Array("a.jpg".utf8), in: dir.info).entry])
        try Exporter(tree: tree).export(paths: ["/in/a.jpg"], to: scratch + "/out")
        XCTAssertEqual(OfflineFixture.read(scratch + "/out/a.jpg"), [1, 2, 3])
    }

    func testDamagedFileIsNeverExported() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let good = SecureRandom.bytes(300_000)
        OfflineFixture.write(scratch + "/p.jpg", good)
        try Importer(tree: tree).import(sources: [scratch + "/p.jpg"], into: "/")
        let e = try VaultResolver(tree: tree).entry(VaultPath("/p.jpg"))
        let fd = openat(e.parent.fd, e.encoded.entry, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        // Flip one byte in the last chunk: the first chunks are fine, the file as a whole is not.
        let off = Int(tree.layout.sealedOffset(ofChunk: 4)) + 40
        var b: UInt8 = 0
        XCTAssertEqual(pread(fd, &b, 1, off), 1)
        b ^= 0x01
        XCTAssertEqual(pwrite(fd, &b, 1, off), 1)
        close(fd)
        let out = scratch + "/out"
        XCTAssertThrowsError(try Exporter(tree: tree).export(paths: ["/p.jpg"], to: out)) {
            guard case StoreError.integrity(let path, let detail)? = $0 as? StoreError else { return XCTFail("\($0)") }
            XCTAssertEqual(path, "/p.jpg")
            XCTAssertTrue(detail.contains("chunk 4"), detail)
        }
        // Neither the file nor its temp file exists: no wrong (or partial) bytes on disk.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), [])
    }
}

extension FileIO {
    /// Sequential write to a pipe (pwrite does not work on pipes).
    static func writeAllStream(_ fd: Int32, _ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try OfflineSys.writeStream(fd, $0.baseAddress!, bytes.count) }
    }
}

/// A name that decrypts but is no file name ("..", "a/../..", "../x") is never followed.
final class OfflineNameTraversalTests: XCTestCase {
    func testANameThatDecryptsToAPathIsSkippedNotFollowedByExport() throws {
        let (tree, scratch) = try OfflineFixture.makeTree(self)
        let src = scratch + "/src"
        OfflineFixture.mkdirs(src + "/album/sub")
        OfflineFixture.write(src + "/album/a.jpg", Array("photo-a".utf8), mode: 0o600)
        OfflineFixture.write(src + "/album/sub/b.jpg", Array("photo-b".utf8), mode: 0o600)
        _ = try Importer(tree: tree).import(sources: [src + "/album"], into: "/") { _ in }

        // Someone with this account's keys renames the entries to authentic names that are paths.
        let resolver = try VaultResolver(tree: tree)
        let album = try resolver.directory(VaultPath("/album"))
        func entry(_ plain: String) -> String {
            guard case .short(let e) = tree.names.encode(Array(plain.utf8), in: album.info) else { fatalError() }
            return e
        }
        XCTAssertEqual(renameat(album.fd, entry("a.jpg"), album.fd, entry("../../escaped.jpg")), 0)
        XCTAssertEqual(renameat(album.fd, entry("sub"), album.fd, entry("..")), 0)
        withExtendedLifetime(album) {}

        let out = scratch + "/out"
        let summary = try Exporter(tree: tree).export(paths: ["/album"], to: out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch + "/escaped.jpg"), "export wrote outside its destination")
        XCTAssertFalse(FileManager.default.fileExists(atPath: out + "/b.jpg"), "export followed a directory named ..")
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch + "/b.jpg"))
        XCTAssertEqual(summary.files, 0)
        XCTAssertEqual(summary.skipped.count, 2, "\(summary.skipped)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out + "/album"), [])
    }
}
