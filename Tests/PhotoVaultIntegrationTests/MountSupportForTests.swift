import Foundation
import XCTest

/// Small helpers shared by the end-to-end mount tests (kept out of Harness.swift, which
/// other engineers also edit).
extension Sandbox {
    /// Mounts alice's vault at ROOT/`name` through a wrapper command line (`setpriv ...`,
    /// `prlimit ...`) placed before `photovault mount` (with `extra` options); waits for the
    /// mount and returns it.
    func mountWrapped(_ wrapper: String, at name: String, extra: [String] = [],
                      file: StaticString = #filePath, line: UInt = #line) -> String {
        let mp = root + "/" + name
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let mount = ([Harness.binary, "mount", mp, "--store", store, "--user", "alice", "--passfile", passfile, "--no-dbus"] + extra)
            .map(Sandbox.quote).joined(separator: " ")
        ok("\(wrapper) \(mount)", file: file, line: line)
        mounts.append(mp)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) }, "mount did not appear", file: file, line: line)
        return mp
    }

    /// Runs a bash script with the sandbox's environment and asserts it succeeded; returns stdout.
    @discardableResult
    func ok(_ script: String, timeout: Double = 300, file: StaticString = #filePath, line: UInt = #line) -> String {
        let r = Harness.sh(script, env: env, timeout: timeout)
        XCTAssertEqual(r.status, 0, "script failed (\(r.status)):\n\(script)\nstdout: \(r.stdout)\nstderr: \(r.stderr)",
                       file: file, line: line)
        return r.stdout
    }

    /// Runs a bash script with the sandbox's environment, whatever its outcome.
    func run(_ script: String, timeout: Double = 300) -> Harness.Result {
        Harness.sh(script, env: env, timeout: timeout)
    }

    /// Unmounts and mounts `user`'s view again at the same place (fresh daemon, cold caches).
    @discardableResult
    func remount(_ mp: String, user: String = "alice", extra: [String] = []) -> String {
        unmount(mp)
        mounts.removeAll { $0 == mp }
        return mount(user, at: (mp as NSString).lastPathComponent, extra: extra)
    }

    /// The filesystem `storeOnOwnFilesystem` puts the store on.
    enum StoreFilesystem: String {
        /// Memory, in place: overwrites need no space.
        case tmpfs
        /// A loop-mounted image without fallocate (EOPNOTSUPP).
        case ext2
        /// A loop-mounted image with 4 KiB blocks (largest file: 16 TiB - 4 KiB).
        case ext4
        /// A loop-mounted image whose every overwrite is copy-on-write (at least 110 MiB).
        case btrfs
        /// A loop-mounted image with reflink (copy-on-write once extents are shared; at least 300 MiB).
        case xfs
    }

    /// Puts the (not yet created) store on a small filesystem of its own, to fill it up.
    /// Returns the lazy unmount for the caller's `defer`.
    func storeOnOwnFilesystem(size: String, _ fs: StoreFilesystem = .tmpfs, file: StaticString = #filePath,
                              line: UInt = #line) -> () -> Void {
        XCTAssertEqual(getuid(), 0, "mounting a filesystem needs root", file: file, line: line)
        let qs = Sandbox.quote(store), img = Sandbox.quote(root + "/disk.img")
        let mkfs = ["ext2": "mkfs.ext2 -q -F -m 0", "ext4": "mkfs.ext4 -q -F -m 0 -b 4096", "btrfs": "mkfs.btrfs -q -f", "xfs": "mkfs.xfs -q -f -m reflink=1"]
        ok(fs == .tmpfs ? "mkdir \(qs) && mount -t tmpfs -o size=\(size),mode=0700 tmpfs \(qs)" : """
           set -e
           truncate -s \(size) \(img) && \(mkfs[fs.rawValue]!) \(img) 2>&1
           mkdir \(qs) && mount -o loop \(img) \(qs) && rm -rf \(qs)/lost+found && chmod 0700 \(qs)
           """, file: file, line: line)
        return { [store] in _ = Harness.run(["umount", "-l", store]) }
    }

    /// A directory beside the store for plain (unencrypted) reference copies.
    func plainDir(_ name: String) -> String {
        let p = root + "/" + name
        try? FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true)
        return p
    }
}

/// `photovault mount -f` in a child process whose stderr (the daemon's log in the
/// foreground) goes to a file the test can read.
final class ForegroundMount {
    let process = Process()
    let logPath: String
    let mountpoint: String

