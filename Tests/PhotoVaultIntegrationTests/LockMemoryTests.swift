import Foundation
import PhotoVaultCrypto
import PhotoVaultStore
import XCTest

/// After a lock the daemon's memory no longer holds the `complete` class key, and the daemon
/// is not dumpable (its memory cannot be read without CAP_SYS_PTRACE, even by its own uid).
final class LockMemoryTests: XCTestCase {
    /// The `complete` class key of `user`, derived in-process exactly as FORMAT.md section 3
    /// says: KDF(id 1, "PVacct01", master key).
    static func completeClassKey(store: String, user: String, password: String) throws -> [UInt8] {
        let accounts = try AccountStore(layout: StoreLayout(root: store))
        let bytes = Array(password.utf8)
        let pw = bytes.withUnsafeBytes { SecureBytes(copying: $0) }
        defer { pw.wipe() }
        let opened = try accounts.open(user: user, password: pw)
        defer { opened.wipe() }
        let key = SubkeyDerivation.derive(from: opened.masterKey, id: 1, context: UserKeyring.context)
        defer { key.wipe() }
        return key.withUnsafeBytes { Array($0) }
    }

    /// Every readable mapping of `pid` (from /proc/PID/maps, read through /proc/PID/mem) that
    /// contains `needle`: "start-end perms name".
    static func regionsContaining(pid: pid_t, _ needle: [UInt8]) throws -> (hits: [String], bytesRead: Int) {
        let maps = try Self.readProcFile("/proc/\(pid)/maps")
        let fd = open("/proc/\(pid)/mem", O_RDONLY)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var hits: [String] = []
        var total = 0
        for line in maps.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 2, f[1].hasPrefix("r") else { continue }
            let range = f[0].split(separator: "-")
            guard range.count == 2, let start = UInt64(range[0], radix: 16), let end = UInt64(range[1], radix: 16) else { continue }
            if f.count >= 6, f[5] == "[vvar]" || f[5] == "[vsyscall]" || f[5].hasPrefix("[vvar") { continue }
            var region = [UInt8](repeating: 0, count: Int(end - start))
            let n = region.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(Int64(bitPattern: start))) }
            guard n > 0 else { continue }
            total += n
            if Sandbox.contains(Array(region[0..<n]), needle) { hits.append(String(line)) }
        }
        return (hits, total)
    }

    /// /proc files report size 0, and String(contentsOfFile:) then reads only the first page.
    static func readProcFile(_ path: String) throws -> String {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }

    func testCompleteKeyLeavesTheDaemonMemoryOnLock() throws {
        let s = Sandbox("lock-mem")
        s.initStore()
        let mp = s.mount(extra: ["--on-lock", "stay"])
        try Data("in memory".utf8).write(to: URL(fileURLWithPath: mp + "/a.jpg"))
        XCTAssertEqual(try String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "in memory")
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let key = try Self.completeClassKey(store: s.store, user: "alice", password: Sandbox.password)
        XCTAssertEqual(key.count, 32)

        // Before the lock the key is there: the search works and the key is the right one.
        let before = try Self.regionsContaining(pid: pid, key)
        print("daemon memory before lock: \(before.bytesRead) bytes read, key in \(before.hits)")
        XCTAssertFalse(before.hits.isEmpty, "the complete key was not found while unlocked: the check would prove nothing")

        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        let after = try Self.regionsContaining(pid: pid, key)
        print("daemon memory after lock: \(after.bytesRead) bytes read, key in \(after.hits)")
        XCTAssertEqual(after.hits, [], "the complete class key is still in the daemon's memory after the lock")
        XCTAssertGreaterThan(after.bytesRead, 1 << 20)

        // Unlock brings it back (and proves the daemon is the same process).
        XCTAssertEqual(s.pv(["unlock", mp, "--user", "alice", "--passfile", s.passfile]).status, 0)
        XCTAssertFalse(try Self.regionsContaining(pid: pid, key).hits.isEmpty)
        s.unmount(mp)
    }

    /// PR_SET_DUMPABLE 0, checked by its effect: a process that is not dumpable leaves no core
    /// file when it aborts. (On this VM's kernel, reading /proc/PID/environ or mem without
    /// CAP_SYS_PTRACE is allowed even for a non-dumpable process of the same uid, so that is
    /// no test here; cores are.) A control process in the same directory with the same
    /// RLIMIT_CORE proves cores are written at all.
    func testDaemonIsNotDumpable() throws {
        let pattern = (try? Self.readProcFile("/proc/sys/kernel/core_pattern"))?.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(pattern, "core", "this check needs core_pattern 'core' (a file in the process's directory)")
        let s = Sandbox("lock-dump")
        s.initStore()
        let cwd = s.root + "/cores"
        try FileManager.default.createDirectory(atPath: cwd, withIntermediateDirectories: true)
        let mp = s.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        // The control: an ordinary process started the same way aborts with a core.
        let control = Harness.run(["/bin/bash", "-c", "cd '\(cwd)' && ulimit -c unlimited && sleep 30 & p=$!; sleep 0.3; kill -ABRT $p; wait $p; echo status=$?"],
                                  timeout: 20)
        XCTAssertTrue(control.stdout.contains("status=134"), control.stdout + control.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: cwd + "/core"), "no control core: the check would prove nothing")
        try FileManager.default.removeItem(atPath: cwd + "/core")

        // SWIFT_BACKTRACE=enable=no: with Swift's crash backtracer on, a SIGABRT makes the
        // daemon hang in the handler instead of dying (reported separately), so nothing would
        // ever be dumped either way. Off, the signal's default action, a core dump, applies.
        var envVars = s.env
        envVars["SWIFT_BACKTRACE"] = "enable=no"
        let env = envVars.map { "\($0.key)='\($0.value)'" }.joined(separator: " ")
        let r = Harness.run(["/bin/bash", "-c", "cd '\(cwd)' && ulimit -c unlimited && exec env \(env) '\(Harness.binary)' mount '\(mp)' --store '\(s.store)' --user alice --passfile '\(s.passfile)' --no-dbus"],
                            timeout: 60)
        XCTAssertEqual(r.status, 0, r.stderr)
        s.mounts.append(mp)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) })
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        XCTAssertEqual(try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd"), cwd)
        let limits = try Self.readProcFile("/proc/\(pid)/limits")
        XCTAssertTrue(limits.split(separator: "\n").contains { $0.hasPrefix("Max core file size") && $0.contains("unlimited") }, limits)
        kill(pid, SIGABRT)
        XCTAssertTrue(Harness.waitUntil(10) { !MountProbe.isAlive(pid) }, "the daemon did not die of SIGABRT")
        usleep(500_000)
        XCTAssertFalse(FileManager.default.fileExists(atPath: cwd + "/core"), "the mount daemon dumped core: it is dumpable")
        Harness.forceUnmount(mp)
    }
}
