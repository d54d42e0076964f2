import CLinux
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
        let key = try SubkeyDerivation.derive(from: opened.masterKey, id: 1, context: UserKeyring.context)
        defer { key.wipe() }
        return key.withUnsafeBytes { Array($0) }
    }

    /// Every readable mapping of `pid` (from /proc/PID/maps, read through /proc/PID/mem) that
    /// contains `needle`: "start-end perms name".
    static func regionsContaining(pid: pid_t, _ needle: [UInt8]) throws -> (hits: [String], bytesRead: Int) {
        let regions = try readableRegions(pid: pid)
        return (regions.filter { Sandbox.contains($0.bytes, needle) }.map(\.line), regions.reduce(0) { $0 + $1.bytes.count })
    }

    /// Every readable mapping of `pid` with its bytes, read through /proc/PID/mem.
    static func readableRegions(pid: pid_t) throws -> [(line: String, bytes: [UInt8])] {
        let maps = try Self.readProcFile("/proc/\(pid)/maps")
        let fd = open("/proc/\(pid)/mem", O_RDONLY)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var out: [(line: String, bytes: [UInt8])] = []
        for line in maps.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 2, f[1].hasPrefix("r") else { continue }
            let range = f[0].split(separator: "-")
            guard range.count == 2, let start = UInt64(range[0], radix: 16), let end = UInt64(range[1], radix: 16) else { continue }
            if f.count >= 6, f[5] == "[vvar]" || f[5] == "[vsyscall]" || f[5].hasPrefix("[vvar") { continue }
            var region = [UInt8](repeating: 0, count: Int(end - start))
            let n = region.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(Int64(bitPattern: start))) }
            guard n > 0 else { continue }
            out.append((String(line), Array(region[0..<n])))
        }
        return out
    }

    /// 600 KiB of bytes that repeat nowhere (no 64-byte piece occurs twice or in other data),
    /// written to SANDBOX/photo.raw.
    static func samplePhoto(in s: Sandbox, multiplier: Int, shift: Int, period: Int) throws -> ([UInt8], String) {
        var bytes = [UInt8](repeating: 0, count: 600 * 1024)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: (i &* multiplier) >> shift) ^ UInt8(truncatingIfNeeded: i / period) }
        let src = s.root + "/photo.raw"
        try Data(bytes).write(to: URL(fileURLWithPath: src))
        return (bytes, src)
    }

    /// The offsets of `bytes` whose 64-byte piece is somewhere in `pid`'s readable memory, one
    /// piece every 16 KiB (each chunk and each read or write request has several).
    static func offsetsFound(pid: pid_t, _ bytes: [UInt8]) throws -> [Int] {
        let regions = try readableRegions(pid: pid)
        XCTAssertGreaterThan(regions.reduce(0) { $0 + $1.bytes.count }, 1 << 20, "under 1 MiB of memory read: the search proves nothing")
        var found: [Int] = []
        for off in stride(from: 0, to: bytes.count - 64, by: 16 * 1024) {
            let piece = Array(bytes[off..<off + 64])
            for r in regions where pv_contains(r.bytes, r.bytes.count, piece, 64) != 0 { found.append(off); break }
        }
        return found
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
        // The background daemon works in / (it must not keep the caller's file system busy):
        // a core would be written there.
        XCTAssertEqual(try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd"), "/")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/core"), "a /core exists already: the check would prove nothing")
        let limits = try Self.readProcFile("/proc/\(pid)/limits")
        XCTAssertTrue(limits.split(separator: "\n").contains { $0.hasPrefix("Max core file size") && $0.contains("unlimited") }, limits)
        kill(pid, SIGABRT)
        XCTAssertTrue(Harness.waitUntil(10) { !MountProbe.isAlive(pid) }, "the daemon did not die of SIGABRT")
        usleep(500_000)
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/core"), "the mount daemon dumped core: it is dumpable")
        XCTAssertFalse(FileManager.default.fileExists(atPath: cwd + "/core"), "the mount daemon dumped core: it is dumpable")
        Harness.forceUnmount(mp)
    }

    /// Plaintext crosses buffers outside sodium_malloc (libfuse's request buffers, read
    /// replies), so the whole daemon is locked against swapping: every resident page of every
    /// mapping, including the heap and the worker threads' stacks, is locked
    /// (/proc/PID/smaps "Locked" equals "Rss"). The daemon here runs as root (CAP_IPC_LOCK).
    func testDaemonMemoryIsLockedAgainstSwap() throws {
        let s = Sandbox("lock-mlock")
        s.initStore()
        let mp = s.mount()
        // Traffic first, so libfuse's buffers and the worker threads exist, and a control
        // request (status), whose buffers once unlocked the heap pages around them.
        _ = s.ok("dd if=/dev/urandom of='\(mp)/a.raw' bs=256k count=8 status=none && cat '\(mp)/a.raw' > /dev/null")
        XCTAssertEqual(MountProbe.state(s, mp), "unlocked")
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let smaps = try Self.readProcFile("/proc/\(pid)/smaps")
        // Private memory is where plaintext can be: anonymous mappings, the heap and stacks.
        // (Locked counts shared pages of libraries in proportion, as Pss does, so those are
        // left out; [vvar], [vdso] and [vsyscall] are kernel pages mlock never applies to.)
        var header = "", rss = 0, resident = 0, unlocked: [String] = []
        for line in smaps.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = f.first, first.contains("-"), first.first?.isHexDigit == true {
                header = f.count >= 6 && !f[5].hasPrefix("[heap") && !f[5].hasPrefix("[stack") ? "" : String(line)
                continue
            }
            guard !header.isEmpty, f.count >= 2, let kb = Int(f[1]) else { continue }
            if f[0] == "Rss:" { rss = kb; resident += kb }
            if f[0] == "Locked:", kb < rss { unlocked.append("\(header): rss \(rss) kB locked \(kb) kB") }
        }
        XCTAssertGreaterThan(resident, 1024, "smaps shows under 1 MiB of private memory resident: the check would prove nothing")
        XCTAssertEqual(unlocked, [], "daemon mappings with resident pages not locked against swap")
        s.unmount(mp)
    }

    /// Without CAP_IPC_LOCK and under a finite RLIMIT_MEMLOCK (here 8 MiB, the default an
    /// ordinary user has; raising it would need CAP_SYS_RESOURCE) the daemon does not lock
    /// all its memory: MCL_FUTURE would make later allocations fail once the limit was
    /// reached. It serves as before, with only its keys locked.
    func testDaemonUnderAFiniteMemlockLimitLocksOnlyItsKeys() throws {
        let s = Sandbox("lock-nomlock")
        s.initStore()
        let mp = s.mountWrapped("prlimit --memlock=8388608:8388608 setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock --", at: "mnt-noipc")
        let q = Sandbox.quote(mp)
        let sums = s.ok("dd if=/dev/urandom of=\(s.root)/src bs=1M count=8 status=none && cp \(s.root)/src \(q)/f && sha256sum < \(s.root)/src && sha256sum < \(q)/f")
        let lines = sums.split(separator: "\n")
        XCTAssertEqual(lines.count, 2)
        XCTAssertEqual(lines.first, lines.last)
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let status = try Self.readProcFile("/proc/\(pid)/status")
        let capEff = status.split(separator: "\n").first { $0.hasPrefix("CapEff:") }.flatMap { UInt64($0.dropFirst(7).trimmingCharacters(in: .whitespaces), radix: 16) }
        XCTAssertEqual(try XCTUnwrap(capEff, status) & (1 << 14), 0, "the daemon still holds CAP_IPC_LOCK")
        XCTAssertTrue(status.contains("VmLck:"), status)
        let lck = status.split(separator: "\n").first { $0.hasPrefix("VmLck:") }.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") }
        let locked = try XCTUnwrap(lck, status)
        XCTAssertLessThan(locked, 16 * 1024, "VmLck \(locked) kB: the daemon locked all its memory under a finite limit")
        XCTAssertGreaterThan(locked, 0, "the daemon's keys are not in locked memory")
        s.unmount(mp)
    }

    /// libsodium's sodium_malloc does not check its own mlock: past RLIMIT_MEMLOCK (no
    /// CAP_IPC_LOCK) it hands out memory that can be swapped, and the daemon used to mount and
    /// keep its keys there without a word. A limit too small for the keys (64 KiB, the
    /// kernel's default before 5.16) now fails the mount, in the background and with -f, with
    /// one line and exit code 30, and nothing is mounted. A limit too small for even the first
    /// key (0) does the same, there and in an offline command, instead of a crash.
    func testALockedMemoryLimitTooSmallForTheKeysFailsTheMount() throws {
        let s = Sandbox("lock-memlimit")
        s.initStore()
        let mp = s.root + "/mnt-small"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let account = ["--store", s.store, "--user", "alice", "--passfile", s.passfile]
        let commands = [["mount", mp, "--no-dbus"], ["mount", mp, "--no-dbus", "-f"], ["export", "/", s.root + "/out"]]
        for (limit, kib) in [(65536, 64), (0, 0)] {
            for command in commands where limit == 0 || command[0] == "mount" {
                let line = ([Harness.binary] + command + account).map(Sandbox.quote).joined(separator: " ")
                let r = s.run("prlimit --memlock=\(limit):\(limit) setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock -- \(line)", timeout: 60)
                if Harness.isMounted(mp) { s.mounts.append(mp); Harness.forceUnmount(mp) }
                let what = "\(command.prefix(2)) \(command.last!) under \(kib) KiB"
                XCTAssertEqual(r.status, 30, "\(what): \(r.stderr)")
                XCTAssertEqual(r.stderr.split(separator: "\n").map(String.init),
                               ["photovault: keys cannot be kept in locked memory: the locked-memory limit (ulimit -l) is \(kib) KiB; "
                                + "raise it to at least 1024 KiB or run with CAP_IPC_LOCK"], what)
                XCTAssertFalse(Harness.isMounted(mp), what)
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.root + "/out"))
    }

    /// Under a limit that holds the mount's keys but not those of every file a program keeps
    /// open, a file that finds no locked memory for its key is not opened (ENOMEM, and a line
    /// in the log saying why) instead of having its key put in memory that can be swapped;
    /// the files already open and the mount go on, and once files are closed opens succeed
    /// again. (Before, all 300 opened, most keys in unlocked memory.)
    func testFilesBeyondTheLockedMemoryLimitFailToOpenWithENOMEM() throws {
        let s = Sandbox("lock-memfiles")
        s.initStore()
        let mp = s.root + "/mnt-files"
        let log = s.root + "/daemon.log"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let mount = [Harness.binary, "mount", mp, "--store", s.store, "--user", "alice", "--passfile", s.passfile, "--no-dbus", "-f"]
            .map(Sandbox.quote).joined(separator: " ")
        s.ok("setsid prlimit --memlock=262144:262144 setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock -- \(mount) </dev/null >/dev/null 2>\(Sandbox.quote(log)) &")
        s.mounts.append(mp)
        XCTAssertTrue(Harness.waitUntil(10) { Harness.isMounted(mp) }, "mount did not appear: " + ((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""))
        let q = Sandbox.quote(mp)
        s.ok("for i in $(seq 1 300); do echo \"file $i\" > \(q)/f$i; done")
        // All 300 held open at once by one shell; what opened is read back, the failures are
        // counted from the shell's messages.
        let out = s.ok("""
            errs=\(Sandbox.quote(s.root + "/open-errors")); opened=0; bad=0
            { for i in $(seq 1 300); do
                if exec {fd}<\(q)/f$i; then opened=$((opened+1)); read -r line <&$fd; [ "$line" = "file $i" ] || bad=$((bad+1)); fi
              done; } 2>"$errs"
            echo "$opened $(grep -c 'Cannot allocate memory' "$errs") $(grep -vc 'Cannot allocate memory' "$errs") $bad"
            """)
        let counts = out.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Int($0) }
        XCTAssertEqual(counts.count, 4, out)
        let (opened, enomem, other, bad) = (counts[0], counts[1], counts[2], counts[3])
        XCTAssertGreaterThan(opened, 0, out)
        XCTAssertGreaterThan(enomem, 0, "every file opened: the limit was not reached, or keys went to unlocked memory (\(out))")
        XCTAssertEqual(other, 0, out)
        XCTAssertEqual(bad, 0, out)
        XCTAssertEqual(opened + enomem, 300, out)
        // Those files closed (the shell exited), every file opens again.
        XCTAssertEqual(s.ok("cat \(q)/f300"), "file 300\n")
        let daemonLog = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(daemonLog.contains("ENOMEM: open /f") && daemonLog.contains("keys cannot be kept in locked memory: "
                                                                                  + "the locked-memory limit (ulimit -l) is 256 KiB"), daemonLog)
        s.unmount(mp)
    }

    /// The data of a WRITE arrives in libfuse's request buffer (one per worker thread, reused
    /// for the next request, freed without zeroing when an idle worker ends), so the daemon
    /// kept the last photo data each worker had received, after the file was closed and the
    /// vault locked, until some later request happened to overwrite it. It is zeroed once
    /// sealed. The file is written through the mount with requests of several sizes, closed,
    /// the vault locked (`--on-lock stay`: the daemon lives on), and the daemon's memory is
    /// searched for pieces of it from start to end.
    func testWrittenPlaintextDoesNotStayInTheDaemon() throws {
        let s = Sandbox("lock-writebuf")
        s.initStore()
        let (bytes, src) = try Self.samplePhoto(in: s, multiplier: 2246822519, shift: 11, period: 4099)
        let mp = s.mount(extra: ["--on-lock", "stay"])
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let q = Sandbox.quote(mp)
        // Write-only (direct) and read-write (through the page cache) handles, large and small requests.
        s.ok("cp \(Sandbox.quote(src)) \(q)/a.raw && dd if=\(Sandbox.quote(src)) of=\(q)/b.raw bs=4k conv=notrunc status=none "
             + "&& dd if=\(Sandbox.quote(src)) bs=64k status=none | dd of=\(q)/c.raw bs=64k iflag=fullblock conv=notrunc status=none")
        for name in ["a.raw", "b.raw", "c.raw"] {
            XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: mp + "/" + name))), bytes, name)
        }
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "locked")
        XCTAssertEqual(try Self.offsetsFound(pid: pid, bytes), [], "the daemon's memory still holds written plaintext at these offsets")
        s.unmount(mp)
    }

    /// A read reply is plaintext in a heap buffer: it is zeroed before it is freed, so the
    /// daemon keeps no copy of a photo it served. The file is imported offline (it never
    /// passed through the daemon's write path), read through the mount, and the daemon's
    /// memory is searched for pieces of it from start to end.
    func testReadRepliesLeaveNoPlaintextInTheDaemon() throws {
        let s = Sandbox("lock-readbuf")
        s.initStore()
        let (bytes, src) = try Self.samplePhoto(in: s, multiplier: 2654435761, shift: 13, period: 4093)
        XCTAssertEqual(OfflineCommandTests.pv(s, ["import", src, "/"]).status, 0)
        let mp = s.mount()
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let read = try Data(contentsOf: URL(fileURLWithPath: mp + "/photo.raw"))
        XCTAssertEqual(Array(read), bytes)
        XCTAssertEqual(try Self.offsetsFound(pid: pid, bytes), [], "the daemon's memory still holds the plaintext at these offsets")
        // The search works: the control key is in memory while unlocked.
        let key = try Self.completeClassKey(store: s.store, user: "alice", password: Sandbox.password)
        XCTAssertFalse(try Self.regionsContaining(pid: pid, key).hits.isEmpty, "memory search found no key: it would prove nothing")
        s.unmount(mp)
    }
}
