import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// The fixed vectors in `Vectors/`: a small tree per cipher, written once with the known
/// master key (bytes 0...31) and chunk size 4096, committed, and decrypted on every test run
/// so the on-disk format cannot change unnoticed.
///
///   Vectors/<cipher>/tree/          the ciphertext tree root (as `users/<id>/` in a store)
///   Vectors/<cipher>/xattrs.json    its extended attributes (git does not store xattrs):
///                                   ciphertext path -> stored name -> base64url(stored value)
///   Vectors/<cipher>/expected.json  the plaintext: files (size, sha256, class), directories,
///                                   symlink targets, xattrs
///
/// Regenerate (only when the format changes on purpose, with FORMAT.md):
///   PHOTOVAULT_REGENERATE_VECTORS=1 swift test --filter VectorGeneratorTests
enum VectorGenerator {
    static let chunkSize = 4096

    static func directoryName(_ c: ContentCipher) -> String { c == .aes256gcm ? "aes256gcm" : "xchacha20poly1305" }

    struct Expected: Codable, Equatable {
        struct File: Codable, Equatable { var size: Int; var sha256: String; var protectionClass: String }
        var cipher: String
        var chunkSize: Int
        var masterKeyHex: String
        var files: [String: File]
        var directories: [String]
        var symlinks: [String: String]
        var xattrs: [String: [String: String]]
    }

    /// A symlink target too long for the symlink itself (over 727 bytes): kept in a
    /// companion in the tree's root (FORMAT.md section 8), from a symlink in a subdirectory.
    static let longLinkTarget = "../" + String(repeating: "long-target/", count: 100) + "photo.jpg"

