import Foundation
import PhotoVaultCrypto

/// One account's credential record, `accounts/<name>.rec` (CREDENTIALS.md, "Record").
///
/// Two slots wrap the same 48-byte payload (master key || tree ID): one under a key derived
/// from the password, one under a key derived from the recovery key. Every other field is
/// bound into the slots' associated data, so a record that was edited, renamed, or copied
/// from another store does not open.
public struct AccountRecord: Equatable, Sendable {
    public static let formatName = "photovault-account"
    public static let currentVersion = 1
    public static let saltSize = PasswordKDF.saltSize                        // 16
    public static let deviceIDSize = 16
    public static let slotSize = SecretBox.overhead + AccountPayload.size    // 24 + 48 + 16 = 88
    /// Records are a few hundred bytes; anything much larger is not a record.
    public static let maximumFileSize = 64 * 1024
    /// Ceilings on the stored Argon2id cost: an edited record must not be able to make an
    /// unlock run for hours or allocate all memory. The store config's costs share them.
    public static let maximumOpsLimit: UInt64 = 64
    public static let maximumMemLimit: UInt64 = 4 << 30

    static func isWithinCeilings(_ p: Argon2Parameters) -> Bool {
        p.opsLimit <= maximumOpsLimit && p.memLimit <= maximumMemLimit
    }

    public var version: Int
    public var kdf: Argon2Parameters
    public var salt: [UInt8]
    public var deviceBound: Bool
    /// ID of the device secret the record is bound to (nil unless `deviceBound`).
    public var deviceID: [UInt8]?
    public var passwordSlot: [UInt8]
    public var recoverySlot: [UInt8]

    public init(kdf: Argon2Parameters, salt: [UInt8], deviceBound: Bool, deviceID: [UInt8]?,
                passwordSlot: [UInt8] = [], recoverySlot: [UInt8] = []) {
        version = AccountRecord.currentVersion
        self.kdf = kdf
        self.salt = salt
        self.deviceBound = deviceBound
        self.deviceID = deviceID
        self.passwordSlot = passwordSlot
        self.recoverySlot = recoverySlot
    }

    // MARK: associated data

    static let passwordSlotLabel = "PhotoVault account record password slot"
    static let recoverySlotLabel = "PhotoVault account record recovery slot"

    /// AD of the password slot: label || 0x00 || u32le version || storeID (16)
    /// || u16le length || file name || u64le opsLimit || u64le memLimit || salt (16)
    /// || u8 deviceBound || deviceID (16, zeros when not bound).
    func passwordSlotAD(storeID: [UInt8], fileName: String) -> [UInt8] {
        var ad = commonAD(label: AccountRecord.passwordSlotLabel, storeID: storeID, fileName: fileName)
        ad.appendLE(kdf.opsLimit)
        ad.appendLE(kdf.memLimit)
        ad.append(contentsOf: salt)
        appendDevice(to: &ad)
        return ad
    }

    /// AD of the recovery slot: the same without the Argon2id parameters and salt, which the
    /// recovery slot does not use (so a password change, which may pick a new cost and always
    /// picks a new salt, does not need the recovery key to rewrite this slot).
    func recoverySlotAD(storeID: [UInt8], fileName: String) -> [UInt8] {
        var ad = commonAD(label: AccountRecord.recoverySlotLabel, storeID: storeID, fileName: fileName)
        appendDevice(to: &ad)
        return ad
    }

    private func commonAD(label: String, storeID: [UInt8], fileName: String) -> [UInt8] {
        var ad = Array(label.utf8)
        ad.append(0)
        ad.appendLE(UInt32(truncatingIfNeeded: version))
        ad.append(contentsOf: storeID)
        let name = Array(fileName.utf8)
        ad.appendLE(UInt16(truncatingIfNeeded: name.count))
        ad.append(contentsOf: name)
        return ad
    }

    private func appendDevice(to ad: inout [UInt8]) {
        ad.append(deviceBound ? 1 : 0)
        ad.append(contentsOf: deviceID ?? [UInt8](repeating: 0, count: AccountRecord.deviceIDSize))
    }

    // MARK: KDF policy

    /// Refuses parameters below the store's floor (and never below `Argon2Parameters.floor`),
    /// before any Argon2id runs: a lowered cost is what an attacker who edits the record
    /// would try, to make the next password typed here cheap to brute-force.
    static func checkCost(_ p: Argon2Parameters, floor: Argon2Parameters) throws {
        guard p.isAtLeast(floor), p.isAtLeast(.floor) else { throw StoreError.weakKDFParameters }
        guard isWithinCeilings(p) else {
            throw StoreError.corruptRecord("Argon2id cost above the accepted maximum (ops \(p.opsLimit), mem \(p.memLimit))")
        }
    }

    // MARK: encoding

    private struct Wire: Codable {
        var format: String
        var version: Int
        var kdf: Argon2Parameters
        var salt: String
        var deviceBound: Bool
        var deviceID: String?
        var passwordSlot: String
        var recoverySlot: String
    }

    public func encoded() -> [UInt8] {
        let w = Wire(format: AccountRecord.formatName, version: version, kdf: kdf, salt: Base64URL.encode(salt),
                     deviceBound: deviceBound, deviceID: deviceID.map { Base64URL.encode($0) },
                     passwordSlot: Base64URL.encode(passwordSlot), recoverySlot: Base64URL.encode(recoverySlot))
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys]
        return Array(try! enc.encode(w)) + [10]
    }

    /// Parses and checks the shape of a record. Order matters for the error a user sees:
    /// not JSON / not a record → `.corruptRecord`; a version this build does not know →
    /// `.unknownVersion` (before looking at fields a newer version may have changed);
    /// missing or malformed fields → `.corruptRecord`. The KDF floor is checked separately
    /// (`checkCost`) because recovery does not run Argon2id.
    public static func decode(_ bytes: [UInt8]) throws -> AccountRecord {
        let data = Data(bytes)
        guard let env = try? JSONDecoder().decode(VersionEnvelope.self, from: data) else {
            throw StoreError.corruptRecord("not valid JSON (truncated?)")
        }
        guard env.format == formatName else { throw StoreError.corruptRecord("not a PhotoVault account record") }
        guard let v = env.version else { throw StoreError.corruptRecord("no version") }
        guard v == currentVersion else { throw StoreError.unknownVersion(found: v, supported: currentVersion) }
        guard let w = try? JSONDecoder().decode(Wire.self, from: data) else {
            throw StoreError.corruptRecord("missing or mistyped fields")
        }
        guard let salt = Base64URL.decode(w.salt), salt.count == saltSize else { throw StoreError.corruptRecord("bad salt") }
        guard let pw = Base64URL.decode(w.passwordSlot), pw.count == slotSize else { throw StoreError.corruptRecord("bad password slot") }
        guard let rk = Base64URL.decode(w.recoverySlot), rk.count == slotSize else { throw StoreError.corruptRecord("bad recovery slot") }
        var deviceID: [UInt8]? = nil
        if w.deviceBound {
            guard let text = w.deviceID, let id = Base64URL.decode(text), id.count == deviceIDSize else {
                throw StoreError.corruptRecord("device-bound record without a valid device ID")
            }
            deviceID = id
        } else if w.deviceID != nil {
            throw StoreError.corruptRecord("device ID on a record that is not device-bound")
        }
        var r = AccountRecord(kdf: w.kdf, salt: salt, deviceBound: w.deviceBound, deviceID: deviceID,
                              passwordSlot: pw, recoverySlot: rk)
        r.version = v
        return r
    }
}

extension Array where Element == UInt8 {
    mutating func appendLE<T: FixedWidthInteger>(_ v: T) {
        Swift.withUnsafeBytes(of: v.littleEndian) { append(contentsOf: $0) }
    }
}
