import Foundation
import Glibc
@testable import PhotoVaultLock
import XCTest

final class ControlSocketTests: XCTestCase {
    private var directory: String!
    private var socketPath: String { directory + "/run/control.sock" }

    override func setUpWithError() throws {
        directory = try makeTemporaryDirectory(prefix: "pvctl")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Records what the handler saw, including the payload object, to check it is wiped later.
    private final class Seen: @unchecked Sendable {
        let lock = NSLock()
        var commands: [String] = []
        var payloadCopies: [[UInt8]] = []
        var payloads: [ControlPayload] = []
    }

    func testRoundTripWithPayloadWhichIsWipedAfterUse() throws {
        let seen = Seen()
        let logs = EventRecorder()
        let server = ControlSocketServer(path: socketPath, allowedUID: geteuid(), handler: { request in
            let bytes = request.payload.withUnsafeBytes { Array($0) }
            seen.lock.withLock {
                seen.commands.append(request.command)
                seen.payloadCopies.append(bytes)
                seen.payloads.append(request.payload)
            }
            return request.command == "unlock" ? .success("unlocked with \(bytes.count) bytes") : .failure("unknown command")
        }, log: { logs.log($0) })
        try server.start()
        defer { server.stop() }

        // Socket 0600 in a 0700 directory we created.
        var st = stat()
        XCTAssertEqual(stat(socketPath, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertEqual(stat(directory + "/run", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o700)

        let secret: [UInt8] = Array("correct horse battery staple".utf8) + [0, 255, 1]
        let payload = secret.withUnsafeBytes { ControlPayload(copying: $0) }
        let reply = try ControlClient.send(path: socketPath, request: ControlRequest(command: "unlock", payload: payload), timeout: 2)
        XCTAssertEqual(reply, .success("unlocked with \(secret.count) bytes"))
        let other = try ControlClient.send(path: socketPath, request: ControlRequest(command: "bogus"), timeout: 2)
        XCTAssertEqual(other, .failure("unknown command"))

        seen.lock.withLock {
            XCTAssertEqual(seen.commands, ["unlock", "bogus"])
            XCTAssertEqual(seen.payloadCopies, [secret, []])
            XCTAssertEqual(seen.payloads.count, 2)
            XCTAssertTrue(seen.payloads[0].isZeroed, "server did not wipe the payload after the handler")
            XCTAssertEqual(seen.payloads[0].count, secret.count)
        }
        XCTAssertTrue(logs.logLines.isEmpty, "\(logs.logLines)")
        payload.wipe()
        XCTAssertTrue(payload.isZeroed)
    }

    func testPeerWithAnotherUIDIsRefused() throws {
        let logs = EventRecorder()
        let called = EventRecorder()
        // Pretend only some other uid may connect: our own connection must then be refused.
        let other = geteuid() &+ 4242
        let server = ControlSocketServer(path: socketPath, allowedUID: other, handler: { _ in
            called.record(.controlSocket)
            return .success()
        }, log: { logs.log($0) })
        try server.start()
        defer { server.stop() }
        let reply = try ControlClient.send(path: socketPath, request: ControlRequest(command: "lock"), timeout: 2)
        XCTAssertEqual(reply, .failure("permission denied"))
        XCTAssertTrue(called.reasons.isEmpty, "handler ran for a refused peer")
        XCTAssertTrue(waitUntil { logs.logLines.count == 1 })
        XCTAssertTrue(logs.logLines.first?.contains("refused a connection from uid \(geteuid())") == true, "\(logs.logLines)")
        // The server keeps serving after a refusal.
        XCTAssertEqual(try ControlClient.send(path: socketPath, request: ControlRequest(command: "lock"), timeout: 2),
                       .failure("permission denied"))
    }

    /// A real other uid (nobody, via setpriv) speaking the protocol from python3.
    func testRealOtherUserIsRefusedBySocketPermissionsAndByPeerCredentials() throws {
        guard geteuid() == 0 else {
            return XCTFail("needs root to run the client as nobody; the suite runs as root (scripts/test.sh, CI), as its mount tests do")
        }
        let called = EventRecorder()
        let logs = EventRecorder()
        let server = ControlSocketServer(path: socketPath, allowedUID: geteuid(), handler: { _ in
            called.record(.controlSocket)
            return .success()
        }, log: { logs.log($0) })
        try server.start()
        defer { server.stop() }
        XCTAssertEqual(chmod(directory, 0o755), 0)   // let nobody reach the run dir (as in /run/user/UID)

        // 1. With the default 0700 dir / 0600 socket nobody cannot even connect.
        XCTAssertEqual(try clientAsNobody(command: "lock"), "connect-error 13")

        // 2. Open the file-system fences: the SO_PEERCRED check must still refuse nobody.
        XCTAssertEqual(chmod(directory + "/run", 0o755), 0)
        XCTAssertEqual(chmod(socketPath, 0o666), 0)
        XCTAssertEqual(try clientAsNobody(command: "lock"), "reply 1 permission denied")
        XCTAssertTrue(called.reasons.isEmpty)
        XCTAssertTrue(waitUntil { logs.logLines.contains { $0.contains("uid 65534") } }, "\(logs.logLines)")
    }

    /// The other direction: a socket planted by another user (nobody, via setpriv) where the
    /// client expects its daemon. The client must refuse before sending a byte, so an unlock
    /// key never reaches that process and it cannot answer "locked".
    func testClientRefusesAServerOfAnotherUserBeforeSendingAnything() throws {
        guard geteuid() == 0 else {
            return XCTFail("needs root to run the planted server as nobody; the suite runs as root (scripts/test.sh, CI), as its mount tests do")
        }
        let planted = directory + "/planted"
        XCTAssertEqual(mkdir(planted, 0o777), 0)
        XCTAssertEqual(chmod(planted, 0o777), 0)
        XCTAssertEqual(chmod(directory, 0o755), 0)
        let path = planted + "/control.sock", received = planted + "/received"
        let script = """
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(1)
            open(sys.argv[2] + ".ready", "w").close()
            c, _ = s.accept(); c.settimeout(5)
            got = b""
            try:
                while True:
                    b = c.recv(4096)
                    if not b: break
                    got += b
            except socket.timeout:
                pass
            open(sys.argv[2], "w").write(str(len(got)))
            """
        let scriptPath = directory + "/planted.py"
        try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        chmod(scriptPath, 0o644)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        server.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", scriptPath, path, received]
        try server.run()
        defer { if server.isRunning { server.terminate() }; server.waitUntilExit() }
        XCTAssertTrue(waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: received + ".ready") })

        let secret: [UInt8] = Array("master-key-bytes-must-not-leave".utf8)
        let payload = secret.withUnsafeBytes { ControlPayload(copying: $0) }
        defer { payload.wipe() }
        XCTAssertThrowsError(try ControlClient.send(path: path, request: ControlRequest(command: "unlock", payload: payload), timeout: 2)) {
            XCTAssertEqual($0 as? LockError, .untrustedPeer(path: path, uid: 65534))
        }
        XCTAssertTrue(waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: received) }, "the planted server did not finish")
        XCTAssertEqual(try String(contentsOfFile: received, encoding: .utf8), "0", "the client sent bytes to another user's socket")
    }

