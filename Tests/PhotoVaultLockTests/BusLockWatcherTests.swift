import Foundation
import Glibc
@testable import PhotoVaultLock
import XCTest

/// End-to-end tests of BusLockWatcher against private dbus-daemons (a "system" and a "session"
/// bus per test), signals from dbus-send or from an in-process fake logind.
final class BusLockWatcherTests: XCTestCase {
    private var systemBus: PrivateBus!
    private var sessionBus: PrivateBus!
    private var fake: FakeLogind?
    private var watcher: BusLockWatcher?
    private let recorder = EventRecorder()
    private static let path1 = "/org/freedesktop/login1/session/_31"

    override func setUpWithError() throws {
        systemBus = try PrivateBus(name: "system")
        sessionBus = try PrivateBus(name: "session")
    }

    override func tearDown() {
        watcher?.stop()
        fake?.stop()
        systemBus?.stop()
        sessionBus?.stop()
    }

    @discardableResult
    private func startFake(sessionPath: String = path1, lockedHint: Bool = false,
                           answerGetSessionByPID: Bool = true) throws -> FakeLogind {
        let f = FakeLogind(address: systemBus.address, sessionPath: sessionPath, lockedHint: lockedHint,
                           answerGetSessionByPID: answerGetSessionByPID)
        try f.start()
        fake = f
        return f
    }

    @discardableResult
    private func startWatcher(systemAddress: String? = nil, sessionPath: String? = nil,
                              environment: [String: String] = ["XDG_SESSION_ID": "1"],
                              inhibitor: Bool = false,
                              wantsSleepInhibitor: @escaping @Sendable () -> Bool = { true }) -> BusLockWatcher {
        let config = LockWatcherConfiguration(systemBusAddress: systemAddress ?? systemBus.address,
                                              sessionBusAddress: sessionBus.address,
                                              sessionPath: sessionPath, takeSleepInhibitor: inhibitor,
                                              environment: environment)
        let rec = recorder
        let w = BusLockWatcher(configuration: config, onLock: { rec.record($0) }, log: { rec.log($0) },
                               wantsSleepInhibitor: wantsSleepInhibitor)
        w.start()
        watcher = w
        return w
    }

    /// Emits with dbus-send and returns the latency (ms) from just before the spawn to the callback.
    private func expect(_ reason: LockReason, afterSending send: () throws -> Void,
                        file: StaticString = #filePath, line: UInt = #line) rethrows {
        let t0 = DispatchTime.now()
        try send()
        guard let hit = recorder.wait(for: reason) else {
            XCTFail("no \(reason) within 2 s; got \(recorder.reasons), log \(recorder.logLines)", file: file, line: line)
            return
        }
        print("latency \(reason): \(String(format: "%.2f", milliseconds(from: t0, to: hit))) ms (dbus-send spawn included)")
    }

    private func expectFromFake(_ signal: FakeLogind.Signal, _ reason: LockReason,
                                file: StaticString = #filePath, line: UInt = #line) {
        fake!.emit(signal)
        guard let hit = recorder.wait(for: reason) else {
            XCTFail("no \(reason) within 2 s; got \(recorder.reasons), log \(recorder.logLines)", file: file, line: line)
            return
        }
        if let sent = fake!.lastEmitTime {
            print("latency \(reason): \(String(format: "%.3f", milliseconds(from: sent, to: hit))) ms (fake logind emit -> callback)")
        }
    }

    // MARK: - logind Session.Lock

