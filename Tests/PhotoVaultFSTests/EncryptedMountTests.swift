import Foundation
import XCTest
import PhotoVaultCrypto
import PhotoVaultStore
@testable import PhotoVaultFS

/// The adapter over a real encrypted tree: plaintext above, only ciphertext below.
class EncryptedMountTests: XCTestCase {
    var h: MountHarness!
    /// The account master key, kept so a test can remount (run() wipes the keyring).
    var master: [UInt8] = SecureRandom.bytes(32)
    static let layout = ChunkLayout(cipher: .preferred, chunkSize: 4096)

    func makeTree(_ root: String) throws -> UserTree {
        UserTree(root: root, keyring: try UserKeyring(masterKey: SecureBytes(copying: master)), layout: Self.layout)
    }

    /// The kernel writeback cache changes which requests arrive (1 MiB writes, reads on
    /// write-only handles, O_APPEND done by the kernel): the subclass runs everything with it.
    var writebackCache: Bool { false }

    override func setUpWithError() throws {
        h = try Self.startEncrypted(master: master, writebackCache: writebackCache)
    }

    /// A started in-process mount of a fresh encrypted tree under `master`.
    static func startEncrypted(master: [UInt8], writebackCache: Bool = false,
                               logsPlaintextPaths: Bool = true) throws -> MountHarness {
        let h = try MountHarness(options: {
            var o = MountOptions(mountpoint: $0, writebackCache: writebackCache)
            o.logsPlaintextPaths = logsPlaintextPaths
            return o
        }, prepare: { root in
            try UserTree.initialiseRoot(at: root, keyring: try UserKeyring(masterKey: SecureBytes(copying: master)))
        }, make: { root, options, log in
            let tree = UserTree(root: root, keyring: try UserKeyring(masterKey: SecureBytes(copying: master)), layout: layout)
            return try VaultFileSystem(tree: tree, options: options, log: log)
        })
        try h.start()
        return h
    }

    override func tearDown() {
        h?.cleanUp()
        h = nil
    }

    func assertNoLeak(_ needles: [String], file: StaticString = #filePath, line: UInt = #line) {
        let hay = h.backingBytes()
        for n in needles {
            XCTAssertNil(hay.range(of: Data(n.utf8)), "plaintext '\(n)' found in the backing tree", file: file, line: line)
        }
    }

