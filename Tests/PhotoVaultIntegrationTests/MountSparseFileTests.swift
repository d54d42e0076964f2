import Foundation
import XCTest

/// Sparse files through a real mount (issue 34, items 1 and 2; FORMAT.md section 5, "Holes"):
/// holes cost the store nothing, `SEEK_DATA`/`SEEK_HOLE` find them, `st_blocks` tells,
/// `fallocate` punches and zeroes ranges, and the tools that look for holes (`cp --sparse`,
/// `fallocate -d`, `du`) see them. Every store is a small file system of its own.
final class MountSparseFileTests: XCTestCase {
    private func usedKiB(_ sb: Sandbox) -> Int {
        Int(sb.ok("sync && df --output=used \(Sandbox.quote(sb.store)) | tail -1").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// The hole maps in the user's tree root (`~<32 hex>.holes`).
    private func holeMaps(_ sb: Sandbox) -> [String] {
        sb.ok("find \(Sandbox.quote(sb.store))/users -maxdepth 2 -name '~*.holes' -printf '%f\\n'")
            .split(separator: "\n").map(String.init)
    }

    func testHolesCostNothingAndToolsFindThem() {
        let sb = Sandbox("pv-sparse")
        let release = sb.storeOnOwnFilesystem(size: "48m")
        defer { release() }
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        let used = usedKiB(sb)
        // A 10 GiB truncate and one byte written past 2 GiB (pjdfstest open/25.t) on a 48 MiB store.
        sb.ok("truncate -s 10G \(q)/big && printf x | dd of=\(q)/far bs=1 seek=2147483649 status=none")
        // The header's block, and the far byte's chunk.
        XCTAssertEqual(sb.ok("stat -c '%s %b' \(q)/big \(q)/far"), "10737418240 8\n2147483650 16\n")
        XCTAssertLessThan(usedKiB(sb) - used, 256, "holes must cost the store nothing")
        XCTAssertEqual(sb.ok("head -c 1000000 \(q)/big | tr -d '\\0' | wc -c; tail -c 2 \(q)/far | od -An -c | tr -d ' '"), "0\n\\0x\n")
        XCTAssertEqual(holeMaps(sb).count, 2)
        // A sparse source copied with cp --sparse=always stays sparse, byte for byte.
        let src = sb.plainDir("src")
        let qs = Sandbox.quote(src)
        sb.ok("head -c 300000 /dev/urandom > \(qs)/s && truncate -s 500M \(qs)/s && head -c 5000 /dev/urandom >> \(qs)/s")
        sb.ok("cp --sparse=always \(qs)/s \(q)/s && cmp \(qs)/s \(q)/s")
        XCTAssertLessThan(usedKiB(sb) - used, 2048)
        // SEEK_DATA / SEEK_HOLE as a local file system reports them (in 4 KiB chunks).
        let py = """
        import os, sys
        fd = os.open(sys.argv[1], os.O_RDONLY)
        print(os.lseek(fd, 0, os.SEEK_HOLE), os.lseek(fd, 400000, os.SEEK_DATA), os.lseek(fd, 400000, os.SEEK_HOLE))
        """
        XCTAssertEqual(sb.ok("python3 -c \(Sandbox.quote(py)) \(q)/s"), "303104 524288000 400000\n")
        // fallocate: dig holes in zeros written as data, punch, zero a range.
        sb.ok("head -c 8M /dev/zero > \(q)/z && head -c 4096 /dev/urandom >> \(q)/z && cp \(q)/z \(qs)/z")
        let beforeDig = usedKiB(sb)
        sb.ok("fallocate -d \(q)/z && cmp \(qs)/z \(q)/z")
        XCTAssertLessThan(usedKiB(sb), beforeDig - 7000, "fallocate -d must give the zeros' space back")
        sb.ok("head -c 1M /dev/urandom > \(qs)/p && cp \(qs)/p \(q)/p")
        sb.ok("fallocate -p -o 10000 -l 500000 \(q)/p && fallocate -p -o 10000 -l 500000 \(qs)/p && cmp \(qs)/p \(q)/p")
        sb.ok("fallocate -z -o 700000 -l 500000 \(q)/p && fallocate -z -o 700000 -l 500000 \(qs)/p && cmp \(qs)/p \(q)/p")
        XCTAssertEqual(sb.ok("stat -c %s \(q)/p"), "1200000\n")
        // Everything reads the same from a fresh daemon, and fsck finds the store sound.
        mp = sb.remount(mp)
        sb.ok("cmp \(qs)/s \(Sandbox.quote(mp))/s && cmp \(qs)/p \(Sandbox.quote(mp))/p && cmp \(qs)/z \(Sandbox.quote(mp))/z")
        sb.unmount(mp)
        let r = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        // Offline export reads the holes too.
        let out = sb.plainDir("out")
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["export", "/s", out]).status, 0)
        sb.ok("cmp \(qs)/s \(Sandbox.quote(out))/s")
    }

