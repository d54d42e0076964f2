// Fixtures shared by the store tests (named to fit the test files this engineer owns):
// temp directories, keyrings, and a writer/reader of whole ciphertext trees that goes
// through the store API the way the FUSE layer does (names, .pvdir, companions, headers,
// chunks, symlink targets, xattrs). Used by the plaintext scan and the fixed vectors.
import XCTest
import Foundation
import Glibc
import CSodium
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// SplitMix64: seeded so randomized tests replay exactly on failure.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8.random(in: 0...255, using: &self) } }
}

enum Fixture {
    /// The known master key of the fixed vectors: bytes 0, 1, ..., 31.
    static let knownMasterKey: [UInt8] = (0..<32).map { UInt8($0) }

    static func keyring(_ master: [UInt8] = knownMasterKey) throws -> UserKeyring {
        try UserKeyring(masterKey: SecureBytes(copying: master))
    }

    static func randomKeyring() throws -> UserKeyring { try UserKeyring(masterKey: SecureBytes(randomCount: 32)) }

    /// A fresh directory under /tmp, removed by the returned test's teardown helper.
    static func tempDir(_ test: XCTestCase) -> String {
        var template = Array("/tmp/pv-storetest-XXXXXX".utf8CString)
        let p = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(p != nil, "mkdtemp failed")
        let path = String(cString: p!)
        test.addTeardownBlock { removeTree(path) }
        return path
    }

    static func removeTree(_ path: String) {
        _ = try? FileManager.default.removeItem(atPath: path)
    }

    static func readFile(_ path: String) -> [UInt8] {
        (try? FileIO.readFile(path, limit: 64 << 20)) ?? []
    }

    static func writeFile(_ path: String, _ bytes: [UInt8]) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        precondition(fd >= 0, "open \(path)")
        try! FileIO.writeAll(fd, bytes, offset: 0)
        close(fd)
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        _ = crypto_hash_sha256(&out, bytes, UInt64(bytes.count))
        return Base64Hex.hex(out)
    }

    /// Every plaintext path in a `PlainTree` is UTF-8 names joined by "/".
    static func join(_ parent: String, _ name: [UInt8]) -> String {
        let n = String(decoding: name, as: UTF8.self)
        return parent.isEmpty ? n : parent + "/" + n
    }
}

/// libc's xattr calls, looked up at run time: `<sys/xattr.h>` is in neither Glibc's Swift
/// module nor the project's C shims, and the tests should not change shared headers.
enum Xattr {
    private typealias SetFn = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    private typealias ListFn = @convention(c) (UnsafePointer<CChar>, UnsafeMutablePointer<CChar>?, Int) -> Int
    private typealias GetFn = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private static func sym<T>(_ name: String, _: T.Type) -> T {
        guard let p = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { fatalError("dlsym \(name)") }
        return unsafeBitCast(p, to: T.self)
    }
    private static let lset = sym("lsetxattr", SetFn.self)
    private static let llist = sym("llistxattr", ListFn.self)
    private static let lget = sym("lgetxattr", GetFn.self)
    private typealias RemoveFn = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>) -> Int32
    private static let lremove = sym("lremovexattr", RemoveFn.self)
    static func remove(_ path: String, _ name: String) -> Int32 { lremove(path, name) }

    static func set(_ path: String, _ name: String, _ value: [UInt8]) -> Int32 {
        value.withUnsafeBytes { v in lset(path, name, v.baseAddress, value.count, 0) }
    }
    static func list(_ path: String, _ buf: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int { llist(path, buf, size) }
    static func get(_ path: String, _ name: String, _ buf: UnsafeMutableRawPointer?, _ size: Int) -> Int { lget(path, name, buf, size) }
}

/// An open ciphertext directory of a tree and its decoded `.pvdir`.
final class CipherDir {
    let fd: Int32
    let info: DirectoryInfo
    let path: String
    init(fd: Int32, info: DirectoryInfo, path: String) { self.fd = fd; self.info = info; self.path = path }
    deinit { close(fd) }
}

/// Writes plaintext objects into a ciphertext tree with the store API.
struct TreeWriter {
    let keyring: UserKeyring
    let layout: ChunkLayout
    var names: NameCodec { NameCodec(keyring: keyring) }
    var xattrs: XattrCodec { XattrCodec(keyring: keyring) }

    func makeRoot(at path: String) throws -> CipherDir {
        try UserTree.initialiseRoot(at: path, keyring: keyring)
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open root") }
        return CipherDir(fd: fd, info: try DirectoryInfo.read(dirfd: fd, keyring: keyring), path: path)
    }

