import Foundation
import XCTest
@testable import PhotoVaultFS

/// The adapter over a plain tree (no encryption): every operation must behave exactly as
/// on the backing directory, which these tests read directly to check.
final class PassthroughMountTests: XCTestCase {
    var h: MountHarness!

    override func setUpWithError() throws {
        h = try MountHarness { backing, options, log in
            try VaultFileSystem(plainRoot: backing, options: options, log: log)
        }
        try h.start()
    }

    override func tearDown() {
        h?.cleanUp()
        h = nil
    }

    func testFilesDirectoriesAndAttributes() throws {
        h.shell("""
        mkdir -p "$M/a/b/c"
        echo hello > "$M/a/b/c/f.txt"
        test "$(cat "$M/a/b/c/f.txt")" = hello
        test "$(cat "$B/a/b/c/f.txt")" = hello
        echo more >> "$M/a/b/c/f.txt"
        test "$(wc -l < "$M/a/b/c/f.txt")" = 2
        chmod 640 "$M/a/b/c/f.txt"
        test "$(stat -c %a "$M/a/b/c/f.txt")" = 640
        touch -d '2001-02-03 04:05:06' "$M/a/b/c/f.txt"
        test "$(stat -c %Y "$M/a/b/c/f.txt")" = "$(stat -c %Y "$B/a/b/c/f.txt")"
        test "$(date -d @"$(stat -c %Y "$M/a/b/c/f.txt")" +%Y)" = 2001
        truncate -s 3 "$M/a/b/c/f.txt"
        test "$(cat "$M/a/b/c/f.txt")" = hel
        truncate -s 100000 "$M/a/b/c/f.txt"
        test "$(stat -c %s "$M/a/b/c/f.txt")" = 100000
        test "$(stat -c %i "$M/a/b/c/f.txt")" = "$(stat -c %i "$B/a/b/c/f.txt")"
        rm "$M/a/b/c/f.txt"
        test ! -e "$B/a/b/c/f.txt"
        rmdir "$M/a/b/c"
        ! rmdir "$M/a" 2>/dev/null || exit 1
        ls -la "$M/a" | grep -q ' b$'
        """)
    }

    func testLinksRenamesAndTools() throws {
        h.shell("""
        dd if=/dev/urandom of="$B/../src.bin" bs=1M count=3 status=none
        cp "$B/../src.bin" "$M/big.bin"
        cmp "$B/../src.bin" "$M/big.bin"
        ln "$M/big.bin" "$M/hard.bin"
        test "$(stat -c %h "$M/big.bin")" = 2
        test "$(stat -c %i "$M/big.bin")" = "$(stat -c %i "$M/hard.bin")"
        ln -s big.bin "$M/sym"
        test "$(readlink "$M/sym")" = big.bin
        cmp "$M/sym" "$B/../src.bin"
        mv "$M/hard.bin" "$M/moved.bin"
        test -e "$B/moved.bin"
        test ! -e "$B/hard.bin"
        mkdir "$M/d1" "$M/d2"
        echo one > "$M/d1/x"; echo two > "$M/d2/x"
        mv -T --exchange "$M/d1" "$M/d2" 2>/dev/null || python3 -c 'import ctypes,os,sys; libc=ctypes.CDLL(None,use_errno=True); r=libc.renameat2(-100,sys.argv[1].encode(),-100,sys.argv[2].encode(),2); sys.exit(0 if r==0 else 1)' "$M/d1" "$M/d2"
        test "$(cat "$M/d1/x")" = two
        ! python3 -c 'import ctypes,sys; libc=ctypes.CDLL(None,use_errno=True); r=libc.renameat2(-100,sys.argv[1].encode(),-100,sys.argv[2].encode(),1); sys.exit(0 if r==0 else 1)' "$M/d1" "$M/d2" || exit 1
        test "$(cat "$M/d1/x")" = two
        mkdir "$M/tree"; for i in $(seq 1 300); do echo "$i" > "$M/tree/file$i"; done
        test "$(ls "$M/tree" | wc -l)" = 300
        test "$(ls -l "$M/tree" | grep -c file)" = 300
        tar -C "$M" -cf "$B/../t.tar" tree
        mkdir "$M/untar"; tar -C "$M/untar" -xf "$B/../t.tar"
        diff -r "$M/tree" "$M/untar/tree"
        rsync -a "$M/tree/" "$M/rsynced/"
        diff -r "$M/tree" "$M/rsynced"
        mkfifo "$M/fifo"; test -p "$M/fifo"
        df "$M" | grep -q photovault
        grep -q " $M fuse.photovault " /proc/mounts
        """)
    }