    /// A hole map goes with its file's last link (unlink, rename over it, also while the
    /// file is open) and stays while a hard link is left.
    func testAHoleMapGoesWithItsFilesLastLink() {
        let sb = Sandbox("pv-sparse-links")
        let release = sb.storeOnOwnFilesystem(size: "32m")
        defer { release() }
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        for n in ["a", "b", "c", "d"] { sb.ok("truncate -s 1G \(q)/\(n)") }
        XCTAssertEqual(holeMaps(sb).count, 4)
        sb.ok("rm \(q)/a")
        XCTAssertEqual(holeMaps(sb).count, 3, "unlink")
        sb.ok("echo x > \(q)/x && mv \(q)/x \(q)/b")
        XCTAssertEqual(holeMaps(sb).count, 2, "rename over")
        sb.ok("ln \(q)/c \(q)/c2 && rm \(q)/c")
        XCTAssertEqual(holeMaps(sb).count, 2, "a hard link is left")
        XCTAssertEqual(sb.ok("stat -c %s \(q)/c2"), "1073741824\n")
        sb.ok("rm \(q)/c2")
        XCTAssertEqual(holeMaps(sb).count, 1)
        // Open, unlinked, read through its handle, then closed.
        let py = """
        import os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        os.unlink(sys.argv[1])
        os.truncate(fd, 2 << 30)
        print(os.pread(fd, 4, 1 << 30) == bytes(4))
        os.close(fd)
        """
        XCTAssertEqual(sb.ok("python3 -c \(Sandbox.quote(py)) \(q)/d"), "True\n")
        XCTAssertEqual(holeMaps(sb), [], "an unlinked file's map goes when it is closed")
        sb.unmount(mp)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0)
    }

    /// Written ciphertext zeroed or punched underneath reads as EIO, never as zeros, in a file
    /// whose holes read as zeros; fsck names exactly those chunks.
    func testZeroedCiphertextIsEIOBesideRealHoles() {
        let sb = Sandbox("pv-sparse-tamper")
        let release = sb.storeOnOwnFilesystem(size: "32m")
        defer { release() }
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("head -c 65536 /dev/urandom > \(q)/f && truncate -s 100M \(q)/f")
        let cipher = sb.ok("find \(Sandbox.quote(sb.store))/users -inum $(stat -c %i \(q)/f)").trimmingCharacters(in: .whitespacesAndNewlines)
        sb.unmount(mp)
        let stride = Int(sb.ok("stat -c %s \(Sandbox.quote(cipher))").trimmingCharacters(in: .whitespacesAndNewlines))!
        XCTAssertGreaterThan(stride, 100 << 20)
        // Chunk 3 zeroed, chunk 5 punched underneath (offsets from the header on; one sealed
        // chunk is 4096 plus the cipher's overhead, 28 or 40).
        let overhead = sb.ok("head -c 8 \(Sandbox.quote(cipher)) | od -An -tu1").split(whereSeparator: { $0 == " " || $0 == "\n" }).map { Int($0)! }[7] == 1 ? 28 : 40
        let slot = 4096 + overhead
        sb.ok("dd if=/dev/zero of=\(Sandbox.quote(cipher)) bs=1 seek=\(128 + 3 * slot) count=\(slot) conv=notrunc status=none")
        sb.ok("fallocate -p -o \(128 + 5 * slot) -l \(slot) \(Sandbox.quote(cipher))")
        mp = sb.mount()
        let q2 = Sandbox.quote(mp)
        XCTAssertTrue(sb.run("dd if=\(q2)/f bs=4096 skip=3 count=1 status=none | wc -c").stderr.contains("Input/output error"))
        XCTAssertTrue(sb.run("dd if=\(q2)/f bs=4096 skip=5 count=1 status=none | wc -c").stderr.contains("Input/output error"))
        XCTAssertEqual(sb.ok("dd if=\(q2)/f bs=4096 skip=100 count=1 status=none | tr -d '\\0' | wc -c"), "0\n", "a real hole reads as zeros")
        sb.unmount(mp)
        let r = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(r.status, 21, r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("/f: chunkDamaged: 2 of 25600 chunks failed authentication (chunk 3, 5)"), r.stdout)
    }
}
