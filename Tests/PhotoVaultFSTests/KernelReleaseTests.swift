import Foundation
import XCTest
@testable import PhotoVaultFS

/// Direct writes depend on the kernel's release (KernelRelease.directWritesKeepCachesCoherent).
final class KernelReleaseTests: XCTestCase {
    func testParsesDistributionReleases() throws {
        let cases: [(String, Int, Int)] = [("6.18.44-fc-v1147", 6, 18), ("6.1.0-28-amd64", 6, 1),
                                           ("5.10.0-33-cloud-amd64", 5, 10), ("6.6", 6, 6)]
        for (text, major, minor) in cases {
            let r = try XCTUnwrap(KernelRelease(text), text)
            XCTAssertEqual(r.major, major, text)
            XCTAssertEqual(r.minor, minor, text)
        }
        for bad in ["", "linux", "6", "-6.1"] { XCTAssertNil(KernelRelease(bad), bad) }
        XCTAssertLessThan(KernelRelease(major: 6, minor: 1), KernelRelease(major: 6, minor: 6))
        XCTAssertLessThan(KernelRelease(major: 5, minor: 19), KernelRelease(major: 6, minor: 0))
        XCTAssertFalse(KernelRelease(major: 6, minor: 10) < KernelRelease(major: 6, minor: 6))
    }

    /// `running` agrees with /proc, read independently of uname.
    func testRunningKernelMatchesProc() throws {
        let text = try String(contentsOfFile: "/proc/sys/kernel/osrelease", encoding: .utf8)
        let fields = text.split(separator: ".")
        let running = try XCTUnwrap(KernelRelease.running)
        XCTAssertEqual(String(running.major), String(fields[0]))
        XCTAssertEqual(String(running.minor), String(fields[1].prefix(while: \.isNumber)))
        XCTAssertEqual(KernelRelease.directWritesKeepCachesCoherent,
                       running.major > 6 || (running.major == 6 && running.minor >= 6))
    }
}
