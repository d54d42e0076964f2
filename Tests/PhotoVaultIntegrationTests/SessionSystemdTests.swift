import Foundation
import XCTest

/// systemd (issue 37): `photovault mount -f` speaks sd_notify(3) to a real NOTIFY_SOCKET, and
/// the user unit shipped in scripts/ passes `systemd-analyze verify`.
final class SessionSystemdTests: XCTestCase {
    static let repoRoot = URL(fileURLWithPath: #filePath).resolvingSymlinksInPath()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A datagram socket bound where NOTIFY_SOCKET points, as the service manager's is.
    final class NotifySocket {
        let path: String
        let fd: Int32
        init(path: String) {
            self.path = path
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            _ = withUnsafeMutableBytes(of: &addr.sun_path) { buf in
                path.utf8CString.withUnsafeBytes { buf.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(buf.count))) }
            }
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            precondition(fd >= 0 && rc == 0, "bind \(path): \(errno)")
        }
        /// The next datagram, or nil after `seconds` without one.
        func receive(within seconds: Double) -> String? {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, Int32(seconds * 1000)) == 1 else { return nil }
            var buf = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &buf, buf.count, 0)
            return n < 0 ? nil : String(decoding: buf[0..<n], as: UTF8.self)
        }
        deinit { close(fd); unlink(path) }
    }

    func testMountForegroundSaysReadyOnlyOnceTheMountIsLiveAndStoppingOnSIGTERM() throws {
        let s = Sandbox("pv-session-notify")
        s.initStore()
        XCTAssertEqual(s.pv(["import", "--store", s.store, "--user", "alice", "--passfile", s.passfile,
                             "-", "/note.txt"], stdin: "in the vault").status, 0)
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let notify = NotifySocket(path: s.root + "/notify")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Harness.binary)
        p.arguments = ["mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus", "-f",
                       "--on-lock", "stay"]
        p.environment = ProcessInfo.processInfo.environment.merging(s.env) { _, b in b }
            .merging(["NOTIFY_SOCKET": notify.path]) { _, b in b }
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        s.mounts.append(mp)
        defer { if p.isRunning { p.terminate() } }

        // Everything sent up to READY=1; at that moment the mount must be in the mount table
        // and serve a read (a unit ordered after this one may use it at once).
        var before: [String] = []
        var ready: String? = nil
        let deadline = Date().addingTimeInterval(30)
        while ready == nil, Date() < deadline, let m = notify.receive(within: deadline.timeIntervalSinceNow) {
            if m.split(separator: "\n").contains("READY=1") { ready = m } else { before.append(m) }
        }
        let liveAtReady = Harness.isMounted(mp)
        let read = try? String(contentsOfFile: mp + "/note.txt", encoding: .utf8)
        let readyMessage = try XCTUnwrap(ready, "no READY=1 within 30 s (before: \(before))")
        XCTAssertTrue(liveAtReady, "READY=1 came before the mount was in the mount table")
        XCTAssertEqual(read, "in the vault")
        XCTAssertTrue(readyMessage.split(separator: "\n").contains("STATUS=Mounted the vault at \(mp), unlocked"), readyMessage)
        XCTAssertFalse(before.contains { $0.contains("READY=1") })

        // The lock state follows in STATUS= lines (the mount stays: --on-lock stay).
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(notify.receive(within: 10), "STATUS=Mounted the vault at \(mp), locked: files of class complete "
                       + "are unreadable until 'photovault unlock'")
        XCTAssertEqual(s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile]).status, 0)
        XCTAssertEqual(notify.receive(within: 10), "STATUS=Mounted the vault at \(mp), unlocked")

        // STOPPING=1, after any STATUS= line the lock that SIGTERM is makes first.
        kill(p.processIdentifier, SIGTERM)
        var received: [String] = []
        let stopBy = Date().addingTimeInterval(10)
        while Date() < stopBy, let m = notify.receive(within: stopBy.timeIntervalSinceNow) {
            received.append(m)
            if m.split(separator: "\n").contains("STOPPING=1") { break }
        }
        XCTAssertTrue(received.last?.split(separator: "\n").contains("STOPPING=1") == true, "\(received)")
        XCTAssertTrue(Harness.waitUntil(10) { !p.isRunning })
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertFalse(Harness.isMounted(mp))
    }

    /// The unit as installed, with the built binary in place of /usr/local/bin/photovault (verify
    /// checks that ExecStart's program exists) and the man page its Documentation= names on MANPATH.
    func testTheUserUnitPassesSystemdAnalyzeVerify() throws {
        let s = Sandbox("pv-session-unit")
        let unit = try String(contentsOf: Self.repoRoot.appendingPathComponent("scripts/photovault.service"), encoding: .utf8)
        XCTAssertTrue(unit.contains("ExecStart=/usr/local/bin/photovault mount -f "), "the unit runs the installed program")
        XCTAssertTrue(unit.contains("Type=notify"))
        let dir = s.root + "/units"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try unit.replacingOccurrences(of: "/usr/local/bin/photovault", with: Harness.binary)
            .write(toFile: dir + "/photovault.service", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: s.root + "/man/man1", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Self.repoRoot.appendingPathComponent("docs/photovault.1").path,
                                         toPath: s.root + "/man/man1/photovault.1")
        let r = Harness.run(["systemd-analyze", "--user", "verify", dir + "/photovault.service"],
                            env: ["XDG_RUNTIME_DIR": s.root, "MANPATH": s.root + "/man"], timeout: 60)
        // verify exits 0 after some complaints (an unknown Type=, a bad line): it must say nothing.
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr + r.stdout, "")
    }
}