    @discardableResult
    func mkdir(_ name: String, in dir: CipherDir, defaultClass: ProtectionClass = .complete) throws -> CipherDir {
        let enc = names.encode(Array(name.utf8), in: dir.info)
        try NameCodec.writeCompanion(enc, in: dir.fd)
        let info = try DirectoryInfo.makeDirectory(in: dir.fd, entry: enc.entry, mode: 0o700, defaultClass: defaultClass, keyring: keyring)
        let fd = openat(dir.fd, enc.entry, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open new dir") }
        return CipherDir(fd: fd, info: info, path: StorePath.join(dir.path, enc.entry))
    }

    /// Creates a file and writes `contents` in `pieces` writes (exercises partial chunks).
    /// Returns the ciphertext path.
    @discardableResult
    func writeFile(_ name: String, _ contents: [UInt8], in dir: CipherDir, protectionClass: ProtectionClass? = nil,
                   pieces: Int = 1) throws -> String {
        let enc = names.encode(Array(name.utf8), in: dir.info)
        try NameCodec.writeCompanion(enc, in: dir.fd)
        let fd = openat(dir.fd, enc.entry, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.posix("create \(name)") }
        let f = try ContentFile.create(fd: fd, layout: layout, keyring: keyring,
                                       protectionClass: protectionClass ?? dir.info.defaultClass)
        defer { f.close() }
        let step = max(1, (contents.count + pieces - 1) / max(1, pieces))
        var off = 0
        while off < contents.count {
            let n = min(step, contents.count - off)
            _ = try contents.withUnsafeBytes { try f.write(from: $0.baseAddress! + off, count: n, offset: UInt64(off)) }
            off += n
        }
        return StorePath.join(dir.path, enc.entry)
    }

    @discardableResult
    /// `root`: the tree's root, where a long target's companion goes (default: `dir`).
    func symlink(_ name: String, target: String, in dir: CipherDir, root: CipherDir? = nil) throws -> String {
        let enc = names.encode(Array(name.utf8), in: dir.info)
        try NameCodec.writeCompanion(enc, in: dir.fd)
        let stored = try LinkTarget.seal(Array(target.utf8), keyring: keyring)
        try LinkTarget.writeCompanion(stored, rootFD: (root ?? dir).fd)
        guard symlinkat(stored.symlink, dir.fd, enc.entry) == 0 else { throw StoreError.posix("symlink") }
        return StorePath.join(dir.path, enc.entry)
    }

    /// Sets an extended attribute on an existing ciphertext file or directory.
    func setXattr(_ name: String, _ value: [UInt8], onCiphertext path: String) throws {
        let stored = xattrs.storedName(Array(name.utf8))
        let sealed = xattrs.sealValue(value, storedName: stored)
        guard Xattr.set(path, stored, sealed) == 0 else { throw StoreError.posix("setxattr") }
    }
}

/// What a tree holds, in plaintext.
struct PlainTree: Equatable {
    var files: [String: [UInt8]] = [:]
    var classes: [String: ProtectionClass] = [:]
    var directories: Set<String> = []
    var symlinks: [String: [UInt8]] = [:]
    var xattrs: [String: [String: [UInt8]]] = [:]
}

/// Decrypts a whole ciphertext tree. Xattrs come from the file system, or from a sidecar
/// map (ciphertext path relative to the root -> stored name -> sealed value) for trees
/// kept in git, which does not store xattrs.
struct TreeReader {
    let keyring: UserKeyring
    let layout: ChunkLayout
    var sidecarXattrs: [String: [String: [UInt8]]]? = nil

    func read(root: String) throws -> PlainTree {
        var tree = PlainTree()
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(root)") }
        let dir = CipherDir(fd: fd, info: try DirectoryInfo.read(dirfd: fd, keyring: keyring), path: root)
        try walk(dir, plain: "", cipherRel: "", rootFD: fd, into: &tree)
        return tree
    }

    static func entries(of dirfd: Int32) -> [String] {
        let d = fdopendir(dup(dirfd))!
        defer { closedir(d) }
        var out = [String]()
        while let e = readdir(d) {
            let name = DirectoryEntryName.string(e)
            out.append(name)
        }
        return out.sorted()
    }

