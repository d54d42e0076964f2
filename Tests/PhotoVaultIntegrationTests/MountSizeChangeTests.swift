import Foundation
import XCTest

/// Size changes the store's file system cannot take (issue 34, item 3): a size beyond its
/// largest file is EFBIG at once, and a truncate, write or fallocate that fails for any
/// reason (ENOSPC included) leaves the file as it was: size, contents and times.
final class MountSizeChangeTests: XCTestCase {
    /// Plain copies of the test files, beside the store: "whole" (two full chunks), "partial"
    /// (a partial last chunk) and "empty" (no header yet underneath).
    private func makeFiles(_ sb: Sandbox, in mp: String) -> String {
        let plain = sb.plainDir("plain")
        let qp = Sandbox.quote(plain)
        sb.ok("head -c 8192 /dev/urandom > \(qp)/whole && head -c 10000 /dev/urandom > \(qp)/partial && : > \(qp)/empty")
        sb.ok("cp \(qp)/whole \(qp)/partial \(qp)/empty \(Sandbox.quote(mp))/ && touch -d '2001-02-03 04:05:06.789' \(Sandbox.quote(mp))/*")
        return plain
    }

    private static let names = ["whole", "partial", "empty"]

    /// Size, contents and modification time of every test file, and the ciphertext size of
    /// "empty" (0: still without a header).
    private func state(_ sb: Sandbox, _ mp: String, _ plain: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        let qm = Sandbox.quote(mp), qp = Sandbox.quote(plain)
        let emptyCipher = sb.ok("find \(Sandbox.quote(sb.store))/users -inum $(stat -c %i \(qm)/empty) -printf '%s'", file: file, line: line)
        return Self.names.map { n in
            sb.ok("stat -c '%s %y' \(qm)/\(n) && cmp \(qp)/\(n) \(qm)/\(n) && echo same", file: file, line: line)
        }.joined() + "empty ciphertext: \(emptyCipher)\n"
    }

    /// Runs `command` (with F replaced by each test file) and asserts it fails with `error`
    /// within `seconds`, changing nothing.
    private func assertRefused(_ sb: Sandbox, _ mp: String, _ plain: String, _ command: String, _ error: String,
                               within seconds: Double, file: StaticString = #filePath, line: UInt = #line) {
        let before = state(sb, mp, plain, file: file, line: line)
        for n in Self.names {
            let cmd = command.replacingOccurrences(of: "F", with: Sandbox.quote(mp + "/" + n))
            let start = Date()
            let r = sb.run(cmd, timeout: 120)
            let took = Date().timeIntervalSince(start)
            XCTAssertNotEqual(r.status, 0, "\(cmd) succeeded", file: file, line: line)
            XCTAssertTrue(r.stderr.contains(error), "\(cmd): \(r.stderr)", file: file, line: line)
            XCTAssertLessThan(took, seconds, "\(cmd) took \(took) s", file: file, line: line)
        }
        XCTAssertEqual(state(sb, mp, plain, file: file, line: line), before, "\(command) changed a file", file: file, line: line)
    }

    /// A truncate up and a write far past the end that the store could not hold as written
    /// zeros succeed as holes (FORMAT.md section 5) and cost it next to nothing; the old
    /// bytes stay, the rest reads as zeros.
    private func assertGrowthIsAHole(_ sb: Sandbox, _ mp: String, _ plain: String, to size: String, used: Int,
                                     file: StaticString = #filePath, line: UInt = #line) {
        let qm = Sandbox.quote(mp), qp = Sandbox.quote(plain)
        for n in Self.names {
            sb.ok("truncate -s \(size) \(qm)/\(n) && truncate -s \(size) \(qp)/\(n) && cmp \(qp)/\(n) \(qm)/\(n)", file: file, line: line)
            sb.ok("printf Y | dd of=\(qm)/\(n) bs=1 seek=\(size) conv=notrunc status=none && printf Y >> \(qp)/\(n)", file: file, line: line)
            sb.ok("cmp \(qp)/\(n) \(qm)/\(n)", file: file, line: line)
        }
        XCTAssertLessThanOrEqual(usedBlocks(sb) - used, 128, "holes must cost the store nothing", file: file, line: line)
    }

