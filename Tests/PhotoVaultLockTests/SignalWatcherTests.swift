import Foundation
import Glibc
import PhotoVaultLock
import XCTest

final class SignalWatcherTests: XCTestCase {
    func testSIGUSR1AndTerminationSignalsAreDelivered() {
        let recorder = EventRecorder()
        let watcher = SignalWatcher(handler: { recorder.record($0) })
        watcher.start()
        defer { watcher.stop() }

        let t0 = DispatchTime.now()
        XCTAssertEqual(kill(getpid(), SIGUSR1), 0)
        guard let hit = recorder.wait(for: .userSignal) else { return XCTFail("no userSignal: \(recorder.reasons)") }
        print("latency SIGUSR1: \(String(format: "%.3f", milliseconds(from: t0, to: hit))) ms")

        for sig in [SIGHUP, SIGTERM, SIGINT] {
            XCTAssertEqual(kill(getpid(), sig), 0)
            XCTAssertNotNil(recorder.wait(for: .terminate(sig)), "signal \(sig): \(recorder.reasons)")
        }
        XCTAssertEqual(recorder.reasons, [.userSignal, .terminate(SIGHUP), .terminate(SIGTERM), .terminate(SIGINT)])
    }

    func testStopRestoresPreviousDisposition() {
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        var saved = sigaction()
        sigaction(SIGUSR1, &ignore, &saved)
        defer { sigaction(SIGUSR1, &saved, nil) }

        let watcher = SignalWatcher(handler: { _ in })
        watcher.start()
        watcher.stop()
        var now = sigaction()
        sigaction(SIGUSR1, nil, &now)
        XCTAssertEqual(unsafeBitCast(now.__sigaction_handler.sa_handler, to: Int.self),
                       unsafeBitCast(SIG_IGN, to: Int.self))
        // Watching again after a stop works.
        let recorder = EventRecorder()
        let again = SignalWatcher(handler: { recorder.record($0) })
        again.start()
        defer { again.stop() }
        kill(getpid(), SIGUSR1)
        XCTAssertNotNil(recorder.wait(for: .userSignal))
    }
}
