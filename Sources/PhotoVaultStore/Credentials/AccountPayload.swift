import PhotoVaultCrypto

/// The secret wrapped by both slots of a record: master key (32) || tree ID (16).
/// Only ever held in secure memory. The tree ID is inside it so that the link between a
/// record and its `users/<tree ID>/` directory is invisible without a password.
enum AccountPayload {
    static let masterKeySize = 32
    static let treeIDSize = 16
    static let size = masterKeySize + treeIDSize

    static func make(masterKey: SecureBytes, treeID: [UInt8]) -> SecureBytes {
        precondition(masterKey.count == masterKeySize && treeID.count == treeIDSize)
        let p = SecureBytes(count: size)
        p.withUnsafeMutableBytes { out in
            masterKey.withUnsafeBytes { out.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: masterKeySize) }
            treeID.withUnsafeBytes { (out.baseAddress! + masterKeySize).copyMemory(from: $0.baseAddress!, byteCount: treeIDSize) }
        }
        return p
    }

    /// Splits an unwrapped payload; the caller wipes `payload`.
    static func split(_ payload: SecureBytes) throws -> (masterKey: SecureBytes, treeID: [UInt8]) {
        guard payload.count == size else { throw StoreError.corruptRecord("payload has \(payload.count) bytes") }
        return payload.withUnsafeBytes { raw in
            let mk = SecureBytes(copying: UnsafeRawBufferPointer(rebasing: raw[0..<masterKeySize]))
            return (mk, Array(raw[masterKeySize..<size]))
        }
    }
}
