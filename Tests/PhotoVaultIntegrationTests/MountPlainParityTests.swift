import Foundation
import XCTest

/// The same steps on the mount and on a plain tmpfs directory give the same outcome: far
/// offsets, open files that are unlinked or replaced, times, modes, owners and the copy tools.
/// (scripts/mount-difftest.py runs a wider set side by side; these are the ones kept.)
final class MountPlainParityTests: XCTestCase {
    /// Writes (`dd`, pwrite, a shared mapping) across 4 GiB and across chunk index 2^32 read
    /// back as on a plain file, also after a remount, and a chunk is bound to its full 64-bit
    /// index: chunk 2^32 copied onto chunk 0's place fails to read (EIO).
    ///
    /// The file's ciphertext is extended underneath (a sparse truncate to whole chunks: the
    /// plaintext size the mount then shows), and only the new chunks at the end are written
    /// and read.
    func testOffsetsPastFourGiBAndPastChunkTwoToTheThirtyTwoAsOnAPlainFile() {
        let sb = Sandbox("pv-far")
        // The store and the plain copies on tmpfs: a 17 TB sparse file is past ext4's limit.
        let ref = sb.plainDir("ref")
        sb.ok("mount -t tmpfs -o size=64m pvfarref \(Sandbox.quote(ref))")
        defer { _ = Harness.run(["umount", "-l", ref], timeout: 10) }
        let store = sb.storeOnTmpfs()
        defer { store.remove() }
        sb.initStore()
        var mp = sb.mount()
        let chunk = 4096
        sb.ok("head -c \(chunk) /dev/urandom > \(Sandbox.quote(sb.root))/seed")
        // (name, index of the first chunk written): chunk 2^20 starts at 4 GiB.
        let files = [("past4g", (1 << 20) - 1), ("far", (1 << 32) - 1)]
        for (name, _) in files {
            sb.ok("cp \(Sandbox.quote(sb.root))/seed \(Sandbox.quote(mp))/\(name) && cp \(Sandbox.quote(sb.root))/seed \(Sandbox.quote(ref))/\(name)")
        }
        let ciphertext = Dictionary(uniqueKeysWithValues: files.map { (name, _) in
            (name, sb.ok("find \(Sandbox.quote(sb.store))/users -inum $(stat -c %i \(Sandbox.quote(mp))/\(name))")
                .trimmingCharacters(in: .whitespacesAndNewlines))
        })
        // One full chunk: the header and one sealed chunk (4096 + nonce + tag).
        let stride = Int(sb.ok("stat -c %s \(Sandbox.quote(ciphertext["far"]!))").trimmingCharacters(in: .whitespacesAndNewlines))! - 128
        XCTAssertTrue([chunk + 28, chunk + 40].contains(stride), "ciphertext of one chunk: \(stride)")
        sb.unmount(mp)
        for (name, first) in files {
            sb.ok("truncate -s \(128 + first * stride) \(Sandbox.quote(ciphertext[name]!)) && truncate -s \(first * chunk) \(Sandbox.quote(ref))/\(name)")
        }
        mp = sb.mount()

        // The same steps on both files: a pwrite of two chunks and 10 bytes at the end, a
        // pwrite across the boundary, a store through a shared mapping of the chunk after it,
        // and dd appending at the end.
        let py = """
        import mmap, os, sys
        C = 4096
        path, first = sys.argv[1], int(sys.argv[2])
        far = first * C
        fd = os.open(path, os.O_RDWR)
        assert os.fstat(fd).st_size == far, os.fstat(fd).st_size
        os.pwrite(fd, bytes((i * 7 + 3) % 251 for i in range(2 * C + 10)), far)
        os.pwrite(fd, b"ACROSS", far + C - 3)
        m = mmap.mmap(fd, C, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=far + C)
        m[0:12] = b"MAPPED-STORE"
        m.flush()
        m.close()
        os.close(fd)
        """
        let script = sb.root + "/far_writes.py"
        try! py.write(toFile: script, atomically: true, encoding: .utf8)
        func readBack(_ dir: String, _ name: String, _ first: Int) -> String {
            let f = Sandbox.quote(dir + "/" + name)
            let far = first * chunk
            return sb.ok("""
            stat -c %s \(f)
            head -c \(chunk) \(f) | sha256sum
            tail -c +\(far + 1) \(f) | sha256sum
            dd if=\(f) bs=1 skip=\(far + chunk - 5) count=20 status=none | od -An -c
            """)
        }
        for (name, first) in files {
            for dir in [mp, ref] {
                sb.ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(dir + "/" + name)) \(first)")
                sb.ok("printf 'DD-AT-END' | dd of=\(Sandbox.quote(dir + "/" + name)) bs=1 seek=\(first * chunk + 2 * chunk + 10) conv=notrunc status=none")
            }
            let expected = readBack(ref, name, first)
            XCTAssertTrue(expected.hasPrefix("\(first * chunk + 2 * chunk + 19)\n"), expected)
            XCTAssertTrue(expected.contains("A   C   R   M   A   P   P   E   D   -   S   T   O   R"), expected)
            XCTAssertEqual(readBack(mp, name, first), expected, name)
        }
        mp = sb.remount(mp)
        for (name, first) in files {
            XCTAssertEqual(readBack(mp, name, first), readBack(ref, name, first), "\(name) after a remount")
        }
        sb.unmount(mp)

