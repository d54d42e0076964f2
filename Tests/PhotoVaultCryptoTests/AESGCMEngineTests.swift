import CSodium
import Foundation
import Glibc
import XCTest
@testable import PhotoVaultCrypto

/// Chunks sealed by ipsec-mb or libcrypto must be the very bytes libsodium would produce (the
/// format is one), and each engine's copies of a file key must live in locked memory and die
/// with it.
final class AESGCMEngineTests: XCTestCase {
    /// Whether /proc/cpuinfo lists every flag ipsec-mb's AVX-512 VAES code needs: read here
    /// independently of the library's own detection, which the engine choice relies on.
    static let cpuHasVAESAVX512: Bool = {
        guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
              let line = info.split(separator: "\n").first(where: { $0.hasPrefix("flags") }) else { return false }
        let flags = Set(line.split(separator: " ").map(String.init))
        return ["aes", "pclmulqdq", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "vaes", "vpclmulqdq"]
            .allSatisfy(flags.contains)
    }()

    /// The engines this machine can run, fastest first (libsodium is always among them).
    static var usableEngines: [AESGCMEngine] { AESGCMEngine.allCases.filter(\.isUsable) }

    func testFastestEngineIsChosenForThisCPU() {
        XCTAssertEqual(crypto_aead_aes256gcm_is_available(), 1, "this suite expects a CPU with AES-NI and CLMUL")
        XCTAssertTrue(AESGCMEngine.libcrypto.isUsable, "libcrypto's allocator could not be replaced")
        XCTAssertEqual(AESGCMEngine.ipsecMB.isUsable, Self.cpuHasVAESAVX512,
                       "ipsec-mb's detection disagrees with /proc/cpuinfo")
        XCTAssertEqual(AESGCMEngine.current, Self.cpuHasVAESAVX512 ? .ipsecMB : .libcrypto)
    }

    /// The same key, nonce and associated data through ChunkCipher (each engine) and through
    /// libsodium directly: identical bytes, and each opens the other's chunks.
    func testChunksAreIdenticalToLibsodiumsBothWays() throws {
        XCTAssertTrue(Self.usableEngines.contains(AESGCMEngine.current))
        for engine in Self.usableEngines {
            var rng = SeededGenerator(seed: 0x5eed_a35)
            for size in [0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 65536] {
                try checkAgainstLibsodium(engine: engine, size: size, rng: &rng)
            }
        }
    }

    private func checkAgainstLibsodium(engine: AESGCMEngine, size: Int, rng: inout SeededGenerator) throws {
        let keyBytes = rng.bytes(32), fileID = rng.bytes(16), nonce = rng.bytes(12), plain = rng.bytes(size)
        let index = UInt64.random(in: 0...UInt64.max, using: &rng)
        let cipher = try ChunkCipher(cipher: .aes256gcm, key: SecureBytes(copying: keyBytes), fileID: fileID, engine: engine)
        defer { cipher.wipe() }
        var ours = [UInt8](repeating: 0, count: size + 28)
        plain.withUnsafeBytes { p in nonce.withUnsafeBytes { n in ours.withUnsafeMutableBytes { o in
            cipher.seal(index: index, plaintext: p.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, count: size,
                        nonce: n.baseAddress!, into: o.baseAddress!)
        } } }
        // libsodium: nonce || ciphertext || tag with AD fileID || index (LE).
        var ad = fileID
        withUnsafeBytes(of: index.littleEndian) { ad += $0 }
        var ct = [UInt8](repeating: 0, count: size), tag = [UInt8](repeating: 0, count: 16)
        var maclen: UInt64 = 0
        XCTAssertEqual(crypto_aead_aes256gcm_encrypt_detached(&ct, &tag, &maclen, plain, UInt64(size), ad, UInt64(ad.count),
                                                              nil, nonce, keyBytes), 0)
        XCTAssertEqual(ours, nonce + ct + tag, "\(engine), size \(size)")

        // libsodium's chunk opens through ChunkCipher; a flipped bit (in the tag, then in the
        // ciphertext) does not, and leaves no plaintext behind.
        let theirs = nonce + ct + tag
        var out = [UInt8](repeating: 0, count: size)
        try theirs.withUnsafeBytes { s in try out.withUnsafeMutableBytes { o in
            try cipher.open(index: index, sealed: s.baseAddress!, sealedCount: s.count, into: o.baseAddress ?? UnsafeMutableRawPointer(bitPattern: 1)!)
        } }
        XCTAssertEqual(out, plain, "\(engine), size \(size)")
        for flip in [theirs.count - 1 - (size % 16), 12 + size / 2] {
            var bad = theirs
            bad[flip] ^= 0x01
            out = plain
            XCTAssertThrowsError(try bad.withUnsafeBytes { s in try out.withUnsafeMutableBytes { o in
                try cipher.open(index: index, sealed: s.baseAddress!, sealedCount: s.count, into: o.baseAddress ?? UnsafeMutableRawPointer(bitPattern: 1)!)
            } }, "\(engine), size \(size), byte \(flip)")
            XCTAssertEqual(out, [UInt8](repeating: 0, count: size), "\(engine), size \(size): a failed open leaves no plaintext behind")
        }
        // The right chunk under another index (position) does not open either.
        XCTAssertThrowsError(try theirs.withUnsafeBytes { s in try out.withUnsafeMutableBytes { o in
            try cipher.open(index: index &+ 1, sealed: s.baseAddress!, sealedCount: s.count, into: o.baseAddress ?? UnsafeMutableRawPointer(bitPattern: 1)!)
        } }, "\(engine), size \(size)")
    }