    func testRoundTripWithRealToolsLeavesOnlyCiphertext() throws {
        let longName = String(repeating: "long-photo-name-", count: 14) + "end.jpg"   // 231 bytes: a long-name entry
        h.shell("""
        mkdir -p "$M/Holidays/Beach"
        printf 'SECRETCONTENT-%.0s' $(seq 1 1000) > "$M/Holidays/Beach/notes.txt"
        test "$(stat -c %s "$M/Holidays/Beach/notes.txt")" = 14000
        grep -q SECRETCONTENT "$M/Holidays/Beach/notes.txt"
        dd if=/dev/urandom of="$B/../src.bin" bs=100k count=13 status=none
        cp "$B/../src.bin" "$M/Holidays/photo.raw"
        cmp "$B/../src.bin" "$M/Holidays/photo.raw"
        test "$(stat -c %s "$M/Holidays/photo.raw")" = "$(stat -c %s "$B/../src.bin")"
        echo tail >> "$M/Holidays/photo.raw"
        tail -c 5 "$M/Holidays/photo.raw" | grep -q tail
        truncate -s 5000 "$M/Holidays/photo.raw"; cmp -n 5000 "$B/../src.bin" "$M/Holidays/photo.raw"
        test "$(stat -c %s "$M/Holidays/photo.raw")" = 5000
        truncate -s 9000 "$M/Holidays/photo.raw"
        test "$(tail -c 4000 "$M/Holidays/photo.raw" | tr -d '\\0' | wc -c)" = 0
        dd if=/dev/urandom of="$M/Holidays/photo.raw" bs=1 count=10 seek=4090 conv=notrunc status=none
        test "$(stat -c %s "$M/Holidays/photo.raw")" = 9000
        echo x > "$M/\(longName)"
        test "$(cat "$M/\(longName)")" = x
        ls "$M" | grep -qx '\(longName)'
        mv "$M/\(longName)" "$M/Holidays/short.txt"
        test "$(cat "$M/Holidays/short.txt")" = x
        ln -s Beach/notes.txt "$M/Holidays/SECRETLINK"
        test "$(readlink "$M/Holidays/SECRETLINK")" = Beach/notes.txt
        test "$(stat -c %s "$M/Holidays/SECRETLINK")" = 15
        grep -q SECRETCONTENT "$M/Holidays/SECRETLINK"
        ln "$M/Holidays/Beach/notes.txt" "$M/Holidays/hardlink.txt"
        test "$(stat -c %i "$M/Holidays/hardlink.txt")" = "$(stat -c %i "$M/Holidays/Beach/notes.txt")"
        setfattr -n user.SECRETATTR -v SECRETVALUE "$M/Holidays/Beach/notes.txt"
        test "$(getfattr --only-values -n user.SECRETATTR "$M/Holidays/Beach/notes.txt")" = SECRETVALUE
        getfattr -d "$M/Holidays/Beach/notes.txt" | grep -q 'user.SECRETATTR="SECRETVALUE"'
        tar -C "$M" -cf "$B/../t.tar" Holidays
        mkdir "$M/Restored"; tar -C "$M/Restored" -xf "$B/../t.tar"
        diff -r "$M/Holidays" "$M/Restored/Holidays"
        rsync -a "$M/Holidays/" "$M/Rsynced/"
        diff -r "$M/Holidays" "$M/Rsynced"
        rm -r "$M/Restored"
        test "$(ls -A "$M" | sort | tr '\\n' ' ')" = "Holidays Rsynced "
        """)
        rm(h.base + "/src.bin"); rm(h.base + "/t.tar")
        assertNoLeak(["Holidays", "Beach", "notes", "SECRETCONTENT", "photo", "long-photo-name", "SECRETLINK",
                      "SECRETATTR", "SECRETVALUE", "Rsynced", "Restored"])
        // The backing tree holds directory ID files and base64url names only.
        let names = h.shell("cd \"$B\" && find . -mindepth 1 -printf '%f\\n'").split(separator: "\n")
        XCTAssertFalse(names.isEmpty)
        for n in names {
            XCTAssertTrue(n == ".pvdir" || n.allSatisfy { $0.isLetter || $0.isNumber || "-_~.".contains($0) }, "odd backing name \(n)")
        }
    }

    func testContentSurvivesRemount() throws {
        h.shell("mkdir \"$M/d\"; seq 1 20000 > \"$M/d/numbers\"; ln -s numbers \"$M/d/link\"")
        let inode = h.shell("stat -c %i \"$M/d/numbers\"")
        try remounted {
            XCTAssertEqual(h.shell("seq 1 20000 | cmp - \"$M/d/numbers\" && readlink \"$M/d/link\""), "numbers\n")
            XCTAssertEqual(h.shell("stat -c %i \"$M/d/numbers\""), inode)
        }
    }

    /// Stops the mount, mounts the same tree again (write-through, keys from `master`) at the
    /// same place, and runs `body` against that mount.
    func remounted(_ body: () throws -> Void) throws {
        XCTAssertTrue(h.stop())
        let fs2 = try VaultFileSystem(tree: try makeTree(h.backing), options: MountOptions(mountpoint: h.mountpoint), log: { _ in })
        try fs2.mount()
        let t = Thread { _ = fs2.run() }
        t.start()
        defer { MountHarness.sh("fusermount3", "-u", h.mountpoint); usleep(200_000) }
        try body()
    }

    func testTamperedChunkIsEIOAndLogged() throws {
        h.shell("mkdir \"$M/album\"; head -c 20000 /dev/zero > \"$M/album/victim.jpg\"")
        // Flip one byte of the second chunk of the only regular file in the album.
        let file = h.shell("find \"$B\" -type f -size +10k").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertFalse(file.isEmpty)
        let offset = 128 + 4096 + Self.layout.overhead + 100
        h.shell("printf '\\xff' | dd of='\(file)' bs=1 seek=\(offset) conv=notrunc status=none; echo 3 > /proc/sys/vm/drop_caches")
        let r = h.shellStatus("dd if=\"$M/album/victim.jpg\" of=/dev/null bs=4096 skip=1 count=1 iflag=direct 2>&1")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(h.shellStatus("dd if=\"$M/album/victim.jpg\" of=/dev/null bs=4096 count=1 iflag=direct status=none").status == 0,
                      "an intact chunk stays readable")
        XCTAssertTrue(h.logLines.all.contains { $0.contains("EIO") && $0.contains("/album/victim.jpg") },
                      "log lines: \(h.logLines.all)")
    }

