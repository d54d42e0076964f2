import Foundation
import XCTest

/// The mount daemon's request threads keep the default policy (`MountOptions.batchWorkers`,
/// off by default since run L3 of PERFORMANCE.md: under SCHED_BATCH every round trip waited
/// for a time slice on a busy machine). PHOTOVAULT_BATCH_WORKERS=1 puts them under
/// SCHED_BATCH, so that a worker that wakes to decrypt read-ahead does not preempt the `cp`
/// it serves; the lock watcher's threads keep the default policy either way, so a lock is
/// handled as promptly.
final class DaemonSchedulingTests: XCTestCase {
    static let schedOther = 0, schedBatch = 3

    /// (thread id, policy, waiting on /dev/fuse) for every thread of `pid`: the policy is
    /// field 41 of /proc/PID/task/TID/stat, a request thread waits in `fuse_dev_do_read`.
    static func threads(of pid: pid_t) throws -> [(tid: String, policy: Int, worker: Bool)] {
        let dir = "/proc/\(pid)/task"
        return try FileManager.default.contentsOfDirectory(atPath: dir).compactMap { tid in
            guard let stat = try? String(contentsOfFile: "\(dir)/\(tid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            // Fields after the command name (which may hold spaces) start at field 3.
            let rest = stat[stat.index(after: close)...].split(separator: " ")
            guard rest.count > 38, let policy = Int(rest[38]) else { return nil }
            let wchan = ((try? String(contentsOfFile: "\(dir)/\(tid)/wchan", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            return (tid, policy, wchan == "fuse_dev_do_read")
        }
    }

    /// Copies photos in and out so that libfuse has started several workers, then returns
    /// the daemon's threads once they are idle on /dev/fuse again.
    func exercisedThreads(_ sb: Sandbox, _ mp: String) throws -> [(tid: String, policy: Int, worker: Bool)] {
        let m = Sandbox.quote(mp), r = Sandbox.quote(sb.root)
        sb.ok("""
        set -e
        for i in 1 2 3 4 5 6; do head -c 3000000 /dev/urandom > \(r)/p$i.jpg; done
        cp \(r)/p*.jpg \(m)/
        echo 3 > /proc/sys/vm/drop_caches
        mkdir \(r)/out && cp \(m)/p*.jpg \(r)/out/
        for i in 1 2 3 4 5 6; do cmp \(r)/p$i.jpg \(r)/out/p$i.jpg; done
        """)
        let pid = try XCTUnwrap(MountProbe.daemonPID(sb, mp), "no daemon pid for \(mp)")
        var threads: [(tid: String, policy: Int, worker: Bool)] = []
        _ = Harness.waitUntil(5) {
            threads = (try? Self.threads(of: pid)) ?? []
            return threads.filter(\.worker).count >= 2
        }
        return threads
    }

    func testEveryThreadKeepsTheDefaultPolicyByDefault() throws {
        XCTAssertEqual(getuid(), 0, "drop_caches needs root")
        let sb = Sandbox("pv-sched")
        sb.initStore()
        let mp = sb.mount()
        let threads = try exercisedThreads(sb, mp)
        XCTAssertGreaterThanOrEqual(threads.filter(\.worker).count, 2, "fewer than 2 threads wait on /dev/fuse: \(threads)")
        XCTAssertEqual(threads.filter { $0.policy != Self.schedOther }.map(\.tid), [],
                       "threads not under the default policy: \(threads)")
        sb.unmount(mp)
    }

    /// PHOTOVAULT_BATCH_WORKERS=1 puts the request threads, and only them, under SCHED_BATCH.
    func testTheBatchKnobPutsOnlyTheRequestThreadsUnderSchedBatch() throws {
        XCTAssertEqual(getuid(), 0, "drop_caches needs root")
        let sb = Sandbox("pv-sched-batch")
        sb.initStore()
        let mp = sb.mountWrapped("env PHOTOVAULT_BATCH_WORKERS=1", at: "mnt-batch")
        let threads = try exercisedThreads(sb, mp)
        let workers = threads.filter(\.worker)
        XCTAssertGreaterThanOrEqual(workers.count, 2, "fewer than 2 threads wait on /dev/fuse: \(threads)")
        XCTAssertEqual(workers.filter { $0.policy != Self.schedBatch }.map(\.tid), [],
                       "request threads not under SCHED_BATCH: \(threads)")
        // The signal watcher, the control socket and the other lock-watching threads.
        XCTAssertTrue(threads.contains { !$0.worker && $0.policy == Self.schedOther },
                      "no thread kept the default policy: \(threads)")
        sb.unmount(mp)
    }

    /// PHOTOVAULT_BATCH_WORKERS=0 keeps the default policy everywhere, as the default does
    /// (the benchmarks name both values, whatever the default).
    func testTheBenchmarkKnobKeepsTheDefaultPolicy() throws {
        XCTAssertEqual(getuid(), 0, "drop_caches needs root")
        let sb = Sandbox("pv-sched-knob")
        sb.initStore()
        let mp = sb.mountWrapped("env PHOTOVAULT_BATCH_WORKERS=0", at: "mnt-default")
        let threads = try exercisedThreads(sb, mp)
        XCTAssertGreaterThanOrEqual(threads.filter(\.worker).count, 2, "fewer than 2 threads wait on /dev/fuse: \(threads)")
        XCTAssertEqual(threads.filter { $0.policy != Self.schedOther }.map(\.tid), [],
                       "threads not under the default policy: \(threads)")
        sb.unmount(mp)
    }
}
