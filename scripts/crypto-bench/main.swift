// Chunk AEAD microbenchmark: PhotoVault's own ChunkCipher/NonceSequence (compiled from
// Sources/PhotoVaultCrypto by scripts/crypto-bench.sh), not libsodium in isolation.
// Prints median MB/s (10^6 bytes per second) of sealing and opening for both ciphers at
// several chunk sizes. Plaintext per measurement: BENCH_MB (default 64) MiB, in requests
// of 1 MiB (one NonceSequence per request, as ContentFile does per write).
import Glibc

let megabytes = Int(getenv("BENCH_MB").map { String(cString: $0) } ?? "") ?? 64
let repetitions = Int(getenv("BENCH_REPS").map { String(cString: $0) } ?? "") ?? 7
let chunkSizes = [4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 1 << 20]
let requestSize = 1 << 20

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func median(_ xs: [Double]) -> Double {
    let s = xs.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

struct Result { var seal: Double; var open: Double }

func bench(_ cipher: ContentCipher, chunkSize: Int) throws -> Result {
    let c = try ChunkCipher(cipher: cipher, key: SecureBytes(randomCount: 32), fileID: SecureRandom.bytes(16))
    let chunksPerRequest = max(1, requestSize / chunkSize)
    let requestBytes = chunksPerRequest * chunkSize
    let requests = max(1, megabytes * (1 << 20) / requestBytes)
    let sealedChunk = chunkSize + cipher.overhead
    let plain = UnsafeMutableRawPointer.allocate(byteCount: requestBytes, alignment: 16)
    let sealed = UnsafeMutableRawPointer.allocate(byteCount: chunksPerRequest * sealedChunk, alignment: 16)
    let opened = UnsafeMutableRawPointer.allocate(byteCount: requestBytes, alignment: 16)
    defer { plain.deallocate(); sealed.deallocate(); opened.deallocate() }
    SecureRandom.fill(UnsafeMutableRawBufferPointer(start: plain, count: requestBytes))
    var nonce = [UInt8](repeating: 0, count: 32)
    let total = Double(requests * requestBytes)

    func sealRequest(_ r: Int) {
        let seq = NonceSequence(cipher: cipher)
        nonce.withUnsafeMutableBytes { nb in
            for i in 0..<chunksPerRequest {
                seq.nonce(i, into: nb.baseAddress!)
                c.seal(index: UInt64(r * chunksPerRequest + i), plaintext: plain + i * chunkSize, count: chunkSize,
                       nonce: nb.baseAddress!, into: sealed + i * sealedChunk)
            }
        }
    }

    var sealRates = [Double](), openRates = [Double]()
    sealRequest(0)   // warm-up
    for _ in 0..<repetitions {
        var t = now()
        for r in 0..<requests { sealRequest(r) }
        sealRates.append(total / (now() - t) / 1e6)
        // Open the same request repeatedly (chunk indices of request 0), verifying each.
        sealRequest(0)
        t = now()
        for _ in 0..<requests {
            for i in 0..<chunksPerRequest {
                try c.open(index: UInt64(i), sealed: sealed + i * sealedChunk, sealedCount: sealedChunk, into: opened + i * chunkSize)
            }
        }
        openRates.append(total / (now() - t) / 1e6)
    }
    guard memcmp(plain, opened, requestBytes) == 0 else { fatalError("round trip mismatch") }
    return Result(seal: median(sealRates), open: median(openRates))
}

func label(_ n: Int) -> String { n >= 1 << 20 ? "\(n >> 20) MiB" : "\(n >> 10) KiB" }
func fmt(_ x: Double) -> String { String(Int(x.rounded())) }

let ciphers = ContentCipher.allCases.filter(\.isAvailable)
print("Chunk AEAD throughput, median of \(repetitions) x \(megabytes) MiB, MB/s (10^6 B/s); preferred here: \(ContentCipher.preferred.name); AES-256-GCM engine that ran: \(AESGCMEngine.current.rawValue)")
print("")
var header = "| chunk |"
var rule = "|---|"
for c in ciphers { header += " \(c.name) seal | \(c.name) open |"; rule += "---:|---:|" }
print(header)
print(rule)
for cs in chunkSizes {
    var row = "| \(label(cs)) |"
    for c in ciphers {
        let r = try bench(c, chunkSize: cs)
        row += " \(fmt(r.seal)) | \(fmt(r.open)) |"
    }
    print(row)
}
