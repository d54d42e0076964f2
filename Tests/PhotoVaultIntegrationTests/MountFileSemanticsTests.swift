import Foundation
import XCTest

/// POSIX file semantics seen through the mount by ordinary tools: hard links, renames,
/// truncation, concurrent appends, overwrite under an open descriptor, mmap.
final class MountFileSemanticsTests: XCTestCase {
    func testHardLinks() {
        let sb = Sandbox("pv-link")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/a \(q)/b && printf 'LINKED-CONTENT-one\\n' > \(q)/a/orig.jpg && ln \(q)/a/orig.jpg \(q)/b/other-name.jpg")
        XCTAssertEqual(sb.ok("stat -c %h \(q)/a/orig.jpg \(q)/b/other-name.jpg"), "2\n2\n")
        XCTAssertEqual(sb.ok("stat -c %i \(q)/a/orig.jpg"), sb.ok("stat -c %i \(q)/b/other-name.jpg"))
        // Content is shared: a write through one name is read through the other.
        sb.ok("printf 'LINKED-CONTENT-two\\n' >> \(q)/b/other-name.jpg")
        XCTAssertEqual(sb.ok("cat \(q)/a/orig.jpg"), "LINKED-CONTENT-one\nLINKED-CONTENT-two\n")
        // Removing one name keeps the other, with a link count of 1.
        sb.ok("rm \(q)/a/orig.jpg")
        XCTAssertEqual(sb.ok("stat -c %h \(q)/b/other-name.jpg"), "1\n")
        XCTAssertEqual(sb.ok("cat \(q)/b/other-name.jpg"), "LINKED-CONTENT-one\nLINKED-CONTENT-two\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/a/orig.jpg"))
        sb.remount(mp)
        XCTAssertEqual(sb.ok("cat \(q)/b/other-name.jpg"), "LINKED-CONTENT-one\nLINKED-CONTENT-two\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["LINKED-CONTENT", "orig.jpg", "other-name"])
    }

    func testRenameNonEmptyDirectory() {
        let sb = Sandbox("pv-rename")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("""
        set -e
        mkdir -p \(q)/Trip-Before/day1/raw \(q)/Elsewhere
        for i in 1 2 3; do printf 'RENAMED-DIR-photo-%s\\n' $i > \(q)/Trip-Before/day1/p$i.jpg; done
        head -c 300000 /dev/urandom > \(q)/Trip-Before/day1/raw/big.raw
        ln -s ../p1.jpg \(q)/Trip-Before/day1/raw/link
        """)
        let digest = sb.ok("cd \(q)/Trip-Before && find . -type f | sort | xargs sha256sum")
        sb.ok("mv \(q)/Trip-Before \(q)/Elsewhere/Trip-After")
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/Trip-Before"))
        XCTAssertEqual(sb.ok("cd \(q)/Elsewhere/Trip-After && find . -type f | sort | xargs sha256sum"), digest)
        XCTAssertEqual(sb.ok("cat \(q)/Elsewhere/Trip-After/day1/raw/link"), "RENAMED-DIR-photo-1\n")
        // New files in the renamed directory, and a rename back up one level.
        sb.ok("printf 'RENAMED-DIR-new\\n' > \(q)/Elsewhere/Trip-After/day1/new.jpg && mv \(q)/Elsewhere/Trip-After/day1 \(q)/Day-One")
        sb.remount(mp)
        XCTAssertEqual(sb.ok("cd \(q) && find . | LC_ALL=C sort"),
                       ".\n./Day-One\n./Day-One/new.jpg\n./Day-One/p1.jpg\n./Day-One/p2.jpg\n./Day-One/p3.jpg\n./Day-One/raw\n./Day-One/raw/big.raw\n./Day-One/raw/link\n./Elsewhere\n./Elsewhere/Trip-After\n")
        XCTAssertEqual(sb.ok("cat \(q)/Day-One/p2.jpg \(q)/Day-One/new.jpg \(q)/Day-One/raw/link"),
                       "RENAMED-DIR-photo-2\nRENAMED-DIR-new\nRENAMED-DIR-photo-1\n")
        XCTAssertEqual(sb.ok("cd \(q)/Day-One && sha256sum raw/big.raw"),
                       digest.split(separator: "\n").first { $0.hasSuffix("raw/big.raw") }.map { $0.replacingOccurrences(of: "./day1/", with: "") + "\n" })
        sb.unmount(mp)
        sb.assertNoPlaintext(["RENAMED-DIR", "Trip-Before", "Trip-After", "Day-One", "Elsewhere"])
    }

