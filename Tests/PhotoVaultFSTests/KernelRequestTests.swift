import Foundation
import XCTest
import Synchronization
import PhotoVaultCrypto
@testable import PhotoVaultFS

/// What the kernel asks, counted by the daemon (`DeviceIO`): one round trip per write with
/// no capability probe, no FLUSH on close, no LOOKUP after a listing; setuid/setgid bits kept
/// as written (the daemon drops them where the kernel says: MountSetIDTests).
final class KernelRequestTests: XCTestCase {
    static let opLookup: UInt32 = 1, opOpen: UInt32 = 14, opRead: UInt32 = 15, opWrite: UInt32 = 16, opGetxattr: UInt32 = 22, opFlush: UInt32 = 25, opReaddirplus: UInt32 = 44

    var h: MountHarness!

    override func setUpWithError() throws {
        h = try EncryptedMountTests.startEncrypted(master: SecureRandom.bytes(32))
    }

    override func tearDown() {
        h?.cleanUp()
        h = nil
    }

    func testSmallWritesDoNotProbeCapabilitiesEachTime() throws {
        let before = h.fs.deviceIO.requests(Self.opGetxattr)
        // 300 separate 4 KiB writes into two files (dd writes once per block).
        h.shell("""
        dd if=/dev/urandom of="$B/../src" bs=4k count=300 status=none
        dd if="$B/../src" of="$M/a.bin" bs=4k status=none
        dd if="$B/../src" of="$M/b.bin" bs=4k conv=notrunc status=none
        dd if="$B/../src" of="$M/b.bin" bs=4k conv=notrunc seek=7 count=50 status=none
        cmp "$B/../src" "$M/a.bin"
        cmp -n 28672 "$B/../src" "$M/b.bin"
        """)
        // (INIT is answered after the mount appears, so ask only once requests have run.)
        XCTAssertTrue(h.fs.deviceIO.killprivV2.load(ordering: .acquiring),
                      "the INIT reply should ask for FUSE_HANDLE_KILLPRIV_V2 (kernel 5.11 or later offers it)")
        let asked = h.fs.deviceIO.requests(Self.opGetxattr) - before
        // The kernel asks once per inode, then remembers there is nothing to drop (S_NOSEC).
        XCTAssertLessThanOrEqual(asked, 2, "security.capability asked \(asked) times for 650 writes to 2 files")
    }

