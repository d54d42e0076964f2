import Foundation
import XCTest

/// A modified byte underneath gives EIO for that file only, and the daemon's log names the
/// plaintext path (in the foreground the log goes to stderr; in the background to syslog).
final class MountIntegrityTests: XCTestCase {
    func testFlippedByteGivesEIOForThatFileOnlyAndLogsThePath() throws {
        let sb = Sandbox("pv-flip")
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        // The victim is much larger than anything else, so its ciphertext is the largest file.
        sb.ok("""
        set -e
        mkdir \(q)/Holiday
        head -c 400000 /dev/urandom > \(q)/Holiday/victim-photo.jpg
        for i in 1 2 3; do printf 'INTEGRITY-OK-%s\\n' $i > \(q)/Holiday/fine-$i.jpg; done
        head -c 100000 /dev/urandom > \(q)/other-big.jpg
        """)
        let otherSum = sb.ok("sha256sum < \(q)/other-big.jpg")
        sb.unmount(mp)
        sb.mounts.removeAll { $0 == mp }

        let largest = sb.ok("find \(Sandbox.quote(sb.store))/users -type f -printf '%s %p\\n' | sort -n | tail -1 | cut -d' ' -f2-")
            .trimmingCharacters(in: .newlines)
        let fd = open(largest, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0, "cannot open \(largest)")
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, 200), 1)
        byte ^= 0x01
        XCTAssertEqual(pwrite(fd, &byte, 1, 200), 1)
        close(fd)

        let fg = try ForegroundMount(sandbox: sb, at: "mnt-alice")
        XCTAssertTrue(fg.waitMounted(), "foreground mount did not appear: \(fg.log)")
        mp = fg.mountpoint
        let r = sb.run("cat \(q)/Holiday/victim-photo.jpg > /dev/null")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        // Only that file: the others (and the directory listing) keep working.
        XCTAssertEqual(sb.ok("cat \(q)/Holiday/fine-1.jpg \(q)/Holiday/fine-3.jpg"), "INTEGRITY-OK-1\nINTEGRITY-OK-3\n")
        XCTAssertEqual(sb.ok("sha256sum < \(q)/other-big.jpg"), otherSum)
        XCTAssertEqual(sb.ok("ls \(q)/Holiday | LC_ALL=C sort"), "fine-1.jpg\nfine-2.jpg\nfine-3.jpg\nvictim-photo.jpg\n")
        // Still EIO with caches dropped (nothing served from the page cache).
        sb.ok("sync; echo 3 > /proc/sys/vm/drop_caches")
        XCTAssertTrue(sb.run("cat \(q)/Holiday/victim-photo.jpg").stderr.contains("Input/output error"))
        XCTAssertTrue(Harness.waitUntil(5) { fg.log.contains("/Holiday/victim-photo.jpg") }, "log: \(fg.log)")
        let eioLines = fg.log.split(separator: "\n").filter { $0.contains("EIO") }
        XCTAssertFalse(eioLines.isEmpty, fg.log)
        XCTAssertTrue(eioLines.allSatisfy { $0.contains("/Holiday/victim-photo.jpg") }, fg.log)
        // New writes elsewhere still work on the same mount.
        sb.ok("printf 'INTEGRITY-AFTER\\n' > \(q)/after.jpg")
        XCTAssertEqual(sb.ok("cat \(q)/after.jpg"), "INTEGRITY-AFTER\n")
        fg.stop(sb)
        XCTAssertFalse(fg.log.contains("INTEGRITY-OK"), "file contents in the log")
        sb.assertNoPlaintext(["INTEGRITY-", "victim-photo", "Holiday", "fine-1.jpg"])
    }
}