    private func clientAsNobody(command: String) throws -> String {
        let script = """
            import socket, struct, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sys.argv[1])
            except OSError as e:
                print("connect-error", e.errno); sys.exit(0)
            cmd = sys.argv[2].encode()
            body = bytes([len(cmd)]) + cmd
            s.sendall(struct.pack(">I", len(body)) + body)
            def exact(n):
                b = b""
                while len(b) < n:
                    c = s.recv(n - len(b))
                    if not c: raise SystemExit("short read")
                    b += c
                return b
            n = struct.unpack(">I", exact(4))[0]
            r = exact(n)
            print("reply", r[0], r[1:].decode())
            """
        let scriptPath = directory + "/client.py"
        try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        chmod(scriptPath, 0o644)
        let (status, output) = try runCommand("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                            "/usr/bin/python3", scriptPath, socketPath, command])
        XCTAssertEqual(status, 0, output)
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testInsecureDirectoryIsRejected() throws {
        let dir = directory + "/open"
        XCTAssertEqual(mkdir(dir, 0o755), 0)
        XCTAssertEqual(chmod(dir, 0o755), 0)
        let server = ControlSocketServer(path: dir + "/control.sock", handler: { _ in .success() })
        XCTAssertThrowsError(try server.start()) { error in
            XCTAssertEqual(error as? LockError, .insecureDirectory(dir))
        }
    }

    func testSecondServerIsRejectedAndStaleSocketIsReplaced() throws {
        let first = ControlSocketServer(path: socketPath, handler: { _ in .success("first") })
        try first.start()
        let second = ControlSocketServer(path: socketPath, handler: { _ in .success("second") })
        XCTAssertThrowsError(try second.start()) { error in
            XCTAssertEqual(error as? LockError, .socketInUse(socketPath))
        }
        XCTAssertEqual(try ControlClient.send(path: socketPath, request: ControlRequest(command: "status"), timeout: 2),
                       .success("first"))
        first.stop()

        // A leftover socket file nobody listens on (crashed daemon) is replaced.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = try UnixSocketIO.address(for: socketPath)
        XCTAssertEqual(UnixSocketIO.withSockaddr(&addr) { bind(stale, $0, $1) }, 0)
        close(stale)
        try second.start()
        defer { second.stop() }
        XCTAssertEqual(try ControlClient.send(path: socketPath, request: ControlRequest(command: "status"), timeout: 2),
                       .success("second"))
    }

    /// A failure carries the exit status the daemon gives it (30: an unlock whose keys found
    /// no locked memory), 1 by default; a success is status 0 whatever was asked.
    func testAFailureReplyCarriesItsExitStatus() throws {
        let server = ControlSocketServer(path: socketPath, handler: { request in
            switch request.command {
            case "memory": return .failure("no locked memory", status: 30)
            case "plain": return .failure("plain failure")
            default: return ControlReply(ok: true, message: "fine", status: 30)
            }
        })
        try server.start()
        defer { server.stop() }
        let memory = try ControlClient.send(path: socketPath, request: ControlRequest(command: "memory"), timeout: 2)
        XCTAssertEqual(memory, ControlReply(ok: false, message: "no locked memory", status: 30))
        XCTAssertEqual(memory.status, 30)
        let plain = try ControlClient.send(path: socketPath, request: ControlRequest(command: "plain"), timeout: 2)
        XCTAssertFalse(plain.ok)
        XCTAssertEqual(plain.status, 1)
        XCTAssertEqual(try ControlClient.send(path: socketPath, request: ControlRequest(command: "status"), timeout: 2),
                       .success("fine"))
        XCTAssertEqual(ControlReply.failure("zero is success", status: 0).status, 1)
    }

    func testClientErrorsWhenNoServer() {
        XCTAssertThrowsError(try ControlClient.send(path: directory + "/none.sock", request: ControlRequest(command: "lock"), timeout: 1)) { error in
            XCTAssertEqual(error as? LockError, .system(call: "connect(\(directory!)/none.sock)", errno: ENOENT))
        }
    }

    func testMalformedFrameGetsAnErrorReplyAndServerSurvives() throws {
        let logs = EventRecorder()
        let server = ControlSocketServer(path: socketPath, handler: { _ in .success("fine") }, log: { logs.log($0) })
        try server.start()
        defer { server.stop() }
        // A frame that claims 1 MiB: rejected without allocating it.
        let fd = try UnixSocketIO.newSocket()
        var addr = try UnixSocketIO.address(for: socketPath)
        XCTAssertEqual(UnixSocketIO.withSockaddr(&addr) { connect(fd, $0, $1) }, 0)
        let header = withUnsafeBytes(of: UInt32(1 << 20).bigEndian) { Array($0) }
        XCTAssertEqual(header.withUnsafeBytes { send(fd, $0.baseAddress, 4, 0) }, 4)
        let body = try UnixSocketIO.readFrame(fd, deadline: monotonicMicroseconds() + 2_000_000)
        let reply = try ControlWire.decodeReply(UnsafeRawBufferPointer(body))
        body.deallocate()
        close(fd)
        XCTAssertFalse(reply.ok)
        XCTAssertTrue(reply.message.contains("bad frame length"), reply.message)
        XCTAssertEqual(try ControlClient.send(path: socketPath, request: ControlRequest(command: "status"), timeout: 2),
                       .success("fine"))
    }

    /// A client that connects and sends nothing (hung, or stopped in a debugger) must not hold
    /// off `photovault lock`: the lock is answered at once, not after the silent one's 2 s.
    func testASilentClientDoesNotDelayALock() throws {
        let locks = EventRecorder()
        let server = ControlSocketServer(path: socketPath, handler: { request in
            locks.log(request.command)
            return .success("locked")
        })
        try server.start()
        defer { server.stop() }
        var silent: [Int32] = []
        defer { silent.forEach { close($0) } }
        for _ in 0..<3 {
            let fd = try UnixSocketIO.newSocket()
            var addr = try UnixSocketIO.address(for: socketPath)
            XCTAssertEqual(UnixSocketIO.withSockaddr(&addr) { connect(fd, $0, $1) }, 0)
            silent.append(fd)
        }
        usleep(100_000)   // the server has accepted them
        let t0 = Date()
        let reply = try ControlClient.send(path: socketPath, request: ControlRequest(command: "lock"), timeout: 1)
        let waited = Date().timeIntervalSince(t0)
        print(String(format: "lock answered %.0f ms after three silent clients connected", waited * 1000))
        XCTAssertEqual(reply, .success("locked"))
        XCTAssertLessThan(waited, 0.5)
        XCTAssertEqual(locks.logLines, ["lock"])
    }

    /// A handler that takes longer than the I/O deadline (`status` counting a large vault)
    /// still gets its reply through: the deadline for the reply starts when the handler returns.
    func testAReplyAfterASlowHandlerIsDelivered() throws {
        let server = ControlSocketServer(path: socketPath, handler: { _ in
            usleep(UInt32(ControlSocketServer.ioTimeoutMicroseconds) + 500_000)
            return .success("state=unlocked")
        })
        try server.start()
        defer { server.stop() }
        let reply = try ControlClient.send(path: socketPath, request: ControlRequest(command: "status"), timeout: 6)
        XCTAssertEqual(reply, .success("state=unlocked"))
    }
}
