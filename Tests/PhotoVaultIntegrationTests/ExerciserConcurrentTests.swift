import Foundation
import XCTest

/// Several threads write disjoint, interleaved byte ranges of one file at once, through
/// their own descriptors. Ranges share chunks, so every write is a read-modify-write of a
/// chunk another thread is changing too; on ext4 the outcome is fully determined, and the
/// mount must produce exactly the same bytes.
final class ExerciserConcurrentTests: XCTestCase {
    func testInterleavedStripesFromFourThreads() throws {
        let sb = Sandbox("pv-stripes")
        sb.initStore()
        let mp = sb.mount()
        let path = mp + "/striped.bin"
        let threads = 4, stripe = 1000, fileSize = 600_000
        // Stripe s belongs to thread s % threads; 1000-byte stripes straddle 4 KiB chunks.
        XCTAssertEqual(Harness.run(["truncate", "-s", "\(fileSize)", path]).status, 0)
        let expected = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: fileSize)
        expected.initialize(repeating: 0)
        defer { expected.deallocate() }
        let failures = FailureLog()
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            var rng = SeededGenerator(seed: 0xC0_0000 + UInt64(t))
            let fd = open(path, O_RDWR | O_CLOEXEC)
            guard fd >= 0 else { failures.add("thread \(t): open errno \(errno)"); return }
            defer { close(fd) }
            let myStripes = stride(from: t, to: fileSize / stripe, by: threads).map { $0 }
            for round in 0..<400 {
                let s = myStripes[Int(rng.next() % UInt64(myStripes.count))]
                let start = s * stripe + Int(rng.next() % UInt64(stripe))
                let len = 1 + Int(rng.next() % UInt64(s * stripe + stripe - start))
                let data = rng.bytes(len)
                // Each thread writes only its own bytes of `expected`: no two threads touch
                // the same element.
                for k in 0..<len { expected[start + k] = data[k] }
                let n = FilePair.pwriteAll(fd, data, Int64(start))
                if n != len { failures.add("thread \(t) round \(round): pwrite \(len) at \(start) -> \(n)") }
                // Read back one of its own stripes whole.
                if round % 5 == 0 {
                    let r = myStripes[Int(rng.next() % UInt64(myStripes.count))] * stripe
                    let (got, err) = FilePair.preadAll(fd, stripe, Int64(r))
                    let want = Array(expected[r..<(r + stripe)])
                    if err != 0 || got != want {
                        failures.add("thread \(t) round \(round): stripe at \(r) reads back wrong (errno \(err))")
                    }
                }
            }
        }
        XCTAssertEqual(failures.all, [])
        let final = FileManager.default.contents(atPath: path).map { [UInt8]($0) } ?? []
        XCTAssertEqual(final.count, fileSize)
        let want = Array(expected)
        if final != want {
            let first = zip(final, want).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? -1
            XCTFail("final contents differ first at byte \(first)")
        }
        let remounted = sb.remount(mp)
        XCTAssertEqual(FileManager.default.contents(atPath: remounted + "/striped.bin").map { [UInt8]($0) }, want)
        sb.unmount(remounted)
    }
}

/// Thread-safe collection of failure messages (XCTFail from worker threads is avoided).
final class FailureLog: @unchecked Sendable {
    private let lock = NSLock()
    private var messages: [String] = []
    func add(_ m: String) { lock.lock(); messages.append(m); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return messages }
}
