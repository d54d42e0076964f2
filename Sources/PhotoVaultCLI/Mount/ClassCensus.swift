import Glibc
import PhotoVaultCrypto
import PhotoVaultStore

/// Counts the files of each protection class in a ciphertext tree by reading byte 6 of
/// every header (no key needed, no decryption). Used by `photovault status`.
enum ClassCensus {
    static func count(treeRoot: String) -> [ProtectionClass: Int] {
        var counts: [ProtectionClass: Int] = [:]
        let fd = open(treeRoot, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return counts }
        walk(fd, &counts, depth: 0)
        return counts
    }

    /// Takes ownership of `dirfd`.
    private static func walk(_ dirfd: Int32, _ counts: inout [ProtectionClass: Int], depth: Int) {
        guard let dir = fdopendir(dirfd) else { close(dirfd); return }
        defer { closedir(dir) }
        while let ent = readdir(dir) {
            let name = DirectoryEntryName.string(ent)
            if NameCodec.isInternal(name) { continue }
            switch Int32(ent.pointee.d_type) {
            case Int32(DT_DIR):
                guard depth < 256 else { continue }
                let sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if sub >= 0 { walk(sub, &counts, depth: depth + 1) }
            case Int32(DT_REG):
                // Not waited on if a FIFO took the file's place since readdir (nor followed).
                guard let f = try? FileIO.openRegular(dirfd, name, what: name) else { continue }
                var b = [UInt8](repeating: 0, count: 8)
                let n = pread(f, &b, 8, 0)
                close(f)
                if n == 8, b[0] == 0x50, b[1] == 0x56, b[2] == 0x46, let c = ProtectionClass(rawValue: b[6]) {
                    counts[c, default: 0] += 1
                }
            default:
                continue
            }
        }
    }
}