    /// Adds the long symlink to vectors generated before it existed (kept so the committed
    /// trees stay the ones older builds wrote): PHOTOVAULT_ADD_LONG_LINK_VECTOR=1.
    static func addLongLink(into vectors: String) throws {
        for cipher in ContentCipher.allCases {
            let dir = StorePath.join(vectors, directoryName(cipher))
            let keyring = try Fixture.keyring()
            let w = TreeWriter(keyring: keyring, layout: ChunkLayout(cipher: cipher, chunkSize: chunkSize))
            let treePath = StorePath.join(dir, "tree")
            let rfd = open(treePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            let root = CipherDir(fd: rfd, info: try DirectoryInfo.read(dirfd: rfd, keyring: keyring), path: treePath)
            let albumEntry = w.names.encode(Array("Album 2024".utf8), in: root.info).entry
            let afd = openat(rfd, albumEntry, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            let album = CipherDir(fd: afd, info: try DirectoryInfo.read(dirfd: afd, keyring: keyring), path: StorePath.join(treePath, albumEntry))
            try w.symlink("long-link", target: longLinkTarget, in: album, root: root)
            let path = StorePath.join(dir, "expected.json")
            var expected = try JSONDecoder().decode(Expected.self, from: Data(Fixture.readFile(path)))
            expected.symlinks["Album 2024/long-link"] = longLinkTarget
            try writeJSON(expected, to: path)
        }
    }

    /// The sparse file of header version 2 (FORMAT.md section 5, "Holes"): six chunks less
    /// 1,000 bytes of `pattern(seed: 6)`, whose chunks 1, 2 and 3 were punched. Git keeps
    /// the punched slots as zeros (not sparse), which is how a hole reads underneath anyway.
    static let sparseName = "sparse.bin"
    static var sparseContents: [UInt8] {
        var d = pattern(6 * chunkSize - 1000, seed: 6)
        d.replaceSubrange(chunkSize..<(4 * chunkSize), with: [UInt8](repeating: 0, count: 3 * chunkSize))
        return d
    }

    /// Adds the sparse file to vectors generated before version 2 existed (the committed
    /// trees stay the ones older builds wrote): PHOTOVAULT_ADD_SPARSE_VECTOR=1.
    static func addSparseFile(into vectors: String) throws {
        for cipher in ContentCipher.allCases {
            let dir = StorePath.join(vectors, directoryName(cipher))
            let keyring = try Fixture.keyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: chunkSize)
            let w = TreeWriter(keyring: keyring, layout: layout)
            let treePath = StorePath.join(dir, "tree")
            let rfd = open(treePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(rfd) }
            let root = CipherDir(fd: rfd, info: try DirectoryInfo.read(dirfd: rfd, keyring: keyring), path: treePath)
            let data = pattern(6 * chunkSize - 1000, seed: 6)
            let cpath = try w.writeFile(sparseName, data, in: root, protectionClass: ProtectionClass.none)
            let fd = open(cpath, O_RDWR | O_CLOEXEC)
            let f = try ContentFile(fd: fd, layout: layout, keyring: keyring, holeMaps: HoleMapStore(rootFD: rfd))
            try f.zeroRange(offset: UInt64(chunkSize), length: UInt64(3 * chunkSize), keepSize: true)
            f.close()
            let path = StorePath.join(dir, "expected.json")
            var expected = try JSONDecoder().decode(Expected.self, from: Data(Fixture.readFile(path)))
            expected.files[sparseName] = Expected.File(size: data.count, sha256: Fixture.sha256(sparseContents), protectionClass: ProtectionClass.none.name)
            try writeJSON(expected, to: path)
        }
    }

    /// Deterministic file contents (no secrets, easy to recreate by hand).
    static func pattern(_ n: Int, seed: UInt8) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) } }

    static func generate(into vectors: String) throws {
        for cipher in ContentCipher.allCases {
            let dir = StorePath.join(vectors, directoryName(cipher))
            Fixture.removeTree(dir)
            guard mkdir(dir, 0o755) == 0 else { throw StoreError.posix("mkdir \(dir)") }
            let keyring = try Fixture.keyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: chunkSize)
            let w = TreeWriter(keyring: keyring, layout: layout)
            let treePath = StorePath.join(dir, "tree")
            let root = try w.makeRoot(at: treePath)
            var files: [String: (data: [UInt8], cls: ProtectionClass)] = [:]
            func file(_ name: String, _ data: [UInt8], _ cls: ProtectionClass, in d: CipherDir, prefix: String = "") throws -> String {
                files[prefix + name] = (data, cls)
                return try w.writeFile(name, data, in: d, protectionClass: cls, pieces: 3)
            }
            try file("empty", [], .complete, in: root)
            let oneByte = try file("one-byte.txt", [0x41], .untilFirstAuth, in: root)
            try file("one-chunk.bin", pattern(chunkSize, seed: 1), .none, in: root)
            try file("two-and-a-half-chunks.bin", pattern(chunkSize * 5 / 2, seed: 2), .completeUnlessOpen, in: root)
            let album = try w.mkdir("Album 2024", in: root, defaultClass: .none)
            let longDirName = "A directory whose name is long enough to need the long-name scheme: "
                + String(repeating: "ü", count: 60)
            let longDir = try w.mkdir(longDirName, in: album)
            try file("photo.jpg", pattern(300, seed: 3), .complete, in: longDir, prefix: "Album 2024/\(longDirName)/")
            let longFileName = String(repeating: "Long file name ", count: 16) + ".txt"   // 244 bytes
            try file(longFileName, Array("long-named file\n".utf8), .none, in: album, prefix: "Album 2024/")
            try w.symlink("latest", target: "Album 2024/\(longDirName)/photo.jpg", in: root)
            try w.symlink("long-link", target: longLinkTarget, in: album, root: root)
            let xattrValues: [(String, String, String)] = [(oneByte, "one-byte.txt", "user.comment"), (album.path, "Album 2024", "user.xdg.tags")]
            for (cpath, _, name) in xattrValues { try w.setXattr(name, Array("value of \(name)".utf8), onCiphertext: cpath) }

            // Sidecar of the raw xattrs, then drop the real ones (git would anyway).
            var sidecar: [String: [String: String]] = [:]
            for (cpath, _, _) in xattrValues {
                let rel = String(cpath.dropFirst(treePath.count + 1))
                for (stored, value) in try TreeReader.storedXattrs(cpath) where stored.hasPrefix(XattrCodec.storedPrefix) {
                    sidecar[rel, default: [:]][stored] = Base64URL.encode(value)
                    _ = Xattr.remove(cpath, stored)
                }
            }
            try writeJSON(sidecar, to: StorePath.join(dir, "xattrs.json"))

            let expected = Expected(
                cipher: cipher.name, chunkSize: chunkSize, masterKeyHex: Base64Hex.hex(Fixture.knownMasterKey),
                files: files.mapValues { Expected.File(size: $0.data.count, sha256: Fixture.sha256($0.data), protectionClass: $0.cls.name) },
                directories: ["Album 2024", "Album 2024/\(longDirName)"],
                symlinks: ["latest": "Album 2024/\(longDirName)/photo.jpg", "Album 2024/long-link": longLinkTarget],
                xattrs: Dictionary(uniqueKeysWithValues: xattrValues.map { ($0.1, [$0.2: "value of \($0.2)"]) }))
            try writeJSON(expected, to: StorePath.join(dir, "expected.json"))
        }
    }

    static func writeJSON<T: Encodable>(_ value: T, to path: String) throws {
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        Fixture.writeFile(path, Array(try enc.encode(value)) + [10])
    }

    /// Decrypts the committed vectors of one cipher and returns what was found and expected.
    static func decode(_ dir: String, masterKey: [UInt8] = Fixture.knownMasterKey) throws -> (PlainTree, Expected) {
        let expected = try JSONDecoder().decode(Expected.self, from: Data(Fixture.readFile(StorePath.join(dir, "expected.json"))))
        let sidecarText = try JSONDecoder().decode([String: [String: String]].self,
                                                   from: Data(Fixture.readFile(StorePath.join(dir, "xattrs.json"))))
        let sidecar = sidecarText.mapValues { $0.mapValues { Base64URL.decode($0) ?? [] } }
        guard let cipher = ContentCipher(name: expected.cipher) else { throw StoreError.corruptStore("cipher \(expected.cipher)") }
        let reader = TreeReader(keyring: try Fixture.keyring(masterKey), layout: ChunkLayout(cipher: cipher, chunkSize: expected.chunkSize),
                                sidecarXattrs: sidecar)
        return (try reader.read(root: StorePath.join(dir, "tree")), expected)
    }
}