    private func usedBlocks(_ sb: Sandbox) -> Int {
        Int(sb.ok("df --output=used \(Sandbox.quote(sb.store)) | tail -1").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// A store on ext4 with 4 KiB blocks, whose largest file is 16 TiB - 4 KiB. pjdfstest's
    /// `truncate -s 999999999999999` used to write sealed zeros until the store was full
    /// (70 GB in 99 s on a large disk) and leave the file grown; it, a write that far out and
    /// fallocate are EFBIG at once now. So is 17.5 TB, which ext4 holds as a plain file but
    /// not as ciphertext (about 1 % larger): the limit is the store's, read from its kernel.
    func testSizesBeyondTheStoresFileSystemAreEFBIGAtOnce() {
        let sb = Sandbox("pv-efbig-ext4")
        let release = sb.storeOnOwnFilesystem(size: "64m", .ext4)
        defer { release() }
        sb.ok("truncate -s 17500000000000 \(Sandbox.quote(sb.store))/plain-probe && rm \(Sandbox.quote(sb.store))/plain-probe")
        sb.initStore()
        var mp = sb.mount()
        let plain = makeFiles(sb, in: mp)
        let initial = state(sb, mp, plain)
        let used = usedBlocks(sb)
        for size in ["999999999999999", "17500000000000"] {
            assertRefused(sb, mp, plain, "truncate -s \(size) F", "File too large", within: 5)
            assertRefused(sb, mp, plain, "fallocate -l \(size) F", "File too large", within: 5)
            assertRefused(sb, mp, plain, "fallocate -n -l \(size) F", "File too large", within: 5)
        }
        assertRefused(sb, mp, plain, "printf Y | dd of=F bs=1 seek=999999999999999 conv=notrunc status=none",
                      "File too large", within: 5)
        XCTAssertLessThanOrEqual(usedBlocks(sb) - used, 64, "the store grew")
        mp = sb.remount(mp)
        XCTAssertEqual(state(sb, mp, plain), initial)
        // What fits still works.
        sb.ok("truncate -s 1000000 \(Sandbox.quote(mp))/whole && test $(stat -c %s \(Sandbox.quote(mp))/whole) = 1000000")
        sb.unmount(mp)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0)
    }

    /// A store on a 24 MiB tmpfs: growing a file by 200 MB (a truncate, fallocate, or one
    /// byte written far past the end) fails with ENOSPC at once and changes nothing. A
    /// truncate used to leave the file grown by what fitted when its old size was a whole
    /// number of chunks, and the store full.
    func testGrowthThatDoesNotFitLeavesTheFileAsItWas() {
        let sb = Sandbox("pv-grow-full")
        let release = sb.storeOnOwnFilesystem(size: "24m")
        defer { release() }
        sb.initStore()
        let mp = sb.mount()
        let plain = makeFiles(sb, in: mp)
        let initial = state(sb, mp, plain)
        let used = usedBlocks(sb)
        assertRefused(sb, mp, plain, "fallocate -l 200M F", "No space left on device", within: 10)
        assertRefused(sb, mp, plain, "fallocate -n -l 200M F", "No space left on device", within: 10)
        XCTAssertLessThanOrEqual(usedBlocks(sb) - used, 64, "the store kept space")
        // From a fresh daemon and kernel (no cached attributes), times included.
        let fresh = sb.remount(mp)
        XCTAssertEqual(state(sb, fresh, plain), initial)
        assertGrowthIsAHole(sb, fresh, plain, to: "200M", used: used)
        sb.unmount(fresh)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0)
    }

    /// The same on ext2, which has no fallocate: nothing can be reserved, so the growth is
    /// written until the store is full, then undone (the file cut back to its old end, its
    /// old last chunk put back, its times restored) and the space given back.
    func testGrowthThatFailsHalfwayIsUndone() {
        let sb = Sandbox("pv-grow-ext2")
        let release = sb.storeOnOwnFilesystem(size: "16m", .ext2)
        defer { release() }
        XCTAssertNotEqual(sb.run("fallocate -n -l 4096 \(Sandbox.quote(sb.store))/probe").status, 0, "ext2 must refuse fallocate")
        sb.ok("rm -f \(Sandbox.quote(sb.store))/probe")
        sb.initStore()
        let mp = sb.mount()
        let plain = makeFiles(sb, in: mp)
        let initial = state(sb, mp, plain)
        let used = usedBlocks(sb)
        assertRefused(sb, mp, plain, "fallocate -l 40M F", "No space left on device", within: 30)
        XCTAssertLessThanOrEqual(usedBlocks(sb) - used, 64, "the store kept space")
        // From a fresh daemon and kernel (no cached attributes), times included.
        let fresh = sb.remount(mp)
        XCTAssertEqual(state(sb, fresh, plain), initial)
        assertGrowthIsAHole(sb, fresh, plain, to: "40M", used: used)
        sb.unmount(fresh)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0)
    }
}
