import Foundation
import XCTest

/// A seeded random sequence of pwrite / pread / ftruncate / fsync / close+reopen applied
/// to the same files in the mount and in a plain directory; every read, every size and the
/// final contents must agree. The seed is in every failure message, so a failure replays.
final class ExerciserTests: XCTestCase {
    func testOneFileThreeThousandOps() throws {
        try exercise(seed: 0x5EED_0001, files: 1, ops: 3000)
    }

    func testThreeFilesInterleaved() throws {
        try exercise(seed: 0x5EED_0003, files: 3, ops: 3000)
    }

    /// The other chunk geometry and cipher: 64 KiB chunks, XChaCha20-Poly1305 (24-byte nonces).
    func testSixtyFourKiBChunksXChaCha() throws {
        try exercise(seed: 0x5EED_0064, files: 2, ops: 2500,
                     initArgs: ["--chunk-size", "65536", "--cipher", "xchacha20poly1305"],
                     expectGeometry: "XChaCha20-Poly1305, 65536-byte chunks")
    }

    func exercise(seed: UInt64, files: Int, ops: Int, initArgs: [String] = [], expectGeometry: String? = nil) throws {
        let sb = Sandbox("pv-exer")
        let r = sb.pv(["init", "--store", sb.store] + initArgs)
        XCTAssertEqual(r.status, 0, r.stderr)
        if let g = expectGeometry { XCTAssertTrue(r.stdout.contains(g), r.stdout) }
        sb.addUser("alice")
        var mp = sb.mount()
        let plain = sb.plainDir("plain")
        var rng = SeededGenerator(seed: seed)
        var pairs = (0..<files).map { i in
            FilePair(mount: mp + "/exercised-\(i).bin", plain: plain + "/exercised-\(i).bin")
        }
        for i in pairs.indices { try pairs[i].open(create: true) }
        var counts: [String: Int] = [:]
        var diverged: String? = nil
        for step in 0..<ops where diverged == nil {
            let i = Int(rng.next() % UInt64(files))
            let size = pairs[i].plainSize
            let roll = rng.next() % 100
            let context = "seed \(String(seed, radix: 16)) step \(step) file \(i)"
            switch roll {
            case 0..<40:
                let (off, len) = Exerciser.writeRange(&rng, size: size)
                let data = rng.bytes(len)
                diverged = pairs[i].write(data, at: off, context)
                counts["write", default: 0] += 1
            case 40..<80:
                let off = Int64(rng.next() % UInt64(size + 70_000 + 1))
                let len = Int(rng.next() % 3 == 0 ? rng.next() % 200_000 : rng.next() % 9_000)
                diverged = pairs[i].read(len, at: off, context)
                counts["read", default: 0] += 1
            case 80..<90:
                let target = Exerciser.truncateSize(&rng, size: size)
                diverged = pairs[i].truncate(to: target, context)
                counts["truncate", default: 0] += 1
            case 90..<94:
                diverged = pairs[i].fsyncBoth(context)
                counts["fsync", default: 0] += 1
            default:
                pairs[i].close()
                try pairs[i].open(create: false)
                counts["reopen", default: 0] += 1
            }
            if diverged == nil { diverged = pairs[i].compareSizes(context) }
        }
        XCTAssertNil(diverged)
        // Every kind of operation ran many times (the mix is what is being tested).
        for kind in ["write", "read", "truncate", "fsync", "reopen"] {
            XCTAssertGreaterThan(counts[kind] ?? 0, ops / 100, "too few \(kind) ops: \(counts)")
        }
        for i in pairs.indices { pairs[i].close() }
        for p in pairs { XCTAssertTrue(FileManager.contentsEqual(p.mount, p.plain), "final contents differ: \(p.mount)") }
        // And from a fresh daemon.
        mp = sb.remount(mp)
        for p in pairs { XCTAssertTrue(FileManager.contentsEqual(p.mount, p.plain), "contents differ after remount: \(p.mount)") }
        sb.unmount(mp)
        sb.assertNoPlaintext(["exercised-"])
    }
}

enum Exerciser {
    /// Offsets and lengths biased towards the interesting places: chunk boundaries (4 KiB and
    /// 64 KiB multiples, the store's possible chunk sizes), the end of file, and past it.
    static func writeRange(_ rng: inout SeededGenerator, size: Int64) -> (Int64, Int) {
        let off: Int64
        switch rng.next() % 4 {
        case 0:   // around a chunk boundary
            let unit: Int64 = rng.next() % 2 == 0 ? 4096 : 65536
            let k = Int64(rng.next() % UInt64(max(1, (size + 131_072) / unit)))
            off = max(0, k * unit + Int64(rng.next() % 33) - 16)
        case 1:   // at or near the end
            off = max(0, size + Int64(rng.next() % 9) - 4)
        case 2:   // past the end (leaves a hole)
            off = size + Int64(rng.next() % 150_000)
        default:  // anywhere inside
            off = Int64(rng.next() % UInt64(size + 1))
        }
        let len: Int
        switch rng.next() % 4 {
        case 0: len = 1 + Int(rng.next() % 16)
        case 1: len = 1 + Int(rng.next() % 5_000)
        case 2: len = 60_000 + Int(rng.next() % 12_000)      // about one 64 KiB chunk
        default: len = 1 + Int(rng.next() % 180_000)
        }
        // Keep files around a megabyte so a few thousand ops stay quick.
        if off > 1_400_000 { return (Int64(rng.next() % 1_400_000), len) }
        return (off, len)
    }