    /// Concurrent users of one file (each engine) share or check out its key state; results
    /// stay correct.
    func testConcurrentSealAndOpenOfOneFile() throws {
        for engine in Self.usableEngines {
            let cipher = try ChunkCipher(cipher: .aes256gcm, key: SecureBytes(randomCount: 32), fileID: SecureRandom.bytes(16), engine: engine)
            defer { cipher.wipe() }
            let failures = UnsafeMutablePointer<Int>.allocate(capacity: 8)
            failures.initialize(repeating: 0, count: 8)
            defer { failures.deallocate() }
            DispatchQueue.concurrentPerform(iterations: 8) { t in
                var plain = [UInt8](repeating: UInt8(t), count: 4096), sealed = [UInt8](repeating: 0, count: 4096 + 28)
                var back = [UInt8](repeating: 0, count: 4096)
                let nonce = SecureRandom.bytes(12)
                for i in 0..<500 {
                    plain[0] = UInt8(i & 0xff)
                    cipher.seal(index: UInt64(i), plaintext: plain, count: 4096, nonce: nonce, into: &sealed)
                    do { try cipher.open(index: UInt64(i), sealed: sealed, sealedCount: sealed.count, into: &back) } catch { failures[t] += 1 }
                    if back != plain { failures[t] += 1 }
                }
            }
            XCTAssertEqual((0..<8).map { failures[$0] }.reduce(0, +), 0, "\(engine)")
        }
    }

    /// The raw key is the first round keys of AES-256's schedule, so libcrypto's context
    /// and ipsec-mb's expanded key hold it verbatim: it must be found only in locked mappings
    /// while in use, and nowhere once the cipher is wiped.
    func testLibcryptoKeyScheduleLivesInLockedMemoryAndDiesWithTheKey() throws {
        try checkKeyScheduleMemory(engine: .libcrypto, test: #function)
    }

    func testIPSecMBKeyScheduleLivesInLockedMemoryAndDiesWithTheKey() throws {
        guard Self.cpuHasVAESAVX512 else {
            // On a CPU without AVX-512 VAES the engine must build no key state at all (so
            // there is none to search for), and a cipher asked for it uses libsodium's.
            let key = SecureBytes(randomCount: 32)
            XCTAssertNil(IPSecMBGCM(key: key), "ipsec-mb keyed on a CPU it is not chosen for")
            var rng = SeededGenerator(seed: 0x1b)
            try checkAgainstLibsodium(engine: .ipsecMB, size: 4096, rng: &rng)
            return
        }
        try checkKeyScheduleMemory(engine: .ipsecMB, test: #function)
    }

    private func checkKeyScheduleMemory(engine: AESGCMEngine, test: String) throws {
        // The search runs in a fresh copy of this test binary: earlier tests of this process
        // (in-process mounts with 1 MiB FUSE buffers) leave freed heap memory that the scan's
        // own copies land in, which made the result depend on test order.
        if getenv("PHOTOVAULT_MEMSCAN_CHILD") == nil {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            p.arguments = ["PhotoVaultCryptoTests.AESGCMEngineTests/\(test.replacingOccurrences(of: "()", with: ""))"]
            p.environment = ProcessInfo.processInfo.environment.merging(["PHOTOVAULT_MEMSCAN_CHILD": "1"]) { $1 }
            let out = Pipe()
            p.standardOutput = out
            p.standardError = out
            try p.run()
            let log = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            XCTAssertTrue(log.contains("Executed 1 test, with 0 failures"), log)
            XCTAssertEqual(p.terminationStatus, 0, log)
            return
        }
        XCTAssertTrue(engine.isUsable)
        let key = SecureBytes(randomCount: 32)   // never copied into ordinary memory
        let needle = key.withUnsafeBytes { Array($0) }   // the search's own copy...
        let cipher = try ChunkCipher(cipher: .aes256gcm, key: key, fileID: SecureRandom.bytes(16), engine: engine)
        var sealed = [UInt8](repeating: 0, count: 4096 + 28)
        cipher.seal(index: 0, plaintext: [UInt8](repeating: 7, count: 4096), count: 4096,
                    nonce: SecureRandom.bytes(12), into: &sealed)
        let needleAddress = needle.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) }   // ...is skipped

        let hits = try ProcessMemory.occurrences(of: needle, skipping: needleAddress)
        XCTAssertFalse(hits.isEmpty, "the key was not found at all: the search proves nothing")
        for h in hits { XCTAssertTrue(h.locked, "\(engine): key bytes in unlocked memory: \(h.mapping)") }
        XCTAssertGreaterThanOrEqual(hits.count, 2, "the key and \(engine)'s schedule: \(hits.map(\.mapping))")

        cipher.wipe()
        XCTAssertEqual(try ProcessMemory.occurrences(of: needle, skipping: needleAddress).map(\.mapping), [])
    }
}

