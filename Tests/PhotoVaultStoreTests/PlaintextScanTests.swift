import XCTest
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Nothing under a store contains a plaintext name, content, link target or xattr: every
/// byte of every file, every entry name, link target and xattr underneath is scanned.
final class PlaintextScanTests: XCTestCase {
    static let needles = ["PVNEEDLE-filename-alpha", "PVNEEDLE-dirname-beta", "PVNEEDLE-longname-gamma",
                          "PVNEEDLE-Ünicode-δelta", "PVNEEDLE-content-epsilon", "PVNEEDLE-linktarget-zeta",
                          "PVNEEDLE-xattrname-eta", "PVNEEDLE-xattrvalue-theta", "PVNEEDLE-bigfile-iota"]

    struct Scan {
        var hits: [String] = []
        var filesRead = 0, namesSeen = 0, linksRead = 0, xattrsRead = 0, bytesRead = 0
    }

    private static func contains(_ hay: [UInt8], _ needle: [UInt8]) -> Bool {
        guard hay.count >= needle.count, !needle.isEmpty else { return false }
        let first = needle[0]
        var i = 0
        while i <= hay.count - needle.count {
            if hay[i] == first && Array(hay[i..<(i + needle.count)]) == needle { return true }
            i += 1
        }
        return false
    }

    /// Recursive scan of `path`, without following symlinks.
    static func scan(_ path: String, needles: [[UInt8]], into s: inout Scan) {
        func check(_ bytes: [UInt8], _ what: String) {
            for n in needles where contains(bytes, n) { s.hits.append("\(what) contains \(String(decoding: n, as: UTF8.self))") }
        }
        for (name, value) in (try? TreeReader.storedXattrs(path)) ?? [:] {
            s.xattrsRead += 1
            check(Array(name.utf8), "xattr name on \(path)")
            check(value, "xattr value on \(path)")
        }
        var st = stat()
        guard lstat(path, &st) == 0 else { s.hits.append("cannot stat \(path)"); return }
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(fd) }
            for entry in TreeReader.entries(of: fd) where entry != "." && entry != ".." {
                s.namesSeen += 1
                check(Array(entry.utf8), "entry name in \(path)")
                scan(StorePath.join(path, entry), needles: needles, into: &s)
            }
        case S_IFLNK:
            var buf = [UInt8](repeating: 0, count: 4096)
            let n = readlink(path, &buf, buf.count)
            s.linksRead += 1
            check(Array(buf[0..<max(0, n)]), "link target of \(path)")
        case S_IFREG:
            let data = Fixture.readFile(path)
            s.filesRead += 1
            s.bytesRead += data.count
            check(data, "contents of \(path)")
        default:
            s.hits.append("unexpected file type at \(path)")
        }
    }

    private func writePlaintextTree(with w: TreeWriter, root: CipherDir) throws {
        let n = Self.needles
        let content = Array(String(repeating: n[4] + " ", count: 400).utf8)   // ~10 KB, crosses chunks
        let filePath = try w.writeFile(n[0] + ".jpg", content, in: root, pieces: 7)
        let dir = try w.mkdir(n[1], in: root)
        try w.writeFile(n[2] + String(repeating: "-long", count: 40), content, in: dir)   // long name
        try w.mkdir(n[2] + String(repeating: "-dir", count: 50), in: dir)                 // long directory name
        try w.writeFile(n[3] + ".txt", Array(n[3].utf8), in: dir, protectionClass: .completeUnlessOpen)
        try w.symlink("link-" + n[0], target: "/home/alice/" + n[5], in: root)
        try w.setXattr("user." + n[6], Array(n[7].utf8), onCiphertext: filePath)
        try w.setXattr("user." + n[6], Array(n[7].utf8), onCiphertext: dir.path)
        let big = Array(String(repeating: n[8], count: 10_000).utf8)   // ~210 KB, many chunks
        try w.writeFile("big-" + n[8], big, in: dir, protectionClass: .none)
    }

    func testNoPlaintextAnywhereInTheStore() throws {
        let needles = Self.needles.map { Array($0.utf8) } + [Array("PVNEEDLE".utf8)]
        for cipher in ContentCipher.allCases where cipher.isAvailable {
            let store = StoreLayout(root: Fixture.tempDir(self) + "/store")
            let config = StoreConfig(cipher: cipher, chunkSize: 4096)
            try store.initialise(config: config)
            let treeRoot = store.userTree(SecureRandom.bytes(16))
            let keyring = try Fixture.randomKeyring()
            let w = TreeWriter(keyring: keyring, layout: config.layout)
            let root = try w.makeRoot(at: treeRoot)
            try writePlaintextTree(with: w, root: root)

            var s = Scan()
            Self.scan(store.root, needles: needles, into: &s)
            XCTAssertEqual(s.hits, [], "\(cipher)")
            // The scan really looked at everything that was written.
            XCTAssertGreaterThanOrEqual(s.filesRead, 9, "\(cipher): config, .pvdirs, companions, files")
            XCTAssertGreaterThan(s.bytesRead, 200_000)
            XCTAssertEqual(s.linksRead, 1)
            XCTAssertEqual(s.xattrsRead, 2)
            XCTAssertGreaterThanOrEqual(s.namesSeen, 12)

            // And the tree decrypts back to the needles (the scan is not vacuous).
            let plain = try TreeReader(keyring: keyring, layout: config.layout).read(root: treeRoot)
            XCTAssertEqual(plain.symlinks["link-" + Self.needles[0]], Array(("/home/alice/" + Self.needles[5]).utf8))
            XCTAssertEqual(plain.xattrs[Self.needles[1]]?["user." + Self.needles[6]], Array(Self.needles[7].utf8))
            XCTAssertEqual(plain.files.count, 4)
        }
    }

    func testScannerFindsPlaintextWhenItIsThere() throws {
        // Control: the same scan over a plain directory does report the needles.
        let dir = Fixture.tempDir(self)
        Fixture.writeFile(dir + "/" + Self.needles[0], Array("x PVNEEDLE-content-epsilon y".utf8))
        XCTAssertEqual(symlink("/tmp/" + Self.needles[5], dir + "/l"), 0)
        XCTAssertEqual(Xattr.set(dir + "/" + Self.needles[0], "user.x", Array(Self.needles[7].utf8)), 0)
        var s = Scan()
        Self.scan(dir, needles: Self.needles.map { Array($0.utf8) }, into: &s)
        XCTAssertEqual(s.hits.count, 4, "\(s.hits)")
    }
}
