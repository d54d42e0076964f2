import PhotoVaultLock
import XCTest

final class ParsingTests: XCTestCase {
    func testParseDurationAcceptsUnitsAndPlainSeconds() {
        XCTAssertEqual(parseDuration("90s"), 90)
        XCTAssertEqual(parseDuration("15m"), 900)
        XCTAssertEqual(parseDuration("1h"), 3600)
        XCTAssertEqual(parseDuration("2h30m"), 9000)
        XCTAssertEqual(parseDuration("1h5m10s"), 3910)
        XCTAssertEqual(parseDuration("45"), 45)
        XCTAssertEqual(parseDuration("1.5"), 1.5)
        XCTAssertEqual(parseDuration("1.5m"), 90)
        XCTAssertEqual(parseDuration(" 10M "), 600)
        XCTAssertEqual(parseDuration("1d"), 86_400)
    }

    func testParseDurationRejectsJunkAndNonPositive() {
        for junk in ["", "0", "-5", "0s", "0h0m", "abc", "5x", "h", "1h1h", "30m2h", "10 m", "1..5s", "5s3",
                     "inf", "nan", "1e400"] {
            XCTAssertNil(parseDuration(junk), "accepted \(junk)")
        }
    }

    func testSessionPathEscapingMatchesLogind() {
        XCTAssertEqual(logindSessionPath(forID: "1"), "/org/freedesktop/login1/session/_31")
        XCTAssertEqual(logindSessionPath(forID: "12"), "/org/freedesktop/login1/session/_312")
        XCTAssertEqual(logindSessionPath(forID: "c2"), "/org/freedesktop/login1/session/c2")
        XCTAssertEqual(logindSessionPath(forID: "c-2"), "/org/freedesktop/login1/session/c_2d2")
        XCTAssertEqual(logindSessionPath(forID: "a_b"), "/org/freedesktop/login1/session/a_5fb")
        XCTAssertEqual(logindSessionPath(forID: ""), "/org/freedesktop/login1/session/_")
        XCTAssertEqual(logindSessionPath(forID: "é"), "/org/freedesktop/login1/session/_c3_a9")
    }

    func testLockReasonDescriptionsAreDistinct() {
        let all: [LockReason] = [.sessionLock, .lockedHint, .screenSaver("x"), .prepareForSleep, .shutdown,
                                 .busLost("y"), .idle, .userSignal, .controlSocket, .terminate(15)]
        XCTAssertEqual(Set(all.map(\.description)).count, all.count)
        XCTAssertTrue(LockReason.terminate(15).description.contains("15"))
    }
}
