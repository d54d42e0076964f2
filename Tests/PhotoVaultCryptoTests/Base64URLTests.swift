import XCTest
@testable import PhotoVaultCrypto

final class Base64URLTests: XCTestCase {
    func testRFC4648VectorsWithoutPadding() {
        // RFC 4648 section 10, padding removed.
        let cases: [(String, String)] = [("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"),
                                         ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy")]
        for (plain, encoded) in cases {
            XCTAssertEqual(Base64URL.encode(Array(plain.utf8)), encoded)
            XCTAssertEqual(Base64URL.decode(encoded), Array(plain.utf8))
        }
    }

    func testURLSafeAlphabet() {
        XCTAssertEqual(Base64URL.encode([0xfb, 0xff]), "-_8")
        XCTAssertEqual(Base64URL.decode("-_8"), [0xfb, 0xff])
    }

    func testRoundTripAllLengths() {
        var rng = SeededGenerator(seed: 7)
        for n in 0..<200 {
            let b = rng.bytes(n)
            let e = Base64URL.encode(b)
            XCTAssertEqual(e.utf8.count, (n * 4 + 2) / 3)
            XCTAssertTrue(e.utf8.allSatisfy { c in
                (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || c == 45 || c == 95 })
            XCTAssertEqual(Base64URL.decode(e), b, "length \(n)")
        }
    }

    func testRejectsPadding() {
        XCTAssertNil(Base64URL.decode("Zg=="))
        XCTAssertNil(Base64URL.decode("Zm8="))
    }

    func testRejectsForeignCharacters() {
        for bad in ["Zm9v+", "Zm9/", "Zm 9v", "Zm9v\n", "Zm.v", "Zm9é", "Zm9v~"] {
            XCTAssertNil(Base64URL.decode(bad), bad)
        }
    }

    func testRejectsImpossibleLength() {
        XCTAssertNil(Base64URL.decode("Z"))
        XCTAssertNil(Base64URL.decode("Zm9vY"))
    }

    func testRejectsNonCanonicalTrailingBits() {
        // "Zg" is canonical for "f"; "Zh" decodes to the same 8 bits plus non-zero leftover bits.
        XCTAssertNil(Base64URL.decode("Zh"))
        XCTAssertNil(Base64URL.decode("Zm9"))   // canonical "Zm8"
        XCTAssertEqual(Base64URL.decode("Zm8"), Array("fo".utf8))
        // Every non-canonical variant of a 1-byte and 2-byte tail is rejected.
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for (i, c) in alphabet.enumerated() {
            let one = "A" + String(c)
            if i % 16 == 0 { XCTAssertNotNil(Base64URL.decode(one), one) } else { XCTAssertNil(Base64URL.decode(one), one) }
            let two = "AA" + String(c)
            if i % 4 == 0 { XCTAssertNotNil(Base64URL.decode(two), two) } else { XCTAssertNil(Base64URL.decode(two), two) }
        }
    }
}