        // Chunk 2^32 (full: written above) copied onto chunk 0's place in the same file.
        let ct = Sandbox.quote(ciphertext["far"]!)
        sb.ok("dd if=\(ct) of=\(ct) bs=\(stride) iflag=skip_bytes skip=\(128 + (1 << 32) * stride) oflag=seek_bytes seek=128 count=1 conv=notrunc status=none")
        mp = sb.mount()
        let moved = sb.run("head -c \(chunk) \(Sandbox.quote(mp))/far > /dev/null")
        XCTAssertNotEqual(moved.status, 0, "chunk 2^32 read as chunk 0")
        XCTAssertTrue(moved.stderr.contains("Input/output error"), moved.stderr)
        XCTAssertEqual(sb.ok("tail -c +\(((1 << 32) - 1) * chunk + 1) \(Sandbox.quote(mp))/far | sha256sum"),
                       sb.ok("tail -c +\(((1 << 32) - 1) * chunk + 1) \(Sandbox.quote(ref))/far | sha256sum"))
        sb.unmount(mp)
    }

    /// A file unlinked or renamed over while open stays readable and writable through its
    /// descriptor, is gone from the listing, and leaves nothing in the store once closed.
    func testOpenFilesUnlinkedOrReplacedAsOnAPlainDirectoryAndGoneFromTheStoreAfterClose() {
        let (sb, mp, ref) = Sandbox.mountedBesidePlainDirectory("pv-orphan")
        // Long names (a companion underneath holds each, FORMAT.md section 6) must go too.
        let py = """
        import os, sys
        os.chdir(sys.argv[1])
        doomed, a, b = "doomed-" + "d" * 240, "a-" + "a" * 240, "b-" + "b" * 240
        short = lambda: sorted(n[:8] for n in os.listdir("."))
        out = []
        open(doomed, "wb").write(b"U" * 10000)
        fd = os.open(doomed, os.O_RDWR)
        os.unlink(doomed)
        out.append(short())
        os.pwrite(fd, b"still-writable", 20000)
        os.ftruncate(fd, 20010)
        st = os.fstat(fd)
        out.append((st.st_size, st.st_nlink, os.pread(fd, 12, 9995)))
        open(doomed, "wb").write(b"a new file")
        out.append(os.pread(fd, 8, 0))
        open(a, "wb").write(b"A" * 9000)
        open(b, "wb").write(b"B" * 12000)
        held = os.open(b, os.O_RDWR)
        os.rename(a, b)
        os.pwrite(held, b"old-b", 0)
        st = os.fstat(held)
        out.append((st.st_size, st.st_nlink, os.pread(held, 8, 0), open(b, "rb").read(8)))
        os.link(b, "b2")
        os.unlink(b)
        out.append((os.stat("b2").st_nlink, open("b2", "rb").read(4)))
        out.append(short())
        os.close(fd)
        os.close(held)
        print(out)
        """
        let onMount = sb.samePythonOutput(py, named: "orphans", in: mp, and: ref)
        XCTAssertEqual(onMount, "[[], (20010, 0, b'UUUUU\\x00\\x00\\x00\\x00\\x00\\x00\\x00'), b'UUUUUUUU', "
                       + "(12000, 0, b'old-bBBB', b'AAAAAAAA'), (1, b'AAAA'), ['b2', 'doomed-d']]\n")
        sb.unmount(mp)
        // b2, the new long-named file and its companion: nothing else but the tree's own entries.
        XCTAssertEqual(sb.ok("find \(Sandbox.quote(sb.store))/users -mindepth 2 ! -name .pvdir ! -name .pvmount | wc -l"), "3\n")
    }

    /// Nanosecond times (also UTIME_OMIT and UTIME_NOW; before 1970 and past 2038, within
    /// the range of ext4, which holds the tests' stores), chmod,
    /// chown and RENAME_EXCHANGE give what a plain directory gives, also after a remount;
    /// `rsync -a --inplace` of a changed file, then again, transfers nothing the second time;
    /// copy_file_range with offsets copies the same bytes.
    func testTimesOwnersExchangeInplaceAndCopyRangeAsOnAPlainDirectory() {
        let (sb, mountpoint, ref) = Sandbox.mountedBesidePlainDirectory("pv-parity")
        var mp = mountpoint
        let py = """
        import ctypes, os, sys
        os.chdir(sys.argv[1])
        libc = ctypes.CDLL(None, use_errno=True)
        class TS(ctypes.Structure):
            _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
        NOW, OMIT = (1 << 30) - 1, (1 << 30) - 2
        def utimens(p, a, m, flags=0):
            assert libc.utimensat(-100, p.encode(), (TS * 2)(TS(*a), TS(*m)), flags) == 0, ctypes.get_errno()
        def times(p):
            st = os.lstat(p)
            return (st.st_atime_ns, st.st_mtime_ns)
        out = []
        open("t", "w").write("t")
        utimens("t", (1_000_000_001, 123456789), (1_000_000_002, 987654321))
        out.append(times("t"))
        utimens("t", (5, OMIT), (-86400 * 365 * 60, 999999999))
        out.append(times("t"))
        utimens("t", (1 << 33, 1), (0, OMIT))
        out.append(times("t"))
        before = times("t")
        utimens("t", (0, OMIT), (0, NOW))
        out.append((times("t")[0] == before[0], abs(times("t")[1] - before[1]) > 10**18))
        os.symlink("t", "l")
        utimens("l", (7, 70), (8, 80), 0x100)
        out.append((times("l"), times("t")[0] == before[0]))
        os.chmod("t", 0o1640)
        os.chown("t", 1234, 5678)
        os.lchown("l", 99, 98)
        os.mkdir("d", 0o700)
        os.chmod("d", 0o2751)
        os.chown("d", -1, 42)
        out.append([(oct(os.lstat(p).st_mode), os.lstat(p).st_uid, os.lstat(p).st_gid) for p in ("t", "l", "d")])
        open("d/x", "w").write("x in d")
        assert libc.renameat2(-100, b"t", -100, b"d", 2) == 0, ctypes.get_errno()
        out.append((os.path.isdir("t"), open("d").read(), open("t/x").read(), oct(os.stat("d").st_mode)))
        print(out)
        """
        let expected = sb.samePythonOutput(py, named: "attrs", in: mp, and: ref)
        XCTAssertTrue(expected.hasPrefix("[(1000000001123456789, 1000000002987654321), (1000000001123456789, -1892159999000000001), "
                                         + "(8589934592000000001, -1892159999000000001), (True, True), ((7000000070, 8000000080), True), "
                                         + "[('0o101640', 1234, 5678), ('0o120777', 99, 98), ('0o42751', 0, 42)], (True, 't', 'x in d', '0o101640')]"),
                      expected)
        // Times set to "now", and a symlink's atime (readlink sets it), differ by the moment.
        let listing = "cd DIR && find . -mindepth 1 -printf '%p %y %m %U %G %n %s %l\\n' | LC_ALL=C sort && stat -c '%n %x' d && stat -c '%n %y' l"
        func list(_ dir: String) -> String { sb.ok(listing.replacingOccurrences(of: "DIR", with: Sandbox.quote(dir))) }
        XCTAssertEqual(list(mp), list(ref))
        mp = sb.remount(mp)
        XCTAssertEqual(list(mp), list(ref), "after a remount")

        // rsync --inplace: a changed file is rewritten in place (its inode stays), then nothing.
        let src = sb.plainDir("src")
        sb.ok("head -c 300000 /dev/urandom > \(Sandbox.quote(src))/photo.jpg && touch -d '2021-03-04 05:06:07.123456789' \(Sandbox.quote(src))/photo.jpg")
        sb.ok("rsync -a \(Sandbox.quote(src))/ \(Sandbox.quote(mp))/r/")
        let inode = sb.ok("stat -c %i \(Sandbox.quote(mp))/r/photo.jpg")
        sb.ok("printf 'CHANGED' | dd of=\(Sandbox.quote(src))/photo.jpg bs=1 seek=150000 conv=notrunc status=none && touch -d '2022-01-01 00:00:00.5' \(Sandbox.quote(src))/photo.jpg")
        XCTAssertEqual(sb.ok("rsync -a --inplace --itemize-changes \(Sandbox.quote(src))/ \(Sandbox.quote(mp))/r/"), ">f..t...... photo.jpg\n")
        XCTAssertEqual(sb.ok("rsync -a --inplace --itemize-changes \(Sandbox.quote(src))/ \(Sandbox.quote(mp))/r/"), "")
        XCTAssertEqual(sb.ok("stat -c %i \(Sandbox.quote(mp))/r/photo.jpg"), inode)
        sb.ok("cmp \(Sandbox.quote(src))/photo.jpg \(Sandbox.quote(mp))/r/photo.jpg")

        // copy_file_range inside one directory, with offsets not on chunk boundaries.
        let copy = """
        import os, sys
        os.chdir(sys.argv[1])
        fi = os.open("r/photo.jpg", os.O_RDONLY)
        fo = os.open("range", os.O_RDWR | os.O_CREAT, 0o644)
        n = [os.copy_file_range(fi, fo, 5000, 0, 0), os.copy_file_range(fi, fo, 9000, 100, 4096 * 5 + 3),
             os.copy_file_range(fi, fo, 100, 299990, 10), os.copy_file_range(fi, fo, 10, 400000, 0)]
        print(n, os.fstat(fo).st_size)
        """
        sb.ok("mkdir \(Sandbox.quote(ref))/r && cp \(Sandbox.quote(src))/photo.jpg \(Sandbox.quote(ref))/r/")
        XCTAssertEqual(sb.samePythonOutput(copy, named: "copy_range", in: mp, and: ref), "[5000, 9000, 10, 0] 29483\n")
        sb.ok("cmp \(Sandbox.quote(mp))/range \(Sandbox.quote(ref))/range")
        sb.unmount(mp)
    }

    /// The mount's limits (README, FORMAT.md section 8): a symlink target of 4,095 bytes,
    /// as on a local file system (the kernel refuses one more with ENAMETOOLONG), an
    /// attribute name of 160 and a value of 65,496 bytes are kept whole, one byte more gets
    /// ERANGE and E2BIG; a file name keeps the full 255 bytes.
    func testSealedLengthLimitsAreTheDocumentedOnes() {
        let sb = Sandbox("pv-limits")
        let store = sb.storeOnTmpfs()   // ext4 takes no value over one block (ENOSPC)
        defer { store.remove() }
        sb.initStore()
        var mp = sb.mount()
        let py = """
        import errno, os, sys
        os.chdir(sys.argv[1])
        def attempt(f):
            try:
                return f()
            except OSError as e:
                return errno.errorcode[e.errno]
        open("x", "w").close()
        print([attempt(lambda: (os.symlink("t" * n, "l%d" % n), len(os.readlink("l%d" % n)))[1]) for n in (4095, 4096)],
              [attempt(lambda: (os.setxattr("x", "user." + "n" * (n - 5), b"v"), n)[1]) for n in (160, 161)],
              [attempt(lambda: (os.setxattr("x", "user.v%d" % n, b"v" * n), len(os.getxattr("x", "user.v%d" % n)))[1])
               for n in (65496, 65497)],
              attempt(lambda: (open("f" * 255, "w").close(), len(os.listdir(".")))[1]))
        """
        let script = sb.root + "/limits.py"
        try! py.write(toFile: script, atomically: true, encoding: .utf8)
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(mp))"),
                       "[4095, 'ENAMETOOLONG'] [160, 'ERANGE'] [65496, 'E2BIG'] 3\n")
        mp = sb.remount(mp)
        let q = Sandbox.quote(mp)
        XCTAssertEqual(sb.ok("readlink \(q)/l4095 | tr -d '\\n' | wc -c; getfattr --only-values -n user.v65496 \(q)/x | wc -c"),
                       "4095\n65496\n")
        sb.unmount(mp)
    }

    /// fallocate(2) as on a local file system: mode 0 extends a file with zeros (`fallocate -l`,
    /// posix_fallocate) and does nothing inside it, FALLOC_FL_KEEP_SIZE reserves space past
    /// the end and keeps the size, and `rsync --preallocate` copies without complaint; a
    /// punched hole reads as zeros and keeps the size. (fallocate failed with EOPNOTSUPP in
    /// every mode: `fallocate -l` failed, rsync printed an error for each file.)
    func testFallocateExtendsAndReservesAsOnAPlainFile() {
        let (sb, mp, ref) = Sandbox.mountedBesidePlainDirectory("pv-falloc")
        let py = """
        import ctypes, errno, os, sys
        os.chdir(sys.argv[1])
        libc = ctypes.CDLL(None, use_errno=True)
        def falloc(fd, mode, off, n):
            ok = libc.fallocate(fd, mode, ctypes.c_long(off), ctypes.c_long(n)) == 0
            return "ok" if ok else errno.errorcode[ctypes.get_errno()]
        fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"head")
        out = [falloc(fd, 0, 0, 10000), os.fstat(fd).st_size, os.pread(fd, 20000, 0) == b"head" + bytes(9996)]
        out += [falloc(fd, 0, 100, 50), os.fstat(fd).st_size]
        blocks = os.fstat(fd).st_blocks
        out += [falloc(fd, 1, 5000, 200000), os.fstat(fd).st_size, os.fstat(fd).st_blocks > blocks + 300]
        os.pwrite(fd, b"tail", 12000)
        out += [os.fstat(fd).st_size, os.pread(fd, 4, 12000), os.pread(fd, 2000, 10000) == bytes(2000)]
        os.posix_fallocate(fd, 0, 70000)
        out += [os.fstat(fd).st_size]
        print(out)
        """
        XCTAssertEqual(sb.samePythonOutput(py, named: "falloc", in: mp, and: ref),
                       "['ok', 10000, True, 'ok', 10000, 'ok', 10000, True, 12004, b'tail', True, 70000]\n")
        let q = Sandbox.quote(mp)
        sb.ok("fallocate -l 3000000 \(q)/tool && printf END >> \(q)/tool")
        XCTAssertEqual(sb.ok("stat -c %s \(q)/tool && head -c 3000000 \(q)/tool | tr -d '\\0' | wc -c && tail -c 3 \(q)/tool"),
                       "3000003\n0\nEND")
        let src = sb.plainDir("src")
        sb.ok("head -c 300000 /dev/urandom > \(Sandbox.quote(src))/a.jpg && truncate -s 1M \(Sandbox.quote(src))/zeros")
        let r = sb.run("rsync -a --preallocate \(Sandbox.quote(src))/ \(q)/pre/")
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr, "")
        sb.ok("diff -r \(Sandbox.quote(src)) \(q)/pre")
        sb.ok("printf abcd | dd of=\(q)/tool bs=1 seek=5000 conv=notrunc status=none")
        sb.ok("fallocate --punch-hole -o 0 -l 8192 \(q)/tool")
        XCTAssertEqual(sb.ok("stat -c %s \(q)/tool && head -c 8192 \(q)/tool | tr -d '\\0' | wc -c && tail -c 3 \(q)/tool"),
                       "3000003\n0\nEND")
        sb.unmount(mp)
    }
}