    private func walk(_ dir: CipherDir, plain: String, cipherRel: String, rootFD: Int32, into tree: inout PlainTree) throws {
        let codec = NameCodec(keyring: keyring)
        for entry in TreeReader.entries(of: dir.fd) where !NameCodec.isInternal(entry) {
            let name = try codec.decode(entry: entry, in: dir.info, dirfd: dir.fd)
            let p = Fixture.join(plain, name)
            let rel = cipherRel.isEmpty ? entry : cipherRel + "/" + entry
            let full = StorePath.join(dir.path, entry)
            var st = stat()
            guard fstatat(dir.fd, entry, &st, AT_SYMLINK_NOFOLLOW) == 0 else { throw StoreError.posix("stat") }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                tree.directories.insert(p)
                let fd = openat(dir.fd, entry, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                guard fd >= 0 else { throw StoreError.posix("open dir") }
                let child = CipherDir(fd: fd, info: try DirectoryInfo.read(dirfd: fd, keyring: keyring), path: full)
                try readXattrs(cipherRel: rel, full: full, plain: p, into: &tree)
                try walk(child, plain: p, cipherRel: rel, rootFD: rootFD, into: &tree)
            case S_IFLNK:
                var buf = [UInt8](repeating: 0, count: 4096)
                let n = readlinkat(dir.fd, entry, &buf, buf.count)
                guard n >= 0 else { throw StoreError.posix("readlink") }
                tree.symlinks[p] = try LinkTarget.open(Array(buf[0..<n]), keyring: keyring, rootFD: rootFD)
            case S_IFREG:
                let fd = openat(dir.fd, entry, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { throw StoreError.posix("open file") }
                let f = try ContentFile(fd: fd, layout: layout, keyring: keyring, displayPath: p,
                                        holeMaps: HoleMapStore(rootFD: rootFD))
                defer { f.close() }
                let size = Int(try f.size())
                var data = [UInt8](repeating: 0, count: size)
                let got = try data.withUnsafeMutableBytes { try f.read(into: $0.baseAddress!, count: size, offset: 0) }
                XCTAssertEqual(got, size, p)
                tree.files[p] = data
                tree.classes[p] = f.protectionClass
                try readXattrs(cipherRel: rel, full: full, plain: p, into: &tree)
            default:
                XCTFail("unexpected file type at \(p)")
            }
        }
    }

    private func readXattrs(cipherRel: String, full: String, plain: String, into tree: inout PlainTree) throws {
        let codec = XattrCodec(keyring: keyring)
        let stored = try sidecarXattrs.map { $0[cipherRel] ?? [:] } ?? TreeReader.storedXattrs(full)
        var values: [String: [UInt8]] = [:]
        for (name, sealed) in stored {
            guard let plainName = codec.plainName(name) else { continue }
            values[String(decoding: plainName, as: UTF8.self)] = try codec.openValue(sealed, storedName: name)
        }
        if !values.isEmpty { tree.xattrs[plain] = values }
    }

    /// The raw extended attributes of a ciphertext path (not following symlinks).
    static func storedXattrs(_ path: String) throws -> [String: [UInt8]] {
        let size = Xattr.list(path, nil, 0)
        guard size >= 0 else { throw StoreError.posix("listxattr") }
        if size == 0 { return [:] }
        var list = [CChar](repeating: 0, count: size)
        let n = Xattr.list(path, &list, size)
        guard n >= 0 else { throw StoreError.posix("listxattr") }
        var out: [String: [UInt8]] = [:]
        for raw in list[0..<n].split(separator: 0) {
            let name = String(decoding: raw.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let vsize = Xattr.get(path, name, nil, 0)
            guard vsize >= 0 else { throw StoreError.posix("getxattr") }
            var value = [UInt8](repeating: 0, count: vsize)
            let got = Xattr.get(path, name, &value, vsize)
            guard got >= 0 else { throw StoreError.posix("getxattr") }
            out[name] = Array(value[0..<got])
        }
        return out
    }
}

/// Compares two trees item by item (contents by digest, so a failure prints readably).
func assertTreesEqual(_ got: PlainTree, _ expected: PlainTree, _ label: String,
                      file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(Set(got.files.keys), Set(expected.files.keys), "\(label): file paths", file: file, line: line)
    for (p, data) in expected.files where got.files[p] != nil {
        XCTAssertEqual(got.files[p]!.count, data.count, "\(label): size of \(p)", file: file, line: line)
        XCTAssertEqual(Fixture.sha256(got.files[p]!), Fixture.sha256(data), "\(label): contents of \(p)", file: file, line: line)
    }
    XCTAssertEqual(got.classes, expected.classes, "\(label): classes", file: file, line: line)
    XCTAssertEqual(got.directories, expected.directories, "\(label): directories", file: file, line: line)
    XCTAssertEqual(got.symlinks, expected.symlinks, "\(label): symlinks", file: file, line: line)
    XCTAssertEqual(got.xattrs, expected.xattrs, "\(label): xattrs", file: file, line: line)
}

final class VectorTreeTests: XCTestCase {
    /// The writer and reader agree on a tree with every kind of object, for both ciphers,
    /// including files written in many small pieces.
    func testTreeRoundTrip() throws {
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let root = Fixture.tempDir(self) + "/tree"
            let keyring = try Fixture.randomKeyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: 4096)
            let w = TreeWriter(keyring: keyring, layout: layout)
            let r = try w.makeRoot(at: root)
            var rng = SeededGenerator(seed: 99)
            var expected = PlainTree()
            let big = rng.bytes(3 * 4096 + 77)
            let bigPath = try w.writeFile("big.bin", big, in: r, pieces: 13)
            expected.files["big.bin"] = big; expected.classes["big.bin"] = .complete
            try w.setXattr("user.note", Array("hello".utf8), onCiphertext: bigPath)
            expected.xattrs["big.bin"] = ["user.note": Array("hello".utf8)]
            let sub = try w.mkdir("sub", in: r, defaultClass: .none)
            expected.directories.insert("sub")
            let longName = String(repeating: "é", count: 120)   // 240 bytes: a long name
            try w.writeFile(longName, [1, 2, 3], in: sub)
            expected.files["sub/" + longName] = [1, 2, 3]; expected.classes["sub/" + longName] = ProtectionClass.none
            try w.symlink("link", target: "../big.bin", in: sub)
            expected.symlinks["sub/link"] = Array("../big.bin".utf8)
            assertTreesEqual(try TreeReader(keyring: keyring, layout: layout).read(root: root), expected, "\(cipher)")
        }
    }
}

extension Fixture {
    static func createContent(at path: String, layout: ChunkLayout, keyring: UserKeyring,
                              protectionClass: ProtectionClass = .complete) throws -> ContentFile {
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.posix("create \(path)") }
        do { return try ContentFile.create(fd: fd, layout: layout, keyring: keyring, protectionClass: protectionClass) }
        catch { close(fd); throw error }
    }