    /// Editors and photo tools save by writing a temporary file and renaming it over the
    /// original; long (255-byte) names move between directories; a directory replaces an
    /// empty one.
    func testRenameOverExistingAndLongNamesAcrossDirectories() {
        let sb = Sandbox("pv-rename2")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        let long = String(repeating: "N", count: 200) + "-" + String(repeating: "ü", count: 25) + ".jpg"
        XCTAssertEqual(long.utf8.count, 255)
        let ql = Sandbox.quote(long)
        sb.ok("""
        set -e
        mkdir \(q)/From \(q)/To \(q)/EmptyTarget \(q)/SourceDir
        printf 'REPLACE-OLD\\n' > \(q)/From/edit.jpg
        printf 'REPLACE-NEW\\n' > \(q)/From/.edit.jpg.tmp
        mv -f \(q)/From/.edit.jpg.tmp \(q)/From/edit.jpg
        printf 'LONGNAME-CONTENT\\n' > \(q)/From/\(ql)
        mv \(q)/From/\(ql) \(q)/To/\(ql)
        printf 'SRCDIR-CONTENT\\n' > \(q)/SourceDir/inside.jpg
        mv -T \(q)/SourceDir \(q)/EmptyTarget
        """)
        XCTAssertEqual(sb.ok("ls -A \(q)/From"), "edit.jpg\n")
        XCTAssertEqual(sb.ok("cat \(q)/From/edit.jpg"), "REPLACE-NEW\n")
        XCTAssertEqual(sb.ok("ls \(q)/To"), long + "\n")
        // Renaming onto a non-empty directory is refused, as on ext4.
        sb.ok("mkdir \(q)/Busy && touch \(q)/Busy/x && mkdir \(q)/Mover")
        let r = sb.run("mv -T \(q)/Mover \(q)/Busy")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("Directory not empty") || r.stderr.contains("File exists"), r.stderr)
        sb.remount(mp)
        XCTAssertEqual(sb.ok("cat \(q)/From/edit.jpg \(q)/To/\(ql) \(q)/EmptyTarget/inside.jpg"),
                       "REPLACE-NEW\nLONGNAME-CONTENT\nSRCDIR-CONTENT\n")
        XCTAssertEqual(sb.ok("cd \(q) && find . -mindepth 1 -maxdepth 1 | LC_ALL=C sort"),
                       "./Busy\n./EmptyTarget\n./From\n./Mover\n./To\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["REPLACE-", "LONGNAME-", "SRCDIR-", "NNNNNNNNNNNNNNNN", "üüüü", "edit.jpg", "EmptyTarget"])
    }