    /// The EIO line names the path the file has when the error happens: a file renamed while
    /// open (its content stays open) is logged under its new name only.
    func testTamperedChunkLogNamesTheCurrentPath() throws {
        h.shell("mkdir \"$M/album\"; head -c 20000 /dev/zero > \"$M/album/before-rename.jpg\"")
        let offset = 128 + 4096 + Self.layout.overhead + 100
        // The backing file is found after the rename (its encrypted name changes with it).
        let r = h.shellStatus("""
        exec 3< "$M/album/before-rename.jpg"
        mv "$M/album/before-rename.jpg" "$M/album/after-rename.jpg"
        f=$(find "$B" -type f -size +10k)
        [ -n "$f" ] || exit 99
        printf '\\xff' | dd of="$f" bs=1 seek=\(offset) conv=notrunc status=none
        echo 3 > /proc/sys/vm/drop_caches
        dd if="$M/album/after-rename.jpg" of=/dev/null bs=4096 skip=1 count=1 iflag=direct status=none
        rc=$?; exec 3<&-; exit $rc
        """)
        XCTAssertNotEqual(r.status, 0, "a tampered chunk must not read")
        XCTAssertNotEqual(r.status, 99, "no backing file found")
        let eio = h.logLines.all.filter { $0.contains("EIO") }
        XCTAssertFalse(eio.isEmpty, "log lines: \(h.logLines.all)")
        XCTAssertTrue(eio.allSatisfy { $0.contains("/album/after-rename.jpg") && !$0.contains("before-rename") },
                      "log lines: \(eio)")
    }

    /// A header with an unknown format version is refused like any other damage: EIO and a
    /// log line naming the file, not a silent EIO.
    func testUnknownHeaderVersionIsEIOAndLogged() throws {
        h.shell("mkdir \"$M/old\"; head -c 3000 /dev/urandom > \"$M/old/from-the-future.jpg\"")
        let file = h.shell("find \"$B\" -type f ! -name .pvdir -size +2k").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertFalse(file.isEmpty)
        // Bytes 4-5: the format version (FORMAT.md section 4), 1 -> 99.
        h.shell("printf '\\x63\\x00' | dd of='\(file)' bs=1 seek=4 conv=notrunc status=none; echo 3 > /proc/sys/vm/drop_caches")
        XCTAssertNotEqual(h.shellStatus("cat \"$M/old/from-the-future.jpg\" > /dev/null").status, 0)
        XCTAssertTrue(h.logLines.all.contains { $0.contains("EIO") && $0.contains("/old/from-the-future.jpg")
                                                && $0.contains("unknown format version 99") }, "log lines: \(h.logLines.all)")
    }

    /// The background daemon logs to syslog, which the journal keeps on disk: its lines say
    /// what failed without any plaintext name (the foreground mount's terminal gets them).
    func testBackgroundLogLinesNameNoPlaintextPath() throws {
        h.cleanUp()
        h = try Self.startEncrypted(master: master, logsPlaintextPaths: false)
        h.shell("mkdir \"$M/secret-album\"; head -c 20000 /dev/zero > \"$M/secret-album/victim.jpg\"")
        h.shell("echo a > \"$M/secret-album/good\"; echo b > \"$M/secret-album/renamed-underneath\"")
        let file = h.shell("find \"$B\" -type f -size +10k").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertFalse(file.isEmpty)
        let offset = 128 + 4096 + Self.layout.overhead + 100
        h.shell("printf '\\xff' | dd of='\(file)' bs=1 seek=\(offset) conv=notrunc status=none; echo 3 > /proc/sys/vm/drop_caches")
        XCTAssertNotEqual(h.shellStatus("dd if=\"$M/secret-album/victim.jpg\" of=/dev/null bs=4096 skip=1 count=1 iflag=direct").status, 0)
        // And an entry whose encrypted name no longer authenticates.
        h.shell("""
        d=$(find "$B" -mindepth 1 -maxdepth 1 -type d)
        f=$(ls "$d" | grep -v '^.pvdir$' | head -1)
        mv "$d/$f" "$d/AAAA${f:4}"
        """)
        XCTAssertEqual(h.shell("ls \"$M/secret-album\"").split(separator: "\n").count, 2)
        let lines = h.logLines.all
        XCTAssertTrue(lines.contains { $0.contains("EIO") }, "log lines: \(lines)")
        XCTAssertTrue(lines.contains { $0.contains("fails authentication") }, "log lines: \(lines)")
        for name in ["secret-album", "victim", "good", "renamed-underneath"] {
            XCTAssertFalse(lines.contains { $0.contains(name) }, "'\(name)' in the log: \(lines)")
        }
    }