    func testExtendedAttributes() throws {
        h.shell("""
        echo x > "$M/f"
        setfattr -n user.comment -v "a note" "$M/f"
        test "$(getfattr --only-values -n user.comment "$M/f")" = "a note"
        getfattr -d "$M/f" | grep -q 'user.comment="a note"'
        setfattr -x user.comment "$M/f"
        ! getfattr -n user.comment "$M/f" 2>/dev/null
        """)
    }

    func testConcurrentHandlesSeeEachOthersWrites() throws {
        let path = h.mountpoint + "/shared"
        let a = open(path, O_CREAT | O_RDWR, 0o644)
        XCTAssertGreaterThanOrEqual(a, 0)
        let b = open(path, O_RDWR)
        XCTAssertGreaterThanOrEqual(b, 0)
        defer { close(a); close(b) }
        XCTAssertEqual(pwrite(a, "abcdef", 6, 0), 6)
        var buf = [UInt8](repeating: 0, count: 6)
        XCTAssertEqual(pread(b, &buf, 6, 0), 6)
        XCTAssertEqual(String(decoding: buf, as: UTF8.self), "abcdef")
        // O_TRUNC on open must empty the file (atomic O_TRUNC is negotiated).
        let c = open(path, O_WRONLY | O_TRUNC)
        XCTAssertGreaterThanOrEqual(c, 0)
        close(c)
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_size, 0)
    }

    func testUnmountEndsRunAndInodesAreStableAcrossMounts() throws {
        h.shell("mkdir \"$M/keep\"; echo data > \"$M/keep/f\"")
        let before = h.shell("stat -c %i \"$M/keep/f\"")
        XCTAssertTrue(h.stop(), "run() did not return after fusermount3 -u")
        XCTAssertFalse(MountHarness.mounted(h.mountpoint))
        let fs2 = try VaultFileSystem(plainRoot: h.backing, options: MountOptions(mountpoint: h.mountpoint), log: { _ in })
        try fs2.mount()
        let t = Thread { _ = fs2.run() }
        t.start()
        defer { MountHarness.sh("fusermount3", "-u", h.mountpoint); usleep(200_000) }
        XCTAssertEqual(h.shell("stat -c %i \"$M/keep/f\""), before)
    }

    func testRequestExitFromAnotherThreadEndsRun() throws {
        h.shell("echo x > \"$M/f\"")
        DispatchQueue.global().async { self.h.fs.requestExit() }
        let deadline = Date().addingTimeInterval(10)
        while MountHarness.mounted(h.mountpoint) && Date() < deadline { usleep(20_000) }
        XCTAssertFalse(MountHarness.mounted(h.mountpoint))
        XCTAssertTrue(h.stop(), "run() did not return after requestExit()")
    }

    func testReadOnlyMountAndActivityCallback() throws {
        XCTAssertTrue(h.stop())
        final class Counter: @unchecked Sendable {
            let lock = NSLock(); var n = 0
            func bump() { lock.lock(); n += 1; lock.unlock() }
        }
        let counter = Counter()
        let fs = try VaultFileSystem(plainRoot: h.backing, options: MountOptions(mountpoint: h.mountpoint, readOnly: true), log: { _ in })
        fs.onActivity = { counter.bump() }
        try fs.mount()
        let t = Thread { _ = fs.run() }
        t.start()
        defer { MountHarness.sh("fusermount3", "-u", h.mountpoint); usleep(200_000) }
        FileManager.default.createFile(atPath: h.backing + "/existing", contents: Data("ro".utf8))
        XCTAssertEqual(h.shell("cat \"$M/existing\""), "ro")
        let r = h.shellStatus("echo x > \"$M/new\"")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.err.contains("Read-only file system"), r.err)
        XCTAssertGreaterThan(counter.n, 0, "onActivity is called for requests")
    }

    func testMountErrors() throws {
        let missing = try VaultFileSystem(plainRoot: h.backing, options: MountOptions(mountpoint: h.base + "/nope"), log: { _ in })
        XCTAssertThrowsError(try missing.mount()) { XCTAssertEqual($0 as? MountError, .mountpointMissing(h.base + "/nope")) }
        let again = try VaultFileSystem(plainRoot: h.backing, options: MountOptions(mountpoint: h.mountpoint), log: { _ in })
        XCTAssertThrowsError(try again.mount()) { XCTAssertEqual($0 as? MountError, .alreadyMounted(h.mountpoint)) }
        XCTAssertThrowsError(try VaultFileSystem(plainRoot: h.base + "/absent", options: MountOptions(mountpoint: h.mountpoint), log: { _ in }))
    }
}
