import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultSession

/// What pam_exec hands `photovault pam` (the PAM runs themselves are in
/// PhotoVaultIntegrationTests/SessionPamTests).
final class PamRequestTests: XCTestCase {
    private func read(_ bytes: [UInt8]) -> String? {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        _ = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
        close(fds[1])
        defer { close(fds[0]) }
        return PamRequest.readPassword(fds[0]).map { s in s.withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }
    }

    func testThePasswordEndsAtItsNULOrNewlineOrAtTheEnd() {
        XCTAssertEqual(read(Array("login words\0".utf8)), "login words")
        XCTAssertEqual(read(Array("login words\0garbage".utf8)), "login words")
        XCTAssertEqual(read(Array("typed by hand\n".utf8)), "typed by hand")
        XCTAssertEqual(read(Array("no terminator".utf8)), "no terminator")
        XCTAssertEqual(read(Array("pässwörd\0".utf8)), "pässwörd")
    }

    func testNothingOrTooMuchIsNoPassword() {
        XCTAssertNil(read([]))
        XCTAssertNil(read([0]))
        XCTAssertNil(read(Array(repeating: UInt8(ascii: "a"), count: PamRequest.maximumPassword + 1)))
        XCTAssertEqual(read(Array(repeating: UInt8(ascii: "a"), count: PamRequest.maximumPassword))?.count,
                       PamRequest.maximumPassword)
    }

    func testOnlyTheAuthStackWithAUserIsARequest() {
        XCTAssertEqual(PamRequest(environment: ["PAM_TYPE": "auth", "PAM_USER": "alice", "PAM_SERVICE": "gdm-password"])?.user,
                       "alice")
        for type in ["account", "open_session", "close_session", "password"] {
            XCTAssertNil(PamRequest(environment: ["PAM_TYPE": type, "PAM_USER": "alice"]))
        }
        XCTAssertNil(PamRequest(environment: ["PAM_TYPE": "auth"]))
        XCTAssertNil(PamRequest(environment: ["PAM_TYPE": "auth", "PAM_USER": ""]))
    }
}