    static func truncateSize(_ rng: inout SeededGenerator, size: Int64) -> Int64 {
        switch rng.next() % 4 {
        case 0: return 0 + Int64(rng.next() % 2) * Int64(rng.next() % 100)
        case 1: return Int64(rng.next() % UInt64(size + 1))                          // down
        case 2: return min(1_500_000, size + Int64(rng.next() % 200_000))             // up
        default: return max(0, Int64((rng.next() % 24) * 65536) + Int64(rng.next() % 3) - 1)  // near a boundary
        }
    }
}

/// The same file in the mount and in a plain directory, driven through POSIX calls.
struct FilePair {
    let mount: String
    let plain: String
    var mfd: Int32 = -1
    var pfd: Int32 = -1
    var plainSize: Int64 {
        var st = stat()
        return fstat(pfd, &st) == 0 ? Int64(st.st_size) : 0
    }

    init(mount: String, plain: String) {
        self.mount = mount
        self.plain = plain
    }

    mutating func open(create: Bool) throws {
        let flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0)
        mfd = Glibc.open(mount, flags, 0o644)
        pfd = Glibc.open(plain, flags, 0o644)
        guard mfd >= 0, pfd >= 0 else {
            throw NSError(domain: "exerciser", code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "open \(mount): \(String(cString: strerror(errno)))"])
        }
    }

    mutating func close() {
        if mfd >= 0 { Glibc.close(mfd) }
        if pfd >= 0 { Glibc.close(pfd) }
        mfd = -1
        pfd = -1
    }

    func write(_ data: [UInt8], at off: Int64, _ context: String) -> String? {
        let m = FilePair.pwriteAll(mfd, data, off)
        let p = FilePair.pwriteAll(pfd, data, off)
        return m == p ? nil : "\(context): pwrite(\(data.count) at \(off)) mount \(m) plain \(p)"
    }

    func read(_ len: Int, at off: Int64, _ context: String) -> String? {
        let (m, me) = FilePair.preadAll(mfd, len, off)
        let (p, pe) = FilePair.preadAll(pfd, len, off)
        guard me == pe else { return "\(context): pread(\(len) at \(off)) errno mount \(me) plain \(pe)" }
        guard m.count == p.count else {
            return "\(context): pread(\(len) at \(off)) returned \(m.count) bytes on the mount, \(p.count) on ext4"
        }
        if m != p {
            let first = zip(m, p).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? -1
            return "\(context): pread(\(len) at \(off)) differs first at byte \(Int64(first) + off)"
        }
        return nil
    }

    func truncate(to size: Int64, _ context: String) -> String? {
        let m = ftruncate(mfd, off_t(size)) == 0 ? 0 : errno
        let p = ftruncate(pfd, off_t(size)) == 0 ? 0 : errno
        return m == p ? nil : "\(context): ftruncate(\(size)) errno mount \(m) plain \(p)"
    }

    func fsyncBoth(_ context: String) -> String? {
        let m = fsync(mfd) == 0 ? 0 : errno
        let p = fsync(pfd) == 0 ? 0 : errno
        return m == p ? nil : "\(context): fsync errno mount \(m) plain \(p)"
    }

    func compareSizes(_ context: String) -> String? {
        var ms = stat(), ps = stat(), ls = stat()
        guard fstat(mfd, &ms) == 0, fstat(pfd, &ps) == 0 else { return "\(context): fstat failed errno \(errno)" }
        if ms.st_size != ps.st_size { return "\(context): fstat size mount \(ms.st_size) plain \(ps.st_size)" }
        // The path's size (a separate lookup) agrees too.
        guard lstat(mount, &ls) == 0 else { return "\(context): lstat failed errno \(errno)" }
        return ls.st_size == ps.st_size ? nil : "\(context): lstat size mount \(ls.st_size) plain \(ps.st_size)"
    }

    /// Bytes written, or -errno.
    static func pwriteAll(_ fd: Int32, _ data: [UInt8], _ off: Int64) -> Int {
        var done = 0
        while done < data.count {
            let n = data.withUnsafeBytes { Glibc.pwrite(fd, $0.baseAddress! + done, data.count - done, off_t(off) + off_t(done)) }
            if n < 0 { if errno == EINTR { continue }; return -Int(errno) }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// The bytes read and 0, or what was read before a failure and its errno.
    static func preadAll(_ fd: Int32, _ len: Int, _ off: Int64) -> ([UInt8], Int32) {
        var buf = [UInt8](repeating: 0, count: len)
        var done = 0
        while done < len {
            let n = buf.withUnsafeMutableBytes { Glibc.pread(fd, $0.baseAddress! + done, len - done, off_t(off) + off_t(done)) }
            if n < 0 { if errno == EINTR { continue }; return (Array(buf[0..<done]), errno) }
            if n == 0 { break }
            done += n
        }
        return (Array(buf[0..<done]), 0)
    }
}

extension FileManager {
    static func contentsEqual(_ a: String, _ b: String) -> Bool {
        FileManager.default.contentsEqual(atPath: a, andPath: b)
    }
}