    static func openContent(at path: String, layout: ChunkLayout, keyring: UserKeyring) throws -> ContentFile {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError.posix("open \(path)") }
        do { return try ContentFile(fd: fd, layout: layout, keyring: keyring, displayPath: path) }
        catch { close(fd); throw error }
    }

    static func fileSize(_ path: String) -> UInt64 {
        var st = stat()
        precondition(stat(path, &st) == 0)
        return UInt64(st.st_size)
    }
}

extension ContentFile {
    /// Reads `count` bytes at `offset` (fewer at EOF). On failure the error is rethrown after
    /// checking that the caller's buffer holds no bytes other than zeros (no partial plaintext).
    func readBytes(_ offset: UInt64, _ count: Int, file: StaticString = #filePath, line: UInt = #line) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        do {
            let n = try out.withUnsafeMutableBytes { try read(into: $0.baseAddress!, count: count, offset: offset) }
            return Array(out[0..<n])
        } catch {
            XCTAssertTrue(out.allSatisfy { $0 == 0 }, "a failed read left data in the caller's buffer", file: file, line: line)
            throw error
        }
    }

    func readAll() throws -> [UInt8] { try readBytes(0, Int(try size())) }

    func writeBytes(_ bytes: [UInt8], at offset: UInt64) throws {
        if bytes.isEmpty { _ = try write(from: UnsafeRawPointer(bitPattern: 1)!, count: 0, offset: offset); return }
        let n = try bytes.withUnsafeBytes { try write(from: $0.baseAddress!, count: bytes.count, offset: offset) }
        XCTAssertEqual(n, bytes.count)
    }
}

/// Asserts that `body` throws `StoreError.integrity` (any path and detail).
func XCTAssertIntegrityError<T>(_ body: @autoclosure () throws -> T, _ message: @autoclosure () -> String = "",
                                file: StaticString = #filePath, line: UInt = #line) {
    do {
        let v = try body()
        XCTFail("expected an integrity error, got a value \(v) \(message())", file: file, line: line)
    } catch let e as StoreError {
        guard case .integrity = e else {
            XCTFail("expected an integrity error, got \(e) \(message())", file: file, line: line); return
        }
    } catch {
        XCTFail("expected StoreError.integrity, got \(error) \(message())", file: file, line: line)
    }
}
