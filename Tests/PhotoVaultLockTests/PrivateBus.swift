import Foundation
import Glibc
import PhotoVaultLock
import XCTest

/// A private dbus-daemon for one test: permissive policy, unix socket in a temp dir, no service
/// activation (calls to a missing name fail fast with ServiceUnknown). Killed in `stop()`.
final class PrivateBus {
    let directory: String
    let address: String

    static let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <keep_umask/>
          <listen>unix:tmpdir=/tmp</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow user="*"/>
            <allow own="*"/>
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
          </policy>
        </busconfig>
        """

    private let configPath: String
    private var process = Process()

    init(name: String) throws {
        directory = try makeTemporaryDirectory(prefix: "pvbus-\(name)")
        address = "unix:path=" + directory + "/bus.sock"
        configPath = directory + "/bus.conf"
        try Self.config.write(toFile: configPath, atomically: true, encoding: .utf8)
        do { try launch() } catch { stop(); throw error }
    }

    /// Starts dbus-daemon at `address` and returns once the socket accepts connections (at most 5 s).
    private func launch() throws {
        let socket = directory + "/bus.sock"
        unlink(socket)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(configPath)", "--address=\(address)", "--nofork", "--nosyslog"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice   // it warns about fd limits when not root-capable
        try process.run()
        for _ in 0..<500 {
            if canConnect(socket) { return }
            usleep(10_000)
        }
        throw TestSetupError.busDidNotStart(directory)
    }

    var isRunning: Bool { process.isRunning }

    /// Kills the daemon (clients see the connection drop) and keeps the directory for `restart`.
    func kill() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    /// A new daemon at the same address, as after `systemctl restart dbus`.
    func restart() throws {
        kill()
        try launch()
    }

    func stop() {
        kill()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

enum TestSetupError: Error {
    case busDidNotStart(String)
    case fakeLogindFailed(String)
    case commandFailed(String)
}

func makeTemporaryDirectory(prefix: String) throws -> String {
    var template = Array("/tmp/\(prefix).XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw TestSetupError.commandFailed("mkdtemp") }
    return String(cString: made)
}

private func canConnect(_ path: String) -> Bool {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    return withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
        }
    }
}

/// Runs a command to completion; returns (status, stdout + stderr).
@discardableResult
func runCommand(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// Emits a signal with dbus-send. `sender` makes dbus-send claim that well-known name first, so
/// listeners with a strict sender='…' match receive it (anonymous emitters never match).
func dbusSend(bus: String, sender: String?, path: String, member: String, arguments: [String] = [],
              file: StaticString = #filePath, line: UInt = #line) throws {
    var args = ["--bus=\(bus)", "--type=signal"]
    if let sender { args.append("--sender=\(sender)") }
    args += [path, member] + arguments
    let (status, output) = try runCommand("/usr/bin/dbus-send", args)
    XCTAssertEqual(status, 0, "dbus-send failed: \(output)", file: file, line: line)
}

/// Thread-safe collector of lock events and log lines, with polling waits (never asserts on time).
final class EventRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [(LockReason, DispatchTime)] = []
    private var logs: [String] = []

    func record(_ reason: LockReason) { lock.withLock { events.append((reason, .now())) } }
    func log(_ line: String) { lock.withLock { logs.append(line) } }

    var reasons: [LockReason] { lock.withLock { events.map { $0.0 } } }
    var logLines: [String] { lock.withLock { logs } }

    /// Waits up to `timeout` for `reason`; returns when it was recorded, or nil.
    func wait(for reason: LockReason, timeout: Double = 2.0) -> DispatchTime? {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            if let hit = lock.withLock({ events.first(where: { $0.0 == reason })?.1 }) { return hit }
            usleep(2_000)
        } while Date() < deadline
        return nil
    }

    func clear() { lock.withLock { events.removeAll() } }
}

func milliseconds(from start: DispatchTime, to end: DispatchTime) -> Double {
    Double(end.uptimeNanoseconds &- start.uptimeNanoseconds) / 1e6
}