    /// Names are 1–255 bytes, as on ext4 and as statfs says (FUSE itself would pass up to
    /// 1024): longer ones are refused for every way of making a name, and for lookups.
    func testNamesOverTwoHundredFiftyFiveBytesAreRefused() {
        let sb = Sandbox("pv-namemax")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        XCTAssertEqual(sb.ok("getconf NAME_MAX \(q)"), "255\n")
        let ok255 = String(repeating: "n", count: 253) + "é"        // 255 bytes
        sb.ok("printf x > \(q)/\(Sandbox.quote(ok255))")
        for tooLong in [String(repeating: "n", count: 254) + "é", String(repeating: "k", count: 1000)] {
            XCTAssertGreaterThan(tooLong.utf8.count, 255)
            let t = Sandbox.quote(tooLong)
            for cmd in ["printf x > \(q)/\(t)", "mkdir \(q)/\(t)", "ln -s target \(q)/\(t)", "mkfifo \(q)/\(t)",
                        "ln \(q)/\(Sandbox.quote(ok255)) \(q)/\(t)", "mv \(q)/\(Sandbox.quote(ok255)) \(q)/\(t)",
                        "stat \(q)/\(t)"] {
                let r = sb.run(cmd)
                XCTAssertNotEqual(r.status, 0, "\(cmd.prefix(60)) succeeded")
                XCTAssertTrue(r.stderr.contains("File name too long"), "\(cmd.prefix(60)): \(r.stderr.prefix(300))")
            }
        }
        XCTAssertEqual(sb.ok("ls \(q)"), ok255 + "\n")
        sb.unmount(mp)
    }