/// Searches this process's own memory (/proc/self/maps + /proc/self/mem) for a byte string.
enum ProcessMemory {
    struct Hit { let mapping: String; let locked: Bool }

    static func occurrences(of needle: [UInt8], skipping skipped: UInt) throws -> [Hit] {
        let smaps = try readAll("/proc/self/smaps")
        let fd = open("/proc/self/mem", O_RDONLY)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        // One entry per mapping: header line, then its fields (Locked: is the one we need).
        var mappings: [(line: String, start: UInt, end: UInt, readable: Bool, locked: Bool)] = []
        for line in smaps.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            if let r = f.first, f.count >= 5, r.contains("-") {
                let b = r.split(separator: "-")
                if b.count == 2, let lo = UInt(b[0], radix: 16), let hi = UInt(b[1], radix: 16) {
                    let special = f.count >= 6 && (f[5].hasPrefix("[vvar") || f[5] == "[vsyscall]")
                    mappings.append((String(line), lo, hi, f[1].hasPrefix("r") && !special, false))
                    continue
                }
            }
            if f.first == "Locked:", f.count >= 2, let kb = Int(f[1]), kb > 0, !mappings.isEmpty {
                mappings[mappings.count - 1].locked = true
            }
        }
        var hits: [Hit] = []
        for m in mappings where m.readable && m.end - m.start <= 1 << 30 {
            // Each copy gets a mapping of its own, made after /proc/self/smaps was read, so it
            // is in no mapping searched. A heap buffer could be: once glibc has freed a large
            // copy it raises its mmap threshold and serves the next one from the heap, and
            // reading the heap into a buffer inside the heap copies the needle's own bytes
            // (skipped by address) to new places that count as hits.
            let size = Int(m.end - m.start)
            guard let region = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  region != MAP_FAILED else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .ENOMEM) }
            defer {
                // The copy holds whatever the mapping held (key bytes included): zero it.
                sodium_memzero(region, size)
                munmap(region, size)
            }
            let n = pread(fd, region, size, off_t(Int64(bitPattern: UInt64(m.start))))
            guard n >= needle.count else { continue }
            let base = region.assumingMemoryBound(to: UInt8.self)
            var i = 0
            // memchr for the first byte, then compare (memmem is a GNU extension).
            while i + needle.count <= n, let p = memchr(base + i, Int32(needle[0]), n - needle.count + 1 - i) {
                let offset = UnsafeRawPointer(p) - UnsafeRawPointer(base)
                if memcmp(p, needle, needle.count) == 0, m.start + UInt(offset) != skipped {
                    hits.append(Hit(mapping: m.line, locked: m.locked))
                }
                i = offset + 1
            }
        }
        return hits
    }

    /// /proc files report size 0: read them as a stream.
    private static func readAll(_ path: String) throws -> String {
        let h = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? h.close() }
        return String(decoding: try h.readToEnd() ?? Data(), as: UTF8.self)
    }
}