    func testTamperedNameIsSkippedAndLogged() throws {
        h.shell("mkdir \"$M/dir\"; echo a > \"$M/dir/good\"; echo b > \"$M/dir/bad\"")
        // Rename one backing entry to another valid-looking but unauthenticated name.
        h.shell("""
        d=$(find "$B" -mindepth 1 -maxdepth 1 -type d)
        f=$(ls "$d" | grep -v '^.pvdir$' | head -1)
        mv "$d/$f" "$d/AAAA${f:4}"
        """)
        let listing = h.shell("ls \"$M/dir\"")
        XCTAssertEqual(listing.split(separator: "\n").count, 1, listing)
        XCTAssertTrue(h.logLines.all.contains { $0.contains("fails authentication") && $0.contains("/dir") }, "\(h.logLines.all)")
    }

    func testVirtualAttributes() throws {
        h.shell("""
        mkdir "$M/d"; echo x > "$M/d/f"
        test "$(getfattr --only-values -n user.photovault.class "$M/d/f")" = complete
        test "$(getfattr --only-values -n user.photovault.class "$M/d")" = complete
        test "$(getfattr --only-values -n user.xdg.robots.index "$M/d")" = false
        test "$(getfattr --only-values -n user.xdg.robots.backup "$M")" = false
        ! getfattr -d -m - "$M/d" "$M/d/f" | grep -q 'user\\.' || exit 1
        ! setfattr -n user.xdg.robots.index -v true "$M/d" 2>/dev/null || exit 1
        setfattr -n user.xdg.robots.index -v false "$M/d"
        setfattr -x user.xdg.robots.backup "$M/d"
        test "$(getfattr --only-values -n user.xdg.robots.backup "$M/d")" = false
        setfattr -n user.photovault.class -v none "$M/d/f"
        test "$(getfattr --only-values -n user.photovault.class "$M/d/f")" = none
        test "$(cat "$M/d/f")" = x
        ! setfattr -n user.photovault.class -v bogus "$M/d/f" 2>/dev/null || exit 1
        test "$(getfattr --only-values -n user.photovault.class "$M/d/f")" = none
        setfattr -n user.photovault.class -v until-first-auth "$M/d"
        test "$(getfattr --only-values -n user.photovault.class "$M/d")" = until-first-auth
        echo y > "$M/d/new"
        test "$(getfattr --only-values -n user.photovault.class "$M/d/new")" = until-first-auth
        mkdir "$M/d/sub"; echo z > "$M/d/sub/g"
        test "$(getfattr --only-values -n user.photovault.class "$M/d/sub/g")" = until-first-auth
        """)
        let r = h.shellStatus("setfattr -n user.xdg.robots.index -v true \"$M\"")
        XCTAssertTrue(r.err.contains("not permitted"), r.err)
        // The stored header carries the class: check below the mount, without keys.
        XCTAssertFalse(h.backingBytes().range(of: Data("until-first-auth".utf8)) != nil)
    }