    func testSessionLockFromXDGSessionIDAndUnlockIgnored() throws {
        let w = startWatcher()
        XCTAssertEqual(w.resolvedSessionPath, Self.path1)
        // Unlock must never produce an event; the Lock after it is the sentinel (same order on the bus).
        try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: Self.path1,
                     member: "org.freedesktop.login1.Session.Unlock")
        try expect(.sessionLock) {
            try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: Self.path1,
                         member: "org.freedesktop.login1.Session.Lock")
        }
        XCTAssertEqual(recorder.reasons, [.sessionLock])
    }

    func testLockForAnotherSessionOrFromAnonymousSenderIsIgnored() throws {
        startWatcher()
        try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: "/org/freedesktop/login1/session/_32",
                     member: "org.freedesktop.login1.Session.Lock")
        try dbusSend(bus: systemBus.address, sender: nil, path: Self.path1, member: "org.freedesktop.login1.Session.Lock")
        try expect(.sessionLock) {
            try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: Self.path1,
                         member: "org.freedesktop.login1.Session.Lock")
        }
        XCTAssertEqual(recorder.reasons, [.sessionLock])
    }

    func testRepeatedLockIsDeliveredEachTimeWithoutCrashing() throws {
        try startFake()
        startWatcher()
        fake!.emit(.lock)
        fake!.emit(.lock)
        let deadline = Date().addingTimeInterval(2)
        while recorder.reasons.count < 2 && Date() < deadline { usleep(2_000) }
        XCTAssertEqual(recorder.reasons, [.sessionLock, .sessionLock])
    }

    // MARK: - LockedHint

    func testLockedHintTrueLocksAndFalseDoesNot() throws {
        let f = try startFake()
        startWatcher()
        XCTAssertTrue(f.methodCalls.contains("Get(LockedHint)"), "initial LockedHint not read: \(f.methodCalls)")
        f.emit(.lockedHint(false))
        f.emit(.lock)   // sentinel: arrives after the LockedHint=false signal
        XCTAssertNotNil(recorder.wait(for: .sessionLock))
        XCTAssertEqual(recorder.reasons, [.sessionLock], "LockedHint=false must not lock")
        expectFromFake(.lockedHint(true), .lockedHint)
    }

    func testInitialLockedHintTrueLocksAtStart() throws {
        try startFake(lockedHint: true)
        startWatcher()
        XCTAssertNotNil(recorder.wait(for: .lockedHint), "got \(recorder.reasons)")
    }

    // MARK: - Manager signals

    func testPrepareForSleepTakesAndReleasesTheInhibitor() throws {
        let f = try startFake()
        let w = startWatcher(inhibitor: true)
        XCTAssertEqual(f.methodCalls.filter { $0.hasPrefix("Inhibit(") },
                       ["Inhibit(sleep,photovault,forget vault keys before sleep,delay)"])
        XCTAssertTrue(w.holdsSleepInhibitor)

        expectFromFake(.prepareForSleep(true), .prepareForSleep)
        let sent = f.lastEmitTime!
        XCTAssertEqual(f.inhibitorsReleased, 0, "released before the owner evicted keys")
        w.releaseSleepInhibitor()       // what the owner does after evicting keys
        XCTAssertFalse(w.holdsSleepInhibitor)
        XCTAssertTrue(waitUntil { f.inhibitorsReleased == 1 }, "fake logind never saw the fd close")
        print("inhibitor released \(String(format: "%.2f", milliseconds(from: sent, to: .now()))) ms after PrepareForSleep(true) (upper bound, polled)")

        // Resume: a new inhibitor is taken, exactly one.
        f.emit(.prepareForSleep(false))
        XCTAssertTrue(waitUntil { w.holdsSleepInhibitor }, "no inhibitor after resume")
        XCTAssertEqual(f.methodCalls.filter { $0.hasPrefix("Inhibit(") }.count, 2)
        f.emit(.prepareForSleep(false))   // a second resume must not take a second one
        f.emit(.lock)
        XCTAssertNotNil(recorder.wait(for: .sessionLock))
        XCTAssertEqual(f.methodCalls.filter { $0.hasPrefix("Inhibit(") }.count, 2)
        XCTAssertEqual(recorder.reasons, [.prepareForSleep, .sessionLock])
    }

    func testPrepareForSleepFromDbusSend() throws {
        startWatcher()
        try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                     member: "org.freedesktop.login1.Manager.PrepareForSleep", arguments: ["boolean:false"])
        try expect(.prepareForSleep) {
            try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                         member: "org.freedesktop.login1.Manager.PrepareForSleep", arguments: ["boolean:true"])
        }
        XCTAssertEqual(recorder.reasons, [.prepareForSleep])
    }

    func testShutdownAndSessionRemoved() throws {
        try startFake()
        startWatcher()
        fake!.emit(.prepareForShutdown(false))
        fake!.emit(.sessionRemoved(id: "2", path: "/org/freedesktop/login1/session/_32"))   // not ours
        expectFromFake(.sessionRemoved(id: "1", path: Self.path1), .shutdown)
        XCTAssertEqual(recorder.reasons, [.shutdown])
        recorder.clear()
        expectFromFake(.prepareForShutdown(true), .shutdown)
        XCTAssertEqual(recorder.reasons, [.shutdown])
    }

    // MARK: - Screen savers (session bus)

    func testScreenSaverActiveChangedOnAllNames() throws {
        startWatcher()
        for name in ["org.freedesktop.ScreenSaver", "org.gnome.ScreenSaver", "org.xfce.ScreenSaver"] {
            let path = "/" + name.split(separator: ".").joined(separator: "/")
            try dbusSend(bus: sessionBus.address, sender: name, path: path, member: "\(name).ActiveChanged",
                         arguments: ["boolean:false"])
            try expect(.screenSaver(name)) {
                try dbusSend(bus: sessionBus.address, sender: name, path: path, member: "\(name).ActiveChanged",
                             arguments: ["boolean:true"])
            }
        }
        // KDE also emits the freedesktop interface on /ScreenSaver.
        recorder.clear()
        try expect(.screenSaver("org.freedesktop.ScreenSaver")) {
            try dbusSend(bus: sessionBus.address, sender: "org.freedesktop.ScreenSaver", path: "/ScreenSaver",
                         member: "org.freedesktop.ScreenSaver.ActiveChanged", arguments: ["boolean:true"])
        }
        XCTAssertEqual(recorder.reasons, [.screenSaver("org.freedesktop.ScreenSaver")],
                       "ActiveChanged(false) must never lock")
    }

    // MARK: - Bus loss and missing buses

    /// A screen that locked before the watcher was up (while `photovault mount` derived the
    /// key, or the daemon mounted) sent its ActiveChanged to nobody: the watcher asks each
    /// screen saver's GetActive once its matches are in, and an active one locks at start.
    /// An inactive one does not; names nobody owns are not started and cost no log line.
    func testAScreenSaverAlreadyActiveAtStartLocks() throws {
        for (name, active) in [("org.gnome.ScreenSaver", true), ("org.freedesktop.ScreenSaver", false),
                               ("org.xfce.ScreenSaver", true)] {
            let saver = FakeLogind(address: sessionBus.address, sessionPath: Self.path1, name: name, screenSaverActive: active)
            try saver.start()
            defer { saver.stop() }
            recorder.clear()
            let w = startWatcher()
            defer { w.stop() }
            XCTAssertEqual(saver.methodCalls, ["GetActive(/" + name.split(separator: ".").joined(separator: "/") + ")"])
            // start() returns after install: the lock, if any, has been delivered.
            XCTAssertEqual(recorder.reasons, active ? [.screenSaver(name)] : [], name)
            XCTAssertEqual(recorder.logLines.filter { $0.contains("ScreenSaver") }, [], "\(recorder.logLines)")
        }
    }

    func testSessionBusLossReportsBusLost() throws {
        startWatcher()
        let t0 = DispatchTime.now()
        sessionBus.stop()
        let deadline = Date().addingTimeInterval(2)
        var lost: LockReason?
        while lost == nil && Date() < deadline {
            lost = recorder.reasons.first { if case .busLost = $0 { return true } else { return false } }
            usleep(2_000)
        }
        guard case .busLost(let what)? = lost else { return XCTFail("no busLost; got \(recorder.reasons)") }
        XCTAssertTrue(what.hasPrefix("session"), what)
        print("latency busLost: \(String(format: "%.2f", milliseconds(from: t0, to: .now()))) ms (kill dbus-daemon -> callback, polled)")
    }

    /// After the bus drops (busLost locks the vault), the watcher reconnects to the bus when it
    /// is back, so a mount kept with `--on-lock stay` and unlocked still sees the next lock.
    func testLostBusesAreReconnectedAndWatchedAgain() throws {
        try startFake()
        startWatcher(inhibitor: true)
        XCTAssertTrue(waitUntil { self.watcher?.holdsSleepInhibitor == true })
        fake?.stop()
        fake = nil
        sessionBus.kill()
        systemBus.kill()
        XCTAssertTrue(waitUntil(timeout: 5) { self.recorder.reasons.filter { if case .busLost = $0 { return true }; return false }.count == 2 },
                      "\(recorder.reasons)")
        XCTAssertTrue(waitUntil { self.watcher?.holdsSleepInhibitor == false }, "the lost logind's inhibitor is still held")
        try sessionBus.restart()
        try systemBus.restart()
        try startFake()
        XCTAssertTrue(waitUntil(timeout: 10) { self.recorder.logLines.filter { $0.hasPrefix("reconnected to the") }.count == 2 },
                      "\(recorder.logLines)")
        recorder.clear()
        try expect(.screenSaver("org.gnome.ScreenSaver")) {
            try dbusSend(bus: sessionBus.address, sender: "org.gnome.ScreenSaver", path: "/org/gnome/ScreenSaver",
                         member: "org.gnome.ScreenSaver.ActiveChanged", arguments: ["boolean:true"])
        }
        expectFromFake(.lock, .sessionLock)
        XCTAssertTrue(waitUntil { self.watcher?.holdsSleepInhibitor == true }, "no inhibitor from the new logind")
    }

    // MARK: - logind coming later, or again

    private var inhibitCalls: Int { fake?.methodCalls.filter { $0.hasPrefix("Inhibit(") }.count ?? 0 }

    /// A mount started before logind (early at boot) had no sleep inhibitor and no session
    /// for ever: a suspend locked it only when PrepareForSleep came, with nothing to make
    /// logind wait for the keys to go. Now the logind that appears is asked for both.
    func testALogindThatComesLaterGivesTheInhibitorAndTheSession() throws {
        let w = startWatcher(environment: [:], inhibitor: true)
        XCTAssertNil(w.resolvedSessionPath)
        XCTAssertFalse(w.holdsSleepInhibitor)
        let f = try startFake()
        XCTAssertTrue(waitUntil { w.holdsSleepInhibitor }, "no inhibitor from the logind that came later: \(f.methodCalls), \(recorder.logLines)")
        XCTAssertEqual(w.resolvedSessionPath, Self.path1)
        XCTAssertEqual(f.methodCalls.first, "GetSessionByPID(\(getpid()))")
        XCTAssertTrue(f.methodCalls.contains("Get(LockedHint)"), "\(f.methodCalls)")
        XCTAssertEqual(inhibitCalls, 1)
        // Our session's LockedHint is watched now; another session's Lock no longer locks.
        f.emit(.lockSession("/org/freedesktop/login1/session/_32"))
        expectFromFake(.lockedHint(true), .lockedHint)
        expectFromFake(.lock, .sessionLock)
        XCTAssertEqual(recorder.reasons, [.lockedHint, .sessionLock], "exactly once each, none for the other session")
        expectFromFake(.prepareForSleep(true), .prepareForSleep)
        w.releaseSleepInhibitor()
        XCTAssertTrue(waitUntil { f.inhibitorsReleased == 1 })
    }

    /// A restarted logind (its inhibitor fd died with it) gives a new inhibitor; the session,
    /// known already, is not looked up again. The old one is dropped when logind leaves.
    func testARestartedLogindGivesANewInhibitor() throws {
        let first = try startFake()
        let w = startWatcher(environment: [:], inhibitor: true)
        XCTAssertTrue(w.holdsSleepInhibitor)
        first.stop()
        fake = nil
        XCTAssertTrue(waitUntil { !w.holdsSleepInhibitor }, "the inhibitor of the logind that left is still held")
        let second = try startFake()
        XCTAssertTrue(waitUntil { w.holdsSleepInhibitor }, "no inhibitor from the restarted logind: \(second.methodCalls), \(recorder.logLines)")
        XCTAssertEqual(inhibitCalls, 1)
        XCTAssertFalse(second.methodCalls.contains { $0.hasPrefix("GetSession") }, "\(second.methodCalls)")
        XCTAssertEqual(w.resolvedSessionPath, Self.path1)
        expectFromFake(.prepareForSleep(true), .prepareForSleep)
        w.releaseSleepInhibitor()
        XCTAssertTrue(waitUntil { second.inhibitorsReleased == 1 })
        XCTAssertEqual(recorder.reasons, [.prepareForSleep])
    }

    /// While the owner wants no inhibitor (its vault is locked) none is taken, neither from a
    /// logind that appears nor on resume; `takeSleepInhibitor()` takes it once it is wanted.
    func testNoInhibitorWhileNotWantedUntilAskedAgain() throws {
        let wanted = LockedFlag()
        let w = startWatcher(environment: [:], inhibitor: true, wantsSleepInhibitor: { wanted.value })
        let f = try startFake()
        expectFromFake(.lock, .sessionLock)   // sent after logind appeared: that has been handled
        XCTAssertEqual(w.resolvedSessionPath, Self.path1, "the session is looked up all the same")
        f.emit(.prepareForSleep(false))
        f.emit(.lockSession(Self.path1))
        XCTAssertTrue(waitUntil { self.recorder.reasons.count == 2 }, "\(recorder.reasons)")
        XCTAssertEqual(inhibitCalls, 0, "\(f.methodCalls)")
        XCTAssertFalse(w.holdsSleepInhibitor)
        wanted.value = true
        w.takeSleepInhibitor()
        XCTAssertTrue(waitUntil { w.holdsSleepInhibitor }, "\(f.methodCalls), \(recorder.logLines)")
        w.takeSleepInhibitor()   // one is held: no second
        recorder.clear()
        expectFromFake(.lockSession(Self.path1), .sessionLock)
        XCTAssertEqual(inhibitCalls, 1, "\(f.methodCalls)")
    }

    func testMissingSystemBusIsOneLogLineAndSessionBusStillWorks() throws {
        let w = startWatcher(systemAddress: "unix:path=\(systemBus.directory)/missing.sock")
        XCTAssertNil(w.resolvedSessionPath)
        let systemLines = recorder.logLines.filter { $0.contains("system bus") }
        XCTAssertEqual(systemLines.count, 1, "\(recorder.logLines)")
        XCTAssertEqual(recorder.logLines.count, 1, "\(recorder.logLines)")
        try expect(.screenSaver("org.gnome.ScreenSaver")) {
            try dbusSend(bus: sessionBus.address, sender: "org.gnome.ScreenSaver", path: "/org/gnome/ScreenSaver",
                         member: "org.gnome.ScreenSaver.ActiveChanged", arguments: ["boolean:true"])
        }
    }

    func testStopThenRestartIsClean() throws {
        let w = startWatcher()
        w.stop()
        w.stop()
        w.start()
        try expect(.sessionLock) {
            try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1", path: Self.path1,
                         member: "org.freedesktop.login1.Session.Lock")
        }
    }

    // MARK: - Session discovery

    func testSessionPathFromEnvironmentOverrides() {
        let w = startWatcher(environment: ["PHOTOVAULT_SESSION_PATH": "/org/freedesktop/login1/session/c9",
                                           "XDG_SESSION_ID": "1"])
        XCTAssertEqual(w.resolvedSessionPath, "/org/freedesktop/login1/session/c9")
        w.stop()
        let explicit = startWatcher(sessionPath: "/org/freedesktop/login1/session/_37", environment: ["XDG_SESSION_ID": "1"])
        XCTAssertEqual(explicit.resolvedSessionPath, "/org/freedesktop/login1/session/_37")
    }

    func testSessionPathFromXDGSessionIDIsEscaped() {
        let w = startWatcher(environment: ["XDG_SESSION_ID": "c2"])
        XCTAssertEqual(w.resolvedSessionPath, "/org/freedesktop/login1/session/c2")
    }

    func testSessionDiscoveryThroughGetSessionByPID() throws {
        let path = "/org/freedesktop/login1/session/c7"
        let f = try startFake(sessionPath: path)
        let w = startWatcher(environment: [:])
        XCTAssertEqual(w.resolvedSessionPath, path)
        XCTAssertEqual(f.methodCalls.first, "GetSessionByPID(\(getpid()))")
        expectFromFake(.lock, .sessionLock)
    }

    func testSessionDiscoveryFallsBackToGetSessionAuto() throws {
        let path = "/org/freedesktop/login1/session/_35"
        let f = try startFake(sessionPath: path, answerGetSessionByPID: false)
        let w = startWatcher(environment: [:])
        XCTAssertEqual(w.resolvedSessionPath, path)
        XCTAssertEqual(Array(f.methodCalls.prefix(2)), ["GetSessionByPID(\(getpid()))", "GetSession(auto)"])
        expectFromFake(.lockedHint(true), .lockedHint)
    }

    func testWithoutLogindAnySessionLockLocks() throws {
        let w = startWatcher(environment: [:])
        XCTAssertNil(w.resolvedSessionPath)
        XCTAssertEqual(recorder.logLines.filter { $0.contains("logind is not running") }.count, 1, "\(recorder.logLines)")
        try expect(.sessionLock) {
            try dbusSend(bus: systemBus.address, sender: "org.freedesktop.login1",
                         path: "/org/freedesktop/login1/session/_34", member: "org.freedesktop.login1.Session.Lock")
        }
    }
}

final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false
    var value: Bool {
        get { lock.withLock { flag } }
        set { lock.withLock { flag = newValue } }
    }
}

func waitUntil(timeout: Double = 2.0, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    repeat {
        if condition() { return true }
        usleep(2_000)
    } while Date() < deadline
    return condition()
}