/// A tmpfs mounted on a sandbox's store directory (before `initStore`).
struct TmpfsStore {
    let sandbox: Sandbox

    /// Unmounts the vault's mounts first: their daemons hold files of the store.
    func remove() {
        for m in sandbox.mounts { Harness.forceUnmount(m) }
        _ = Harness.run(["umount", "-l", sandbox.store], timeout: 10)
    }
}

extension Sandbox {
    /// A store with alice's vault mounted, and an empty plain directory "ref" beside it.
    static func mountedBesidePlainDirectory(_ name: String) -> (Sandbox, String, String) {
        let sb = Sandbox(name)
        sb.initStore()
        return (sb, sb.mount(), sb.plainDir("ref"))
    }

    func storeOnTmpfs(file: StaticString = #filePath, line: UInt = #line) -> TmpfsStore {
        try? FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        ok("mount -t tmpfs -o size=256m,mode=700 pvstore \(Sandbox.quote(store))", file: file, line: line)
        return TmpfsStore(sandbox: self)
    }

    /// Writes `source` to ROOT/`named`.py, runs it with each directory as its argument and
    /// asserts that both print the same; returns what it printed in the first.
    func samePythonOutput(_ source: String, named: String, in first: String, and second: String,
                          file: StaticString = #filePath, line: UInt = #line) -> String {
        let script = root + "/" + named + ".py"   // a name of its own: not one of python's modules
        try! source.write(toFile: script, atomically: true, encoding: .utf8)
        let a = ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(first))", file: file, line: line)
        XCTAssertEqual(a, ok("python3 \(Sandbox.quote(script)) \(Sandbox.quote(second))", file: file, line: line),
                       "\(named).py", file: file, line: line)
        return a
    }
}
