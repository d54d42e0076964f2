import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// The login slot (CREDENTIALS.md section 12): what opens through it, that nothing tried
/// through the PAM path is counted, and that a slot outlives neither its account nor a
/// re-added account of the same name.
final class CredentialLoginSlotTests: CredentialTestCase {
    private func loginFile(_ user: String) throws -> String {
        layout.accountsDir + "/" + (try AccountName.derive(user: user, config: store.config)).loginFileName
    }
    private func throttleFile(_ user: String) throws -> String {
        layout.accountsDir + "/" + (try AccountName.derive(user: user, config: store.config)).throttleFileName
    }

    func testTheLoginAndVaultPasswordsOpenAndNothingIsCounted() throws {
        _ = try store.add(user: "alice", password: pw("vault-password"), deviceBound: false, parameters: fast)
        let plain = try store.open(user: "alice", password: pw("vault-password"))
        defer { plain.wipe() }
        XCTAssertNil(store.openWithLoginPassword(user: "alice", password: pw("login-password")))
        try store.addLoginSlot(user: "alice", password: pw("vault-password"), loginPassword: pw("login-password"),
                               parameters: fast)
        XCTAssertTrue(try store.hasLoginSlot(user: "alice"))
        for password in ["login-password", "vault-password"] {
            let opened = try XCTUnwrap(store.openWithLoginPassword(user: "alice", password: pw(password)), password)
            XCTAssertEqual(opened.treeID, plain.treeID)
            XCTAssertTrue(opened.masterKey.withUnsafeBytes { a in plain.masterKey.withUnsafeBytes { constantTimeEqual(a, $0) } })
            opened.wipe()
        }
        // Ten passwords that fit nothing: no count, so the right vault password is not delayed.
        for i in 0..<10 { XCTAssertNil(store.openWithLoginPassword(user: "alice", password: pw("no fit \(i)!"))) }
        XCTAssertNotEqual(access(try throttleFile("alice"), F_OK), 0, "a login password that fits nothing was counted")
        XCTAssertNil(store.openWithLoginPassword(user: "nobody-here", password: pw("login-password")))

        XCTAssertTrue(try store.removeLoginSlot(user: "alice", password: pw("vault-password")))
        XCTAssertNil(store.openWithLoginPassword(user: "alice", password: pw("login-password")))
        XCTAssertFalse(try store.removeLoginSlot(user: "alice", password: pw("vault-password")))
    }

    func testAWrongVaultPasswordAddsNoSlot() throws {
        _ = try store.add(user: "alice", password: pw("vault-password"), deviceBound: false, parameters: fast)
        XCTAssertThrowsError(try store.addLoginSlot(user: "alice", password: pw("not-the-one"),
                                                    loginPassword: pw("login-password"), parameters: fast))
        XCTAssertNotEqual(access(try loginFile("alice"), F_OK), 0)
    }

    /// `user remove` takes the slot away; a slot file kept from the removed account (a
    /// backup put back) does not open the account re-added under the same name.
    func testASlotDiesWithItsAccount() throws {
        _ = try store.add(user: "alice", password: pw("vault-password"), deviceBound: false, parameters: fast)
        try store.addLoginSlot(user: "alice", password: pw("vault-password"), loginPassword: pw("login-password"),
                               parameters: fast)
        let old = try Data(contentsOf: URL(fileURLWithPath: try loginFile("alice")))
        try store.remove(user: "alice", password: pw("vault-password"), deletePhotos: true)
        XCTAssertNotEqual(access(try loginFile("alice"), F_OK), 0)
        _ = try store.add(user: "alice", password: pw("other-vault-password"), deviceBound: false, parameters: fast)
        try old.write(to: URL(fileURLWithPath: try loginFile("alice")))
        XCTAssertNil(store.openWithLoginPassword(user: "alice", password: pw("login-password")))
    }
}
