import PhotoVaultCrypto

/// Geometry of an encrypted file (FORMAT.md, "File contents"):
///   header (128 bytes) || chunk 0 || chunk 1 || ... ; chunk = nonce || ciphertext || tag
/// Every chunk but the last holds exactly `chunkSize` plaintext bytes.
public struct ChunkLayout: Sendable, Equatable {
    public static let headerSize = FileHeader.size
    /// Largest plaintext size, 2^62 bytes (4 EiB): its ciphertext (at most 1 + 40/4096 times
    /// larger, plus the header) still fits an off_t with room to spare. A truncate or write
    /// beyond it fails with EFBIG.
    public static let maximumPlaintextSize: UInt64 = 1 << 62
    public let cipher: ContentCipher
    public let chunkSize: Int

    public init(cipher: ContentCipher, chunkSize: Int) {
        self.cipher = cipher
        self.chunkSize = chunkSize
    }

    public var overhead: Int { cipher.overhead }
    public var sealedChunkSize: Int { chunkSize + overhead }

    /// Byte offset of chunk `i` in the ciphertext file.
    @inline(__always) public func sealedOffset(ofChunk i: UInt64) -> UInt64 {
        UInt64(ChunkLayout.headerSize) + i * UInt64(sealedChunkSize)
    }

    /// Plaintext size from ciphertext size, without decrypting. A size that no valid file can
    /// have (truncated header, or a last chunk shorter than its overhead) is an integrity error.
    public func plaintextSize(ciphertextSize c: UInt64) throws -> UInt64 {
        if c == 0 { return 0 }   // empty file whose header is not written yet
        guard c >= UInt64(ChunkLayout.headerSize) else {
            throw StoreError.integrity(path: "", detail: "header truncated (\(c) bytes)")
        }
        let body = c - UInt64(ChunkLayout.headerSize)
        let full = body / UInt64(sealedChunkSize)
        let rem = body % UInt64(sealedChunkSize)
        if rem == 0 { return full * UInt64(chunkSize) }
        guard rem > UInt64(overhead) else {
            throw StoreError.integrity(path: "", detail: "last chunk truncated (\(rem) bytes)")
        }
        return full * UInt64(chunkSize) + rem - UInt64(overhead)
    }

    /// For `stat`: never throws; a damaged size rounds down (reads then report EIO).
    public func reportedSize(ciphertextSize c: UInt64) -> UInt64 {
        if let s = try? plaintextSize(ciphertextSize: c) { return s }
        if c < UInt64(ChunkLayout.headerSize) { return 0 }
        let body = c - UInt64(ChunkLayout.headerSize)
        return body / UInt64(sealedChunkSize) * UInt64(chunkSize)
    }

    public func ciphertextSize(plaintextSize p: UInt64) -> UInt64 {
        let full = p / UInt64(chunkSize)
        let rem = p % UInt64(chunkSize)
        return UInt64(ChunkLayout.headerSize) + full * UInt64(sealedChunkSize) + (rem > 0 ? rem + UInt64(overhead) : 0)
    }
}
