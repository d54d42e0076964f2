import Foundation
import XCTest

/// Issue 35, item 4: wrong passwords tried in parallel cost what they cost one after
/// another. Each guess used to read the same failure count and wait the same short delay:
/// six parallel guesses with the count at 6 were judged within about 20 s, against about
/// 118 s in a row, and some were not even counted.
final class HardeningThrottleTests: XCTestCase {
    typealias T = OfflineCommandTests

    private func throttleFile(_ sb: Sandbox) throws -> String {
        let dir = sb.store + "/accounts"
        let name = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: dir).first { $0.hasSuffix(".throttle") },
                                 "no throttle count after a wrong password")
        return dir + "/" + name
    }

    private func failures(_ path: String) -> Int? {
        guard let data = FileManager.default.contents(atPath: path),
              let obj = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
        return obj["failures"] as? Int
    }

    func testParallelWrongGuessesAreJudgedOneAtATime() throws {
        let sb = Sandbox("pv-hard-throttle")
        sb.initStore()
        let wrong = sb.root + "/wrong"
        try "not the password".write(toFile: wrong, atomically: true, encoding: .utf8)
        chmod(wrong, 0o600)
        let guess = { sb.pv(["class", "list", "/", "--store", sb.store, "--user", "alice", "--passfile", wrong], timeout: 60) }
        XCTAssertEqual(guess().status, 5)
        let file = try throttleFile(sb)
        // Four failures, the last long ago: the next guess goes at once, then 2, 4 and 8 s
        // between the next ones (CREDENTIALS.md, "Throttling").
        let state = #"{"failures":4,"lastFailure":\#(Date().timeIntervalSince1970 - 100)}"#
        try state.write(toFile: file, atomically: true, encoding: .utf8)

        let n = 4
        let lock = NSLock()
        var statuses = Array(repeating: Int32(-1), count: n)
        let start = Date()
        DispatchQueue.concurrentPerform(iterations: n) { i in
            let s = guess().status
            lock.withLock { statuses[i] = s }
        }
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(statuses, Array(repeating: 5, count: n))
        XCTAssertEqual(failures(file), 4 + n, "every parallel guess must be counted")
        // 14 s of waits alone; the old code judged all four within about 5 s here.
        XCTAssertGreaterThanOrEqual(elapsed, 13.5, "the parallel guesses must wait 2 + 4 + 8 s, as in a row")

        // The right password waits its turn too, and opens.
        let right = T.pv(sb, ["class", "list", "/"])
        XCTAssertEqual(right.status, 0, right.stderr)
        XCTAssertNil(failures(file), "a right password clears the count")
    }
}
