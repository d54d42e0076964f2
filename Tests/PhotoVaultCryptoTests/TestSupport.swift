import PhotoVaultCrypto

/// SplitMix64: a tiny seeded generator so randomized tests replay exactly on failure.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8.random(in: 0...255, using: &self) } }
}

/// A fixed master key (bytes 0...31): every derived value is reproducible.
func fixedMasterKey(offset: UInt8 = 0) -> SecureBytes {
    SecureBytes(copying: (0..<32).map { UInt8($0) &+ offset })
}

func bytesOf(_ s: SecureBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }
