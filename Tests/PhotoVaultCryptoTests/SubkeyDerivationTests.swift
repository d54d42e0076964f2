import XCTest
import Foundation
import CSodium
@testable import PhotoVaultCrypto

final class SubkeyDerivationTests: XCTestCase {
    func testDeterministic() throws {
        let a = try SubkeyDerivation.derive(from: fixedMasterKey(), id: 1, context: "PVacct01")
        let b = try SubkeyDerivation.derive(from: fixedMasterKey(), id: 1, context: "PVacct01")
        XCTAssertEqual(a.count, 32)
        XCTAssertEqual(bytesOf(a), bytesOf(b))
    }

    func testSeparatedByIDContextAndMaster() throws {
        let master = fixedMasterKey()
        var seen = Set<[UInt8]>()
        for ctx in ["PVacct01", "PVacct02", "PVother1"] {
            for id in UInt64(0)..<8 {
                XCTAssertTrue(seen.insert(bytesOf(try SubkeyDerivation.derive(from: master, id: id, context: ctx))).inserted,
                              "collision at \(ctx)/\(id)")
            }
        }
        let other = try SubkeyDerivation.derive(from: fixedMasterKey(offset: 1), id: 1, context: "PVacct01")
        XCTAssertFalse(seen.contains(bytesOf(other)))
        XCTAssertFalse(seen.contains(bytesOf(master)))
    }

    func testEqualsBLAKE2bWithSaltAndPersonal() throws {
        // libsodium documents crypto_kdf (BLAKE2b flavour) as BLAKE2b(key = master, empty
        // message, salt = id as u64 LE || 0^8, personal = context || 0^8): recompute it that way.
        let master = fixedMasterKey()
        for id in [UInt64(1), 7, 0x0102_0304_0506_0708] {
            let k = try SubkeyDerivation.derive(from: master, id: id, context: "PVacct01")
            var salt = [UInt8](repeating: 0, count: 16)
            for i in 0..<8 { salt[i] = UInt8(truncatingIfNeeded: id >> (8 * UInt64(i))) }
            var personal = [UInt8](repeating: 0, count: 16)
            personal.replaceSubrange(0..<8, with: Array("PVacct01".utf8))
            var expected = [UInt8](repeating: 0, count: 32)
            let mk = bytesOf(master)
            let rc = crypto_generichash_blake2b_salt_personal(&expected, 32, nil, 0, mk, 32, salt, personal)
            XCTAssertEqual(rc, 0)
            XCTAssertEqual(bytesOf(k), expected, "id \(id)")
        }
    }

    func testKeyedHashDependsOnKeyAndParts() {
        let data: [UInt8] = Array("hello".utf8)
        let unkeyed = KeyedHash.hash(data)
        XCTAssertEqual(unkeyed.count, 32)
        // BLAKE2b-256("") known answer (RFC 7693 family, libsodium crypto_generichash).
        XCTAssertEqual(KeyedHash.hash([], outputLength: 32).map { String(format: "%02x", $0) }.joined(),
                       "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8")
        let key: [UInt8] = Array(repeating: 1, count: 32)
        let keyed = key.withUnsafeBytes { k in data.withUnsafeBytes { d in KeyedHash.hash(key: k, parts: [d], outputLength: 32) } }
        XCTAssertNotEqual(keyed, unkeyed)
        // Splitting the message into parts does not change the hash (streaming).
        let split = key.withUnsafeBytes { k in
            Array("he".utf8).withUnsafeBytes { a in Array("llo".utf8).withUnsafeBytes { b in
                KeyedHash.hash(key: k, parts: [a, b], outputLength: 32) } }
        }
        XCTAssertEqual(split, keyed)
    }
}