    func testSetIDBitsOnFilesAreKeptAsWritten() throws {
        let out = h.shell("""
        echo data > "$M/tool"
        chmod 4755 "$M/tool"; stat -c %a "$M/tool"
        chmod 2750 "$M/tool"; stat -c %a "$M/tool"
        chmod 1644 "$M/tool"; stat -c %a "$M/tool"
        mkdir "$M/shared"; chmod 2775 "$M/shared"; stat -c %a "$M/shared"
        python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT|os.O_WRONLY, 0o6755))' "$M/created"
        stat -c %a "$M/created"
        """)
        XCTAssertEqual(out.split(separator: "\n"), ["4755", "2750", "1644", "2775", "6755"])
        // The backing file carries them (a store from before this kept none).
        let modes = h.shell(#"find "$B" -type f -perm -6000 | wc -l"#)
        XCTAssertEqual(modes.trimmingCharacters(in: .whitespacesAndNewlines), "1")
    }

    func testFileCapabilitiesAreNotStored() throws {
        let r = h.shellStatus(#"echo x > "$M/f"; setfattr -n security.capability -v 0sAQAAAgAgAAAAAAAAAAAAAAAAAAA= "$M/f""#)
        XCTAssertNotEqual(r.status, 0, "security.capability must be refused (the HANDLE_KILLPRIV_V2 promise)")
        XCTAssertTrue(r.err.contains("not supported"), r.err)
    }

    func testClosingAFileSendsNoFlush() throws {
        let io = h.fs.deviceIO
        let opens = io.requests(Self.opOpen), flushes = io.requests(Self.opFlush)
        h.shell(#"for i in $(seq 1 40); do echo "photo $i" > "$M/p$i"; done; cat "$M"/p* > /dev/null; for i in 1 2 3; do cat "$M/p$i" > /dev/null; done"#)
        XCTAssertGreaterThanOrEqual(io.requests(Self.opOpen) - opens, 43, "the opens should have been counted")
        XCTAssertEqual(io.requests(Self.opFlush) - flushes, 0, "close() should not wait for a FLUSH")
    }

    func testReadingAfterAListingNeedsNoLookups() throws {
        h.shell(#"mkdir "$M/roll"; for i in $(seq -w 1 600); do echo "$i" > "$M/roll/IMG_$i.JPG"; done"#)
        // Make the kernel forget the entries (dentries and inodes; the daemon gets FORGETs).
        h.shell("sync; echo 2 > /proc/sys/vm/drop_caches")
        let io = h.fs.deviceIO
        let lookups = io.requests(Self.opLookup), plus = io.requests(Self.opReaddirplus)
        // A thumbnailer: list, then open every file.
        let out = h.shell(#"cd "$M/roll" && printf '%s\0' * | xargs -0 head -q -c 16 | wc -l"#)
        XCTAssertEqual(out.trimmingCharacters(in: .whitespacesAndNewlines), "600")
        XCTAssertGreaterThan(io.requests(Self.opReaddirplus) - plus, 0, "the listing should use READDIRPLUS")
        // "auto" READDIRPLUS would answer the first batch only and LOOKUP the other ~400.
        XCTAssertLessThanOrEqual(io.requests(Self.opLookup) - lookups, 5, "files of a fresh listing were looked up again")
    }

    func testSequentialReadsUseTheRaisedWindowInMaxReadPieces() throws {
        // Tests run as root, so the daemon may raise the mount's read-ahead window.
        XCTAssertEqual(geteuid(), 0, "this test needs root, as the suite does")
        XCTAssertEqual(h.fs.readAheadKB, 512)
        let dev = try XCTUnwrap(VaultFileSystem.mountDevice(h.mountpoint))
        let kb = try String(contentsOfFile: "/sys/class/bdi/\(dev)/read_ahead_kb", encoding: .utf8)
        XCTAssertEqual(kb.trimmingCharacters(in: .whitespacesAndNewlines), "512")
        // READs of at most 128 KiB, so a window arrives as several requests.
        // Read to the end: String(contentsOfFile:) stops after the first 4 KB of a /proc file.
        let info = String(decoding: try XCTUnwrap(FileHandle(forReadingAtPath: "/proc/self/mountinfo")).readDataToEndOfFile(), as: UTF8.self)
        let line = info.split(separator: "\n").first { $0.contains(" \(h.mountpoint) ") }
        XCTAssertTrue(line?.contains("max_read=131072") == true, String(line ?? "no mountinfo line"))
        h.shell(#"dd if=/dev/urandom of="$M/roll.raw" bs=1M count=16 status=none; sync; echo 1 > /proc/sys/vm/drop_caches"#)
        let reads = h.fs.deviceIO.requests(Self.opRead)
        h.shell(#"cat "$M/roll.raw" > /dev/null"#)
        XCTAssertEqual(h.fs.deviceIO.requests(Self.opRead) - reads, 128, "16 MiB in 128 KiB READs")
    }

    func testTheKernelKeepsSeveralReadAheadWindowsInFlight() throws {
        XCTAssertEqual(h.fs.options.maxBackground, 64)
        // INIT is answered after the mount appears: let a request run first.
        h.shell(#"echo x > "$M/probe"; cat "$M/probe" > /dev/null"#)
        // The connection's limits as the kernel took them from the INIT reply.
        let dev = try XCTUnwrap(VaultFileSystem.mountDevice(h.mountpoint))
        let minor = try XCTUnwrap(dev.split(separator: ":").last)
        // The limits are shown by the kernel's fusectl file system. systemd mounts it at
        // boot; a bare VM or container may not have: mount it for the test and undo that.
        let connections = "/sys/fs/fuse/connections"
        if MountHarness.sh("mountpoint", "-q", connections).status != 0 {
            h.shell("mount -t fusectl fusectl \(connections)")
            addTeardownBlock { _ = MountHarness.sh("umount", connections) }
        }
        let dir = "\(connections)/\(minor)"
        func value(_ name: String) throws -> String {
            try String(contentsOfFile: "\(dir)/\(name)", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // The kernel's own are 12 and 9: a reader's 1 MiB window of 128 KiB READs and the
        // next window found the connection congested (PERFORMANCE.md, change 26).
        XCTAssertEqual(try value("max_background"), "64")
        XCTAssertEqual(try value("congestion_threshold"), "48")
    }

    func testCopyingAPhotoInTakesLargeWrites() throws {
        h.shell(#"head -c 4194304 /dev/urandom > "$B/../photo.jpg"; : > "$M/photo.jpg""#)
        XCTAssertEqual(h.shell(#"stat -c %o "$M/photo.jpg""#).trimmingCharacters(in: .whitespacesAndNewlines), "262144")
        let writes = h.fs.deviceIO.requests(Self.opWrite)
        h.shell(#"cp "$B/../photo.jpg" "$M/photo.jpg"; cmp "$B/../photo.jpg" "$M/photo.jpg""#)
        // cp writes 256 KiB at a time (16 requests); with a 4 KiB st_blksize it wrote 128 KiB (32).
        let n = h.fs.deviceIO.requests(Self.opWrite) - writes
        XCTAssertLessThanOrEqual(n, 20, "\(n) WRITEs for a 4 MiB copy")
    }
}