    func testTruncateUpAndDown() {
        let sb = Sandbox("pv-trunc")
        sb.initStore()
        let mp = sb.mount()
        let f = Sandbox.quote(mp + "/t.bin")
        let ref = Sandbox.quote(sb.plainDir("ref") + "/t.bin")
        // The same steps on the mount and on a plain file, compared after each step.
        let steps = [
            "head -c 100000 /dev/zero | tr '\\0' 'A' > F",
            "truncate -s 300000 F",          // up, across several chunks
            "truncate -s 70000 F",           // down, inside a chunk
            "truncate -s 65536 F",           // down, onto a 64 KiB boundary
            "printf 'TRUNC-TAIL' >> F",
            "truncate -s 1000000 F",         // up again
            "truncate -s 0 F",
            "truncate -s 5000 F",            // up from empty: zeros only
        ]
        for step in steps {
            sb.ok(step.replacingOccurrences(of: "F", with: f))
            sb.ok(step.replacingOccurrences(of: "F", with: ref))
            sb.ok("cmp \(f) \(ref)")
        }
        XCTAssertEqual(sb.ok("stat -c %s \(f)"), "5000\n")
        XCTAssertEqual(sb.ok("tr -d '\\0' < \(f) | wc -c"), "0\n", "the extended part must read as zeros")
        // Zeros in the middle after an extension past written data.
        sb.ok("printf 'TRUNC-HEAD' > \(f) && truncate -s 200000 \(f)")
        XCTAssertEqual(sb.ok("head -c 10 \(f)"), "TRUNC-HEAD")
        XCTAssertEqual(sb.ok("tail -c +11 \(f) | tr -d '\\0' | wc -c"), "0\n")
        sb.remount(mp)
        XCTAssertEqual(sb.ok("stat -c %s \(f) && head -c 10 \(f) && echo && tail -c +11 \(f) | tr -d '\\0' | wc -c"),
                       "200000\nTRUNC-HEAD\n0\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["TRUNC-TAIL", "TRUNC-HEAD", "AAAAAAAAAAAAAAAA"])
    }

    /// A truncate or write past the largest file size (2^62 bytes) fails with "File too large";
    /// the daemon stays up and the file keeps its byte (a 1-byte file truncated to 9.2e18
    /// bytes, or written at that offset, killed the daemon).
    func testTruncateAndWriteBeyondTheMaximumSizeAreFileTooLarge() {
        let sb = Sandbox("pv-efbig")
        sb.initStore()
        let mp = sb.mount()
        let f = Sandbox.quote(mp + "/one.bin")
        sb.ok("printf 'Z' > \(f)")
        let huge = "9200000000000000000"
        for cmd in ["truncate -s \(huge) \(f)", "printf 'Y' | dd of=\(f) bs=1 seek=\(huge) conv=notrunc status=none"] {
            let r = sb.run(cmd)
            XCTAssertNotEqual(r.status, 0, cmd)
            XCTAssertTrue(r.stderr.contains("File too large"), "\(cmd): \(r.stderr)")
            XCTAssertTrue(Harness.isMounted(mp), "\(cmd): the mount is gone")
            XCTAssertEqual(sb.run("stat -c %s \(f) && cat \(f)").stdout, "1\nZ", "\(cmd): the file changed or the daemon died")
            sb.remount(mp)
            XCTAssertEqual(sb.run("stat -c %s \(f) && cat \(f)").stdout, "1\nZ", "\(cmd): the file changed")
        }
        sb.unmount(mp)
    }

    /// Two shells append distinct lines with `>>` at the same time: every line arrives, whole.
    func testConcurrentAppendsFromTwoProcesses() {
        let sb = Sandbox("pv-append")
        sb.initStore()
        let mp = sb.mount()
        let f = Sandbox.quote(mp + "/log.txt")
        sb.ok("""
        writer() { for i in $(seq 1 800); do echo "APPEND-$1-$i-$(printf '%0*d' $((i % 50 + 1)) 0)-end" >> \(f); done; }
        writer alpha & writer beta & wait
        """)
        let lines = sb.ok("cat \(f)").split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        XCTAssertEqual(lines.count, 1600)
        var seen: [String: Set<Int>] = ["alpha": [], "beta": []]
        for l in lines {
            let parts = l.split(separator: "-").map(String.init)
            guard parts.count == 5, parts[0] == "APPEND", parts[4] == "end", let i = Int(parts[2]),
                  parts[3] == String(repeating: "0", count: i % 50 + 1), seen[parts[1]] != nil else {
                XCTFail("torn or foreign line: \(l)"); continue
            }
            seen[parts[1]]!.insert(i)
        }
        XCTAssertEqual(seen["alpha"], Set(1...800))
        XCTAssertEqual(seen["beta"], Set(1...800))
        // Each writer's lines stay in its own order.
        for w in ["alpha", "beta"] {
            let order = lines.filter { $0.hasPrefix("APPEND-\(w)-") }.map { Int($0.split(separator: "-")[2])! }
            XCTAssertEqual(order, Array(1...800))
        }
        sb.unmount(mp)
        sb.assertNoPlaintext(["APPEND-", "log.txt"])
    }

    /// `cp` over a file another process holds open: run the same script on ext4 (the
    /// sandbox's plain directory) and on the mount; the holder must read the same thing.
    func testOverwriteWhileHeldOpenBehavesAsOnExt4() {
        let sb = Sandbox("pv-held")
        sb.initStore()
        let mp = sb.mount()
        let plain = sb.plainDir("plain")
        let script = { (dir: String) -> String in
            let d = Sandbox.quote(dir)
            return """
            set -e
            cd \(d)
            printf 'HELD-OLD-%05d\\n' $(seq 1 2000) > photo.jpg
            printf 'HELD-NEW-%05d\\n' $(seq 1 3000) > new.jpg
            printf 'HELD-MV-%05d\\n' $(seq 1 1000) > moved.jpg
            cp photo.jpg kept.jpg
            rm -f go1 go2
            # Holder 1 opens photo.jpg, waits, reads through its descriptor after a cp over it
            # (same inode, truncated and rewritten).
            bash -c 'exec 3<photo.jpg; while [ ! -e go1 ]; do sleep 0.05; done; cat <&3 > held1.out' &
            h1=$!
            # Holder 2 opens kept.jpg, which is then replaced by rename (old inode lives on).
            bash -c 'exec 3<kept.jpg; head -c 100 <&3 > /dev/null; while [ ! -e go2 ]; do sleep 0.05; done; cat <&3 > held2.out; cat /proc/self/fd/3 > held2.proc 2>&1 || true' &
            h2=$!
            sleep 0.5
            cp new.jpg photo.jpg
            touch go1
            mv moved.jpg kept.jpg
            touch go2
            wait $h1 $h2
            sha256sum held1.out held2.out photo.jpg kept.jpg
            wc -c < held2.proc
            """
        }
        let onExt4 = sb.ok(script(plain))
        let onMount = sb.ok(script(mp))
        XCTAssertEqual(onMount, onExt4)
        // And what ext4 does: holder 1 sees the new content, holder 2 the old file's rest.
        XCTAssertEqual(sb.ok("cmp \(Sandbox.quote(mp))/held1.out \(Sandbox.quote(mp))/new.jpg && echo same"), "same\n")
        XCTAssertEqual(sb.ok("wc -c < \(Sandbox.quote(mp))/held2.out"), "\(2000 * 15 - 100)\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["HELD-OLD", "HELD-NEW", "HELD-MV", "photo.jpg", "kept.jpg"])
    }

    /// Three things ext4 does that the mount once did not: pages of a mapping made through an
    /// O_APPEND descriptor are written back in place (they were appended at the end of file);
    /// O_RDONLY|O_TRUNC truncates; a truncate that keeps the size (`: > f` on an empty file,
    /// truncate(2) to the same size) still updates mtime.
    func testAppendMappingReadOnlyTruncateAndSameSizeTruncateAsOnExt4() {
        let sb = Sandbox("pv-posix-edges")
        sb.initStore()
        let mp = sb.mount()
        let plain = sb.plainDir("plain")
        let py = """
        import mmap, os, sys
        d = sys.argv[1]
        out = []
        p = os.path.join(d, "appended.bin")
        with open(p, "wb") as f:
            f.write(b"A" * 8192)
        with open(p, "a+b") as f:
            m = mmap.mmap(f.fileno(), 8192)
            m[4096:4101] = b"HELLO"
            m.flush()
            m.close()
        p = os.path.join(d, "rdonly-trunc.txt")
        with open(p, "w") as f:
            f.write("hello")
        os.close(os.open(p, os.O_RDONLY | os.O_TRUNC))
        out.append("rdonly-trunc size %d" % os.stat(p).st_size)
        p = os.path.join(d, "stamp")
        open(p, "w").close()
        os.utime(p, (1000000000, 1000000000))
        open(p, "w").close()
        out.append("empty stamp touched %s" % (os.stat(p).st_mtime > 1000000000))
        p = os.path.join(d, "same.txt")
        with open(p, "w") as f:
            f.write("abc")
        os.utime(p, (1000000000, 1000000000))
        os.truncate(p, 3)
        out.append("same-size truncate touched %s" % (os.stat(p).st_mtime > 1000000000))
        print("\\n".join(out))
        """
        let script = sb.root + "/posix_edges.py"
        try! py.write(toFile: script, atomically: true, encoding: .utf8)
        let expected = "rdonly-trunc size 0\nempty stamp touched True\nsame-size truncate touched True\n"
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(plain))"), expected, "ext4 itself")
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(mp))"), expected)
        // What the mapping wrote is in place, and the file did not grow, after a remount too.
        let check = "stat -c %s appended.bin; head -c 4101 appended.bin | tail -c 6; echo; head -c 4096 appended.bin | tr -d A | wc -c"
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(plain)) && \(check)"), "8192\nAHELLO\n0\n")
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp)) && \(check)"), "8192\nAHELLO\n0\n")
        sb.remount(mp)
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp)) && \(check)"), "8192\nAHELLO\n0\n")
        sb.unmount(mp)
    }

    /// Directories made in a setgid directory inherit the bit, also with a restrictive mode
    /// (the mount used to drop it when it set such a mode after creating the directory).
    func testSetgidDirectoriesPassTheBitOnAsOnExt4() {
        let sb = Sandbox("pv-setgid")
        sb.initStore()
        let mp = sb.mount()
        let plain = sb.plainDir("plain")
        let script = "mkdir g && chmod 2775 g && mkdir -m 500 g/x && mkdir -m 700 g/y && mkdir g/z && stat -c '%n %A' g g/x g/y g/z"
        let expected = "g drwxrwsr-x\ng/x dr-x--S---\ng/y drwx--S---\ng/z drwxr-sr-x\n"
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(plain)) && umask 022 && \(script)"), expected, "ext4 itself")
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp)) && umask 022 && \(script)"), expected)
        sb.unmount(mp)
    }

    /// `sync FILE` and `sync DIR` (fsync on a file and on a directory) reach the store: the
    /// daemon fsyncs the file's ciphertext and the directory underneath. (`sync -f`, syncfs,
    /// does not: the kernel sends FUSE's SYNCFS to virtiofs only; README says so.)
    func testFsyncOfAFileAndOfADirectoryReachesTheStore() throws {
        let sb = Sandbox("pv-fsync")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/album && head -c 300000 /dev/urandom > \(q)/album/photo.jpg")
        let pid = try XCTUnwrap(MountProbe.daemonPID(sb, mp))
        let log = sb.root + "/fsync.trace"
        let tracer = try BackgroundProcess(["/usr/bin/strace", "-f", "-qq", "-y", "-p", String(pid),
                                            "-e", "trace=fsync,fdatasync", "-o", log],
                                           output: sb.root + "/strace.out")
        XCTAssertTrue(Harness.waitUntil(5) { (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8))?
            .contains("TracerPid:\t0") == false }, "strace did not attach")
        Thread.sleep(forTimeInterval: 0.5)   // strace attaches to the daemon's threads one by one
        sb.ok("sync \(q)/album/photo.jpg && sync \(q)/album")
        Thread.sleep(forTimeInterval: 0.5)
        tracer.stop()
        let synced = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").compactMap { line -> String? in
            guard line.contains(" = 0"), let open = line.range(of: "<"), let close = line.range(of: ">)") else { return nil }
            return String(line[open.upperBound..<close.lowerBound])
        }.filter { $0.hasPrefix(sb.store + "/") }
        var isDirectory: ObjCBool = false
        XCTAssertTrue(synced.contains { FileManager.default.fileExists(atPath: $0, isDirectory: &isDirectory) && !isDirectory.boolValue },
                      "no ciphertext file fsynced: \(synced)")
        XCTAssertTrue(synced.contains { FileManager.default.fileExists(atPath: $0, isDirectory: &isDirectory) && isDirectory.boolValue },
                      "no store directory fsynced: \(synced)")
        sb.unmount(mp)
    }

    /// A shared writable mapping: stores through it reach the file (read back by another
    /// process and after a remount).
    func testMmapWriteReadBack() {
        let sb = Sandbox("pv-mmap")
        sb.initStore()
        let mp = sb.mount()
        let f = mp + "/mapped.bin"
        let py = """
        import mmap, os, sys
        path = sys.argv[1]
        size = 3 * 65536 + 1234
        with open(path, "wb") as f:
            f.write(b"\\0" * size)
        fd = os.open(path, os.O_RDWR)
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        for off in (0, 65530, 131072, size - 20):
            m[off:off + 16] = b"MMAP-WRITE%06d" % off
        m.flush()
        m.close()
        os.close(fd)
        """
        let script = sb.root + "/write_mapped.py"   // not mmap.py: that would shadow the module
        try! py.write(toFile: script, atomically: true, encoding: .utf8)
        sb.ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(f))")
        let check = """
        import sys
        data = open(sys.argv[1], "rb").read()
        size = 3 * 65536 + 1234
        assert len(data) == size, len(data)
        offs = (0, 65530, 131072, size - 20)
        for off in offs:
            assert data[off:off + 16] == b"MMAP-WRITE%06d" % off, (off, data[off:off + 16])
        rest = bytearray(data)
        for off in offs:
            rest[off:off + 16] = b"\\0" * 16
        assert rest.count(0) == size, "unexpected non-zero bytes"
        print("ok")
        """
        let checker = sb.root + "/check_mapped.py"
        try! check.write(toFile: checker, atomically: true, encoding: .utf8)
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(checker)) \(Sandbox.quote(f))"), "ok\n")
        sb.remount(mp)
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(checker)) \(Sandbox.quote(f))"), "ok\n")
        sb.unmount(mp)
        sb.assertNoPlaintext(["MMAP-WRITE", "mapped.bin"])
    }
}