    func testLockFollowsDataProtectionClasses() throws {
        h.shell("""
        mkdir "$M/A" "$M/B" "$M/C" "$M/D"
        setfattr -n user.photovault.class -v complete-unless-open "$M/B"
        setfattr -n user.photovault.class -v until-first-auth "$M/C"
        setfattr -n user.photovault.class -v none "$M/D"
        for d in A B C D; do echo "data-$d" > "$M/$d/f"; done
        """)
        func openFile(_ p: String, _ flags: Int32 = O_RDWR) -> Int32 { open(h.mountpoint + p, flags) }
        let a = openFile("/A/f"), b = openFile("/B/f"), c = openFile("/C/f")
        XCTAssertTrue(a >= 0 && b >= 0 && c >= 0)
        defer { close(a); close(b); close(c) }
        var counts = h.fs.statusCounts()
        XCTAssertEqual(counts[.complete], 1)
        XCTAssertEqual(counts[.completeUnlessOpen], 1)
        XCTAssertEqual(counts[.untilFirstAuth], 1)
        XCTAssertEqual(h.fs.openWriteHandles(of: .complete), 1)

        h.fs.lock()
        var buf = [UInt8](repeating: 0, count: 6)
        XCTAssertEqual(pread(a, &buf, 6, 0), -1, "complete: open handles lose access")
        XCTAssertEqual(errno, EACCES)
        // A whole page needs no read first: with the writeback cache the kernel would take it
        // into its cache and fail only at writeback, unless the daemon refuses at once.
        let page = [UInt8](repeating: 0x41, count: 4096)
        XCTAssertEqual(pwrite(a, page, page.count, 0), -1, "complete: a write after lock is refused at once")
        XCTAssertEqual(errno, EACCES)
        XCTAssertEqual(pread(b, &buf, 6, 0), 6, "complete-unless-open: open handles keep working")
        XCTAssertEqual(String(decoding: buf, as: UTF8.self), "data-B")
        XCTAssertEqual(pwrite(b, "DATA-B", 6, 0), 6)
        XCTAssertEqual(pread(c, &buf, 6, 0), 6, "until-first-auth keeps working")

        let again = openFile("/B/f", O_RDONLY)
        XCTAssertEqual(again, -1, "complete-unless-open: no re-open while locked")
        XCTAssertEqual(errno, EACCES)
        XCTAssertEqual(openFile("/A/f", O_RDONLY), -1)
        XCTAssertEqual(errno, EACCES)
        let d = openFile("/D/f", O_RDONLY)
        XCTAssertGreaterThanOrEqual(d, 0, "none: no lock restriction")
        close(d)
        // New files can still be created in a complete-unless-open directory (sealed to the public key)...
        let n = open(h.mountpoint + "/B/new", O_CREAT | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(n, 0)
        XCTAssertEqual(write(n, "fresh", 5), 5)
        XCTAssertEqual(close(n), 0)
        // ...but not in a complete one.
        XCTAssertEqual(open(h.mountpoint + "/A/new", O_CREAT | O_WRONLY, 0o644), -1)
        counts = h.fs.statusCounts()
        XCTAssertEqual(counts[.completeUnlessOpen], 1)
        // Names stay readable: listing works while locked.
        XCTAssertEqual(h.shell("ls \"$M/A\""), "f\n")
    }

    /// What a read-write handle wrote before the lock is in the store, though it was still in
    /// the kernel's cache (writeback cache) when the lock came: `lock()` makes the kernel write
    /// it back while the keys exist. Read back after a remount.
    func testWritesCachedBeforeLockReachTheStore() throws {
        h.shell("mkdir \"$M/A\"")
        let fd = open(h.mountpoint + "/A/db", O_RDWR | O_CREAT, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let data = [UInt8]((0..<(16 * 4096 + 100)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
        XCTAssertEqual(pwrite(fd, data, data.count, 0), data.count)
        h.fs.lock()
        var buf = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(pread(fd, &buf, 16, 0), -1, "complete: the handle loses access at lock")
        XCTAssertEqual(close(fd), 0, "nothing was left to write back at close")
        try remounted {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: h.mountpoint + "/A/db")), Data(data))
        }
    }

    /// A reader racing the lock: whatever it read while the keys still existed, no page of a
    /// `complete` file may be served from the kernel's cache to its open handle afterwards.
    func testLockLeavesNoCompletePageCachedForAReaderRacingIt() throws {
        h.shell("mkdir \"$M/A\"")
        let served = try pagesServedAfter(racing: "/A/big") { h.fs.lock() }
        XCTAssertEqual(served.count, 0, "complete pages served after lock, first at \(served.first ?? -1)")
    }

    /// The same race with `wipeAll()` (unmount, lock with no grace left), for any class.
    func testWipeAllLeavesNoPageCachedForAReaderRacingIt() throws {
        h.shell("mkdir \"$M/D\"; setfattr -n user.photovault.class -v none \"$M/D\"")
        let served = try pagesServedAfter(racing: "/D/big") { h.fs.wipeAll() }
        XCTAssertEqual(served.count, 0, "pages served after the wipe, first at \(served.first ?? -1)")
    }

    /// Writes 16 MiB to `path`, reads it cold all over from another thread, runs `action`
    /// once reads are under way, stops the reader and returns the offsets of the 4 KiB pages
    /// the still-open handle can read afterwards.
    private func pagesServedAfter(racing path: String, _ action: () -> Void) throws -> [Int] {
        let size = 16 << 20
        h.shell("head -c \(size) /dev/urandom > \"$M\(path)\"")
        struct RaceNotSetUp: Error { let why: String }
        let fd = open(h.mountpoint + path, O_RDONLY)
        guard fd >= 0 else { throw RaceNotSetUp(why: "open \(path): errno \(errno)") }
        defer { close(fd) }
        final class Reader: @unchecked Sendable {
            let lock = NSLock()
            var stop = false
            var reads = 0
        }
        let r = Reader()
        let done = DispatchSemaphore(value: 0)
        // Cold reads all over the file, so READs keep reaching the daemon during `action`.
        let t = Thread {
            var buf = [UInt8](repeating: 0, count: 65536)
            var off = 0
            while !r.lock.withLock({ r.stop }) {
                if pread(fd, &buf, buf.count, off_t(off)) > 0 { r.lock.withLock { r.reads += 1 } }
                off = (off + 7 * 65536 + 4096) % size
            }
            done.signal()
        }
        t.start()
        let deadline = Date().addingTimeInterval(10)
        while r.lock.withLock({ r.reads }) < 20 {
            guard Date() < deadline else {
                r.lock.withLock { r.stop = true }
                throw RaceNotSetUp(why: "the reader did not get going")
            }
            usleep(1000)
        }
        action()
        r.lock.withLock { r.stop = true }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        var buf = [UInt8](repeating: 0, count: 4096)
        return stride(from: 0, to: size, by: 4096).filter { pread(fd, &buf, 4096, off_t($0)) >= 0 }
    }

    func testWipeAllRefusesRequestsWithoutCrashing() throws {
        h.shell("mkdir \"$M/d\"; echo secret > \"$M/d/f\"")
        let fd = open(h.mountpoint + "/d/f", O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        h.fs.wipeAll()
        var buf = [UInt8](repeating: 0, count: 6)
        XCTAssertEqual(pread(fd, &buf, 6, 0), -1)
        XCTAssertEqual(close(fd), 0)
        let r = h.shellStatus("ls \"$M/d\" && cat \"$M/d/f\"")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.err.contains("Permission denied"), r.err)
        XCTAssertTrue(h.stop(), "unmount after a wipe still ends run()")
    }

    /// Write-only handles bypass the page cache (`MountOptions.directWrites`): what they
    /// write leaves no page cached, and a reader's cached pages and its mapping of the file
    /// see the new bytes at once. (With the writeback cache, which turns the bypass off, the
    /// writes are cached and the readers' view must be just as fresh.)
    func testWriteOnlyHandlesBypassThePageCacheAndReadersStayCoherent() throws {
        // The mount's decision: direct writes are on by default, off with the writeback
        // cache and before Linux 6.6.
        XCTAssertEqual(h.fs.writeOnlyBypassesCache, !writebackCache && KernelRelease.directWritesKeepCachesCoherent)
        let direct = h.mountpoint + "/direct.bin", cached = h.mountpoint + "/cached.bin"
        let mib = [UInt8]((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        // Each file is mapped (not read) before it is written, and its pages are counted
        // right after the write, before anything asks for its attributes (a changed mtime
        // makes the kernel drop a file's pages then, whichever way they came).
        for (path, mode) in [(direct, O_WRONLY), (cached, O_RDWR)] {
            XCTAssertEqual(h.shell("touch \"\(path)\" && echo ok"), "ok\n")
            let r = open(path, O_RDONLY)
            XCTAssertGreaterThanOrEqual(r, 0)
            let map = try XCTUnwrap(mmap(nil, mib.count, PROT_READ, MAP_SHARED, r, 0))
            XCTAssertNotEqual(map, MAP_FAILED)
            let w = open(path, mode)
            XCTAssertGreaterThanOrEqual(w, 0)
            XCTAssertEqual(write(w, mib, mib.count), mib.count)
            var vec = [UInt8](repeating: 0, count: mib.count / 4096)
            XCTAssertEqual(mincore(map, mib.count, &vec), 0)
            let resident = vec.filter { $0 & 1 != 0 }.count
            if mode == O_WRONLY && h.fs.writeOnlyBypassesCache {
                XCTAssertEqual(resident, 0, "a write-only handle filled the page cache")
            } else if mode == O_WRONLY {
                XCTAssertEqual(resident, 256, "with the writeback cache or before Linux 6.6, write-only handles use the cache")
            } else {
                XCTAssertEqual(resident, 256, "control: a read-write handle caches what it writes, and mincore sees it")
            }
            XCTAssertEqual(close(w), 0)
            munmap(map, mib.count)
            close(r)
        }
        XCTAssertEqual(h.shell("cmp \"$M/direct.bin\" \"$M/cached.bin\" && echo same"), "same\n")

        // A reader with the file cached and mapped, then a write-only writer.
        let r = open(direct, O_RDONLY)
        XCTAssertGreaterThanOrEqual(r, 0)
        defer { close(r) }
        var head = [UInt8](repeating: 0, count: 65536)
        XCTAssertEqual(pread(r, &head, head.count, 0), head.count)
        XCTAssertGreaterThanOrEqual(try residentPages(direct), 16, "control: the reader's pages are cached, and seen")
        let map = try XCTUnwrap(mmap(nil, 65536, PROT_READ, MAP_SHARED, r, 0))
        XCTAssertNotEqual(map, MAP_FAILED)
        defer { munmap(map, 65536) }
        XCTAssertEqual(map.load(fromByteOffset: 4096, as: UInt8.self), mib[4096])

        let w = open(direct, O_WRONLY)
        XCTAssertGreaterThanOrEqual(w, 0)
        XCTAssertEqual(pwrite(w, [UInt8](repeating: 0x42, count: 8192), 8192, 0), 8192)
        XCTAssertEqual(pwrite(w, Array("xyz!".utf8), 4, 10), 4)
        XCTAssertEqual(pwrite(w, [UInt8](repeating: 0x43, count: 100), 100, off_t(mib.count)), 100)
        XCTAssertEqual(close(w), 0)

        let expected = [UInt8](repeating: 0x42, count: 10) + Array("xyz!".utf8) + [UInt8](repeating: 0x42, count: 8192 - 14)
        var now = [UInt8](repeating: 0, count: 8192 + 8)
        XCTAssertEqual(pread(r, &now, now.count, 0), now.count)
        XCTAssertEqual(Array(now[0..<8192]), expected, "the reader's cached pages went stale")
        XCTAssertEqual(Array(now[8192...]), Array(mib[8192..<8200]))
        let mapped = (0..<8192).map { map.load(fromByteOffset: $0, as: UInt8.self) }
        XCTAssertEqual(mapped, expected, "the reader's mapping went stale")
        var st = stat()
        XCTAssertEqual(fstat(r, &st), 0)
        XCTAssertEqual(st.st_size, off_t(mib.count + 100))
        XCTAssertEqual(h.shell("tail -c 100 \"$M/direct.bin\" | tr -d C | wc -c"), "0\n")
    }

    /// Pages of `path` in the page cache (mincore over a fresh read-only mapping).
    private func residentPages(_ path: String) throws -> Int {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size > 0 else { return 0 }
        let size = Int(st.st_size)
        guard let m = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), m != MAP_FAILED else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        defer { munmap(m, size) }
        var vec = [UInt8](repeating: 0, count: (size + 4095) / 4096)
        guard mincore(m, size, &vec) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return vec.filter { $0 & 1 != 0 }.count
    }

    private func rm(_ p: String) { unlink(p) }
}

/// Every test of the base class, with the writeback cache. Linux test discovery finds a class
/// only if it declares a test method itself; once found, all of its tests run here, inherited
/// ones too. With none of the overrides below, the class is not listed and none of them run
/// (checked with `swift test list`: 12 tests with them, 0 without).
final class EncryptedWritebackMountTests: EncryptedMountTests {
    override var writebackCache: Bool { true }
    override func testRoundTripWithRealToolsLeavesOnlyCiphertext() throws { try super.testRoundTripWithRealToolsLeavesOnlyCiphertext() }
    override func testContentSurvivesRemount() throws { try super.testContentSurvivesRemount() }
    override func testLockFollowsDataProtectionClasses() throws { try super.testLockFollowsDataProtectionClasses() }
    override func testWritesCachedBeforeLockReachTheStore() throws { try super.testWritesCachedBeforeLockReachTheStore() }
    override func testWipeAllRefusesRequestsWithoutCrashing() throws { try super.testWipeAllRefusesRequestsWithoutCrashing() }
    override func testLockLeavesNoCompletePageCachedForAReaderRacingIt() throws { try super.testLockLeavesNoCompletePageCachedForAReaderRacingIt() }
    override func testWipeAllLeavesNoPageCachedForAReaderRacingIt() throws { try super.testWipeAllLeavesNoPageCachedForAReaderRacingIt() }
}
