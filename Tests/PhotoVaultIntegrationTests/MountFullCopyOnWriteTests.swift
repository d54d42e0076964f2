import XCTest

/// A full store on a filesystem that copies on write, where rewriting a chunk in place needs
/// new blocks: btrfs, and xfs once the store's extents are shared (a reflink copy, which
/// `cp -a` makes there by default). A rewrite in the middle of a file, a truncate inside a
/// chunk and an append to a partial last chunk meet ENOSPC. Each may fail, or succeed in part
/// as a write may, but the file then holds exactly what the operation reported: every byte
/// written before reads back, now and after a remount, and fsck finds nothing. (The rewrite
/// used to stop short inside a chunk, which then read as EIO; a write request that failed
/// after its first batches of chunks reported none of them written; a failed truncate had
/// cut the file already.)
final class MountFullCopyOnWriteTests: XCTestCase {
    func testRewritesOnAFullBtrfsStoreKeepEveryByte() {
        fullStoreRewrites(.btrfs, size: "256m")
    }

    func testRewritesOnAFullXfsStoreWithSharedExtentsKeepEveryByte() {
        fullStoreRewrites(.xfs, size: "300m", reflinkCopy: true)
    }

    private func fullStoreRewrites(_ fs: Sandbox.StoreFilesystem, size: String, reflinkCopy: Bool = false,
                                   file: StaticString = #filePath, line: UInt = #line) {
        let sb = Sandbox("pv-full-\(fs.rawValue)")
        let release = sb.storeOnOwnFilesystem(size: size, fs)
        defer { release() }
        let qs = Sandbox.quote(sb.store), qp = Sandbox.quote(sb.plainDir("plain"))
        sb.ok("""
        set -e
        cd \(qp)
        head -c 2001234 /dev/urandom > mid.bin; head -c 200000 /dev/urandom > cut.bin; head -c 10000 /dev/urandom > small.bin
        head -c 1048576 /dev/urandom > over.bin; head -c 3000000 /dev/urandom > tail.bin
        """)
        sb.initStore()
        let mp = sb.mount()
        let qm = Sandbox.quote(mp)
        sb.ok("cp \(qp)/mid.bin \(qp)/cut.bin \(qp)/small.bin \(qm)/ && sync -f \(qs)")
        if reflinkCopy { sb.ok("cp -a --reflink=always \(qs)/users \(qs)/users.copy && sync -f \(qs)") }
        sb.ok("head -c 400000 /dev/zero > \(qm)/slack.raw && sync -f \(qs)")
        // Full, then 400000 bytes free: a rewrite gets some blocks (a batch of 64 chunks is
        // 264704 bytes), then none.
        let fill = sb.run("dd if=/dev/zero of=\(qm)/fill.raw bs=64k")
        XCTAssertTrue(fill.stderr.contains("No space left on device"), fill.stderr, file: file, line: line)
        sb.ok("rm \(qm)/slack.raw && sync -f \(qs)")

        // 1 MiB over the middle of mid.bin: ENOSPC, after the part dd reports.
        let over = sb.run("dd if=\(qp)/over.bin of=\(qm)/mid.bin bs=1048576 seek=500000 oflag=seek_bytes conv=notrunc")
        XCTAssertTrue(over.stderr.contains("No space left on device"), over.stderr, file: file, line: line)
        let copied = over.stderr.split(separator: "\n").first { $0.contains(" copied") }?.split(separator: " ").first
        let written = copied.flatMap { Int($0) } ?? -1
        XCTAssertTrue((0..<1048576).contains(written), over.stderr, file: file, line: line)
        sb.ok("""
        set -e
        cd \(qp) && cp mid.bin mid.want
        head -c \(written) over.bin | dd of=mid.want bs=64k iflag=fullblock seek=500000 oflag=seek_bytes conv=notrunc status=none
        """)
        // Full again, to the last block (no new file: xfs may have blocks but no inodes left).
        let fill2 = sb.run("dd if=/dev/zero of=\(qm)/fill.raw bs=4k oflag=append conv=notrunc")
        XCTAssertTrue(fill2.stderr.contains("No space left on device"), fill2.stderr, file: file, line: line)
        // A truncate inside a chunk reseals that chunk: done wholly or not at all.
        let cut = sb.run("truncate -s 150001 \(qm)/cut.bin")
        XCTAssertTrue(cut.status == 0 || cut.stderr.contains("No space left on device"), cut.stderr, file: file, line: line)
        sb.ok("head -c \(cut.status == 0 ? 150001 : 200000) \(qp)/cut.bin > \(qp)/cut.want")
        // An append rewrites the partial last chunk: ENOSPC, the file as long as it says.
        let app = sb.run("cat \(qp)/tail.bin >> \(qm)/small.bin")
        XCTAssertTrue(app.stderr.contains("No space left on device"), app.stderr, file: file, line: line)
        sb.ok("cat \(qp)/small.bin > \(qp)/small.want && head -c $(( $(stat -c %s \(qm)/small.bin) - 10000 )) \(qp)/tail.bin >> \(qp)/small.want")

        let compare = "cd \(qp) && for f in mid cut small; do cmp $f.want \(qm)/$f.bin || exit 1; done"
        sb.ok(compare, file: file, line: line)
        sb.ok("rm \(qm)/fill.raw && sync -f \(qs)")   // a login needs room to count the attempt
        sb.remount(mp)
        sb.ok(compare, file: file, line: line)
        sb.unmount(mp)
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr, file: file, line: line)
    }
}