    init(sandbox: Sandbox, user: String = "alice", at name: String, extra: [String] = []) throws {
        mountpoint = sandbox.root + "/" + name
        logPath = sandbox.root + "/\(name).log"
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Harness.binary)
        process.arguments = ["mount", mountpoint, "--store", sandbox.store, "--user", user,
                             "--passfile", sandbox.passfile, "--no-dbus", "-f"] + extra
        var e = ProcessInfo.processInfo.environment
        for (k, v) in sandbox.env { e[k] = v }
        process.environment = e
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(forWritingAtPath: logPath)
        try process.run()
        sandbox.mounts.append(mountpoint)
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func waitMounted() -> Bool { Harness.waitUntil(10) { Harness.isMounted(mountpoint) } }

    /// Attaches strace to the daemon (all its threads) making every `syscall` on `path` fail
    /// with `errorName`, and returns once every thread is traced; terminate the returned
    /// process to end the fault.
    func injectFault(on path: String, syscall: String, error errorName: String) throws -> Process {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let pid = process.processIdentifier
        let strace = Process()
        strace.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
        strace.arguments = ["-f", "-qq", "-o", "/dev/null", "-p", String(pid), "-P", path,
                            "-e", "trace=\(syscall)", "-e", "inject=\(syscall):error=\(errorName)"]
        strace.standardOutput = FileHandle.nullDevice
        strace.standardError = FileHandle.nullDevice
        try strace.run()
        XCTAssertTrue(Harness.waitUntil(10) {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            return !tasks.isEmpty && tasks.allSatisfy { t in
                let status = (try? String(contentsOfFile: "/proc/\(pid)/task/\(t)/status", encoding: .utf8)) ?? ""
                return status.split(separator: "\n").contains { $0.hasPrefix("TracerPid:") && !$0.hasSuffix("\t0") }
            }
        }, "strace did not attach to the daemon")
        return strace
    }

    /// Unmounts through the command and waits for the foreground daemon to exit.
    func stop(_ sandbox: Sandbox) {
        sandbox.unmount(mountpoint)
        _ = Harness.waitUntil(10) { !process.isRunning }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}

/// Deterministic pseudo-random numbers (SplitMix64) so a failing sequence can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func bytes(_ n: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: n)
        var i = 0
        while i < n {
            var v = next()
            for _ in 0..<8 where i < n { out[i] = UInt8(truncatingIfNeeded: v); v >>= 8; i += 1 }
        }
        return out
    }
}

extension Sandbox {
    /// The same scan as `assertNoPlaintext` (file bytes, entry names, symlink targets, xattr
    /// names and values underneath the store) done by grep, for stores holding gigabytes.
    func assertNoPlaintextByGrep(_ needles: [String], file: StaticString = #filePath, line: UInt = #line) {
        let list = root + "/needles-\(UUID().uuidString.prefix(6))"
        try? needles.joined(separator: "\n").appending("\n").write(toFile: list, atomically: true, encoding: .utf8)
        defer { unlink(list) }
        let script = """
        set -o pipefail
        s=\(Sandbox.quote(store)); n=\(Sandbox.quote(list))
        grep -r -a -l -F -f "$n" "$s" | sed 's/^/content: /'
        find "$s" -mindepth 1 -printf '%P\\n' | grep -F -f "$n" | sed 's/^/name: /'
        find "$s" -type l -printf '%P -> %l\\n' | grep -F -f "$n" | sed 's/^/symlink: /'
        x=$(getfattr -h -R -d -m - --absolute-names "$s") || echo "xattr: getfattr failed ($?): the xattr scan did not run"
        printf '%s\n' "$x" | grep -F -f "$n" | sed 's/^/xattr: /'
        find "$s" -mindepth 1 | wc -l | sed 's/^/scanned /'
        """
        let r = Harness.sh(script, timeout: 600)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        let hits = lines.filter { !$0.hasPrefix("scanned ") }
        XCTAssertEqual(hits, [], "plaintext found underneath the store", file: file, line: line)
        // The scan must have looked at something (a silent find failure would pass vacuously).
        let scanned = lines.first { $0.hasPrefix("scanned ") }.flatMap { Int($0.dropFirst(8)) } ?? 0
        XCTAssertGreaterThan(scanned, 3, "the store scan found nothing to scan: \(r.stderr)", file: file, line: line)
    }

    static func quote(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
}

extension MountProbe {
    /// Gone, or a zombie nobody has reaped yet (it holds nothing any more).
    static func hasEnded(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(close, offsetBy: 2)...].hasPrefix("Z")
    }
}