final class VectorGeneratorTests: XCTestCase {
    private var sourceVectors: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Vectors").path
    }

    private var bundledVectors: String? {
        Bundle.module.url(forResource: "Vectors", withExtension: nil)?.path
    }

    /// Regenerates the vectors when asked to; otherwise (and afterwards) decrypts them.
    func testCommittedVectorsDecrypt() throws {
        if ProcessInfo.processInfo.environment["PHOTOVAULT_REGENERATE_VECTORS"] == "1" {
            try VectorGenerator.generate(into: sourceVectors)
        }
        if ProcessInfo.processInfo.environment["PHOTOVAULT_ADD_LONG_LINK_VECTOR"] == "1" {
            try VectorGenerator.addLongLink(into: sourceVectors)
        }
        if ProcessInfo.processInfo.environment["PHOTOVAULT_ADD_SPARSE_VECTOR"] == "1" {
            try VectorGenerator.addSparseFile(into: sourceVectors)
        }
        let base = try XCTUnwrap(bundledVectors, "Vectors resource missing from the test bundle")
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            // Freshly regenerated vectors are checked from the source tree (the bundle copy is older).
            let env = ProcessInfo.processInfo.environment
            let root = ["PHOTOVAULT_REGENERATE_VECTORS", "PHOTOVAULT_ADD_LONG_LINK_VECTOR", "PHOTOVAULT_ADD_SPARSE_VECTOR"]
                .contains { env[$0] == "1" } ? sourceVectors : base
            let dir = StorePath.join(root, VectorGenerator.directoryName(cipher))
            let (tree, expected) = try VectorGenerator.decode(dir)
            XCTAssertEqual(expected.cipher, cipher.name)
            XCTAssertEqual(expected.masterKeyHex, Base64Hex.hex(Fixture.knownMasterKey))
            XCTAssertEqual(expected.files.count, 7, "\(cipher): the vectors hold seven files")
            XCTAssertEqual(Set(tree.files.keys), Set(expected.files.keys), "\(cipher)")
            for (path, e) in expected.files {
                guard let data = tree.files[path] else { continue }
                XCTAssertEqual(data.count, e.size, "\(cipher) \(path)")
                XCTAssertEqual(Fixture.sha256(data), e.sha256, "\(cipher) \(path)")
                XCTAssertEqual(tree.classes[path]?.name, e.protectionClass, "\(cipher) \(path)")
            }
            XCTAssertEqual(tree.directories, Set(expected.directories), "\(cipher)")
            XCTAssertEqual(tree.symlinks.mapValues { String(decoding: $0, as: UTF8.self) }, expected.symlinks, "\(cipher)")
            XCTAssertEqual(tree.xattrs.mapValues { $0.mapValues { String(decoding: $0, as: UTF8.self) } }, expected.xattrs, "\(cipher)")
        }
    }

    /// The sparse file is header version 2 with its hole map in the tree's root, and its
    /// punched chunks read as zeros only through that map: without it they are damage.
    func testSparseVectorIsVersionTwoWithAMap() throws {
        let base = try XCTUnwrap(bundledVectors)
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let treePath = StorePath.join(StorePath.join(base, VectorGenerator.directoryName(cipher)), "tree")
            let keyring = try Fixture.keyring()
            let layout = ChunkLayout(cipher: cipher, chunkSize: VectorGenerator.chunkSize)
            let rfd = open(treePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(rfd) }
            let info = try DirectoryInfo.read(dirfd: rfd, keyring: keyring)
            let entry = NameCodec(keyring: keyring).encode(Array(VectorGenerator.sparseName.utf8), in: info).entry
            let cpath = StorePath.join(treePath, entry)
            let header = try FileHeader.parse(Array(Fixture.readFile(cpath)[0..<FileHeader.size]))
            XCTAssertEqual(header.version, 2, "\(cipher)")
            XCTAssertTrue(FileManager.default.fileExists(atPath: StorePath.join(treePath, HoleMapFile.name(fileID: header.fileID))))
            let f = try ContentFile(fd: open(cpath, O_RDONLY | O_CLOEXEC), layout: layout, keyring: keyring, holeMaps: HoleMapStore(rootFD: rfd))
            XCTAssertEqual(f.holeMap.ranges, [1..<4], "\(cipher)")
            f.close()
            let g = try ContentFile(fd: open(cpath, O_RDONLY | O_CLOEXEC), layout: layout, keyring: keyring)
            defer { g.close() }
            var buf = [UInt8](repeating: 0, count: VectorGenerator.chunkSize)
            XCTAssertIntegrityError(try buf.withUnsafeMutableBytes { try g.read(into: $0.baseAddress!, count: $0.count, offset: UInt64(2 * VectorGenerator.chunkSize)) })
        }
    }

    /// The vectors depend on the key: another master key cannot read even the root.
    func testVectorsNeedTheKnownKey() throws {
        let base = try XCTUnwrap(bundledVectors)
        let dir = StorePath.join(base, VectorGenerator.directoryName(.xchacha20poly1305))
        XCTAssertIntegrityError(try VectorGenerator.decode(dir, masterKey: [UInt8](repeating: 7, count: 32)))
    }

    /// The vectors stay small (the issue asks for < 200 KB) and hold every kind of entry.
    func testVectorsAreSmallAndComplete() throws {
        let base = try XCTUnwrap(bundledVectors)
        var s = PlaintextScanTests.Scan()
        PlaintextScanTests.scan(base, needles: [], into: &s)
        XCTAssertLessThan(s.bytesRead, 200_000)
        XCTAssertEqual(s.linksRead, 4, "two symlinks per cipher (one keeps its target in a companion)")
        XCTAssertGreaterThan(s.filesRead, 20)
    }
}
