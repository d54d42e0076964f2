import Foundation
import XCTest

/// Symlink targets up to 4,095 bytes on every store file system (issue 34, item 5): one
/// whose stored form does not fit a symlink on the smallest (1,023 bytes: ext2/3/4 with 1 KiB
/// blocks, XFS) is kept in a companion in the tree's root (FORMAT.md section 8).
final class MountLongSymlinkTests: XCTestCase {
    private static let lengths = [1, 727, 728, 1000, 3000, 4095]

    private static func target(_ n: Int) -> String {
        var bytes: [UInt8] = []
        for i in 0..<n { bytes.append(i % 50 == 49 ? 0x2f : UInt8(0x61 + i % 26)) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Companions in the tree's root underneath.
    private func companions(_ sb: Sandbox) -> Int {
        Int(sb.ok("find \(Sandbox.quote(sb.store))/users -maxdepth 2 -name '~*.link' | wc -l")
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// A store on a 16 MiB ext2 with 1 KiB blocks, whose symlinks hold at most 1,023 bytes:
    /// targets of 728 bytes and more used to fail with ENAMETOOLONG (and 3,001 on any store).
    /// Every length reads back exactly, through the mount, after a remount, after a rename
    /// into another directory, and through tar and offline export; companions go with the
    /// symlink's last link (unlink, rename over it) and never hold plaintext.
    func testTargetsUpTo4095BytesOnAStoreWithOneKiBBlocks() {
        let sb = Sandbox("pv-longlink")
        let release = sb.storeOnOwnFilesystem(size: "16m", .ext2)
        defer { release() }
        XCTAssertEqual(sb.ok("stat -f -c %S \(Sandbox.quote(sb.store))"), "1024\n", "the store needs 1 KiB blocks")
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/a \(q)/b")
        for n in Self.lengths {
            sb.ok("ln -s \(Sandbox.quote(Self.target(n))) \(q)/a/l\(n)")
        }
        func check(_ dir: String, _ label: String, lengths: [Int] = Self.lengths, file: StaticString = #filePath, line: UInt = #line) {
            for n in lengths {
                XCTAssertEqual(sb.ok("readlink \(Sandbox.quote(dir))/l\(n) && stat -c %s \(Sandbox.quote(dir))/l\(n)", file: file, line: line),
                               Self.target(n) + "\n\(n)\n", "\(label): l\(n)", file: file, line: line)
            }
        }
        check(mp + "/a", "written")
        XCTAssertEqual(companions(sb), 4, "targets over 727 bytes keep a companion")
        mp = sb.remount(mp)
        check(mp + "/a", "after a remount")
        // A rename into another directory and a hard link: the companion stays valid.
        sb.ok("mv \(q)/a/l* \(q)/b/ && ln \(q)/b/l4095 \(q)/a/hard4095")
        check(mp + "/b", "renamed")
        XCTAssertEqual(sb.ok("readlink \(q)/a/hard4095"), Self.target(4095) + "\n")
        // tar and cp -a round trips out of the mount and back in.
        let out = sb.plainDir("out")
        sb.ok("tar -C \(q)/b -cf - . | tar -C \(Sandbox.quote(out)) -xf - && cp -a \(Sandbox.quote(out)) \(q)/c")
        check(out, "tar out")
        check(mp + "/c", "cp -a back in")
        XCTAssertEqual(companions(sb), 8)
        // Unlinking one of two links keeps the companion; the last one takes it.
        sb.ok("rm \(q)/b/l4095")
        XCTAssertEqual(sb.ok("readlink \(q)/a/hard4095"), Self.target(4095) + "\n")
        XCTAssertEqual(companions(sb), 8)
        sb.ok("rm \(q)/a/hard4095")
        XCTAssertEqual(companions(sb), 7)
        // A rename over a long symlink takes its companion; an exchange keeps both.
        sb.ok("mv -T \(q)/c/l1 \(q)/c/l3000")
        XCTAssertEqual(companions(sb), 6)
        sb.ok("mv --exchange \(q)/c/l728 \(q)/c/l1000 2>/dev/null || python3 -c 'import ctypes,os,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(l.renameat2(-100,sys.argv[1].encode(),-100,sys.argv[2].encode(),2))' \(q)/c/l728 \(q)/c/l1000")
        XCTAssertEqual(sb.ok("readlink \(q)/c/l728 | wc -c"), "1001\n")
        XCTAssertEqual(companions(sb), 6)
        sb.ok("rm -r \(q)/c")
        XCTAssertEqual(companions(sb), 3)
        sb.unmount(mp)
        // Offline: fsck is clean, export gives the targets back, import takes them.
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
        let exported = sb.plainDir("exported")
        let ex = OfflineCommandTests.pv(sb, ["export", "/b", exported])
        XCTAssertEqual(ex.status, 0, ex.stderr)
        check(exported + "/b", "exported", lengths: Self.lengths.filter { $0 != 4095 })   // b/l4095 was removed
        let im = OfflineCommandTests.pv(sb, ["import", out, "/imported"])
        XCTAssertEqual(im.status, 0, im.stderr)
        XCTAssertEqual(companions(sb), 7)
        mp = sb.mount()
        check(mp + "/imported/out", "imported offline")
        sb.unmount(mp)
        sb.assertNoPlaintext([Self.target(4095), Self.target(1000), "abcdefghijklmnopqrstuvwxyz"])
        // A companion no symlink names (a crash between the two) is reported and repaired.
        let orphan = "~" + String(repeating: "A", count: 43) + ".link"
        sb.ok("cd \(Sandbox.quote(sb.store))/users/* && cp \"$(ls -d ./~*.link | head -1)\" ./\(orphan)")
        let found = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(found.status, 21, found.stdout + found.stderr)
        XCTAssertTrue((found.stdout + found.stderr).contains(orphan), found.stdout + found.stderr)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck", "--repair"]).status, 21, "found, as for any problem")
        XCTAssertEqual(companions(sb), 7)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0)
    }
}
