import Foundation
import XCTest

/// Issue 35, item 6: CREDENTIALS.md promises that on a full disk the owner gets in. With the
/// disk kept full by another process, a right password was refused (exit 19, "the password
/// was not checked") and `accounts/throttle-reserve` was gone: the count was written after
/// deleting the reserve, into the block that freed, which the filling process took first;
/// and a wrong guess on a full disk used up the reserve for good. Counts now go into blocks
/// the throttle already holds (LoginThrottle.countInPlace).
final class HardeningFullDiskTests: XCTestCase {
    func testTheOwnerGetsInOnADiskAnotherProcessKeepsFull() throws {
        let s = Sandbox("pv-hard-full")
        let release = s.storeOnOwnFilesystem(size: "2m")
        defer { release() }
        s.initStore()
        let wrong = s.root + "/wrong"
        try Sandbox.writeSecret("definitely wrong\n", to: wrong)
        let q = Sandbox.quote(s.store)
        let fill = s.run("dd if=/dev/zero of=\(q)/filler bs=4k")
        XCTAssertTrue(fill.stderr.contains("No space left on device"), fill.stderr)
        // Another process keeps the disk full: it takes every block that is freed at once.
        let filler = try BackgroundProcess(["/bin/bash", "-c", "while :; do head -c 4096 /dev/zero >> \(q)/filler2 2>/dev/null; done"],
                                           output: s.root + "/filler.log")
        defer { filler.stop() }
        func fsck(_ passfile: String) -> Harness.Result {
            s.pv(["fsck", "--store", s.store, "--user", "alice", "--passfile", passfile], timeout: 60)
        }
        for round in 1...3 {
            let w = fsck(wrong)
            XCTAssertEqual(w.status, 5, "wrong password, round \(round): \(w.stderr)")
            let r = fsck(s.passfile)
            XCTAssertEqual(r.status, 0, "right password, round \(round): \(r.stderr)")
            XCTAssertTrue(FileManager.default.fileExists(atPath: s.store + "/accounts/throttle-reserve"),
                          "round \(round): the spare block must be back")
        }
        XCTAssertTrue(filler.isRunning)
    }
}
