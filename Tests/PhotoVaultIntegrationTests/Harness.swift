import Foundation
import XCTest

/// Drives the built `photovault` binary and real tools, the way a user or a script does.
/// Every mount made here is a real FUSE mount through /dev/fuse.
enum Harness {
    /// The `photovault` executable built beside this test bundle (.build/<triple>/debug/).
    static var binary: String {
        let bundle = Bundle(for: Token.self).bundleURL
        // On Linux the test bundle's URL is the build directory itself (.build/<triple>/debug).
        let beside = bundle.appendingPathComponent("photovault").path
        if FileManager.default.isExecutableFile(atPath: beside) { return beside }
        var dir = bundle.deletingLastPathComponent()
        for _ in 0..<3 {
            let candidate = dir.appendingPathComponent("photovault").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return bundle.deletingLastPathComponent().appendingPathComponent("photovault").path
    }
    final class Token {}

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs a command with optional stdin, environment additions and a timeout.
    ///
    /// posix_spawn + waitpid, not Foundation.Process: on Linux, Process learns that its child
    /// exited from a socket it leaks into the child (swift-corelibs-foundation issue 4795), so
    /// `photovault mount`, whose background daemon inherits that socket, would look alive until
    /// the daemon exits (and waitUntilExit could hang for good).
    @discardableResult
    static func run(_ argv: [String], stdin: String? = nil, env: [String: String] = [:], timeout: Double = 120,
                    cwd: String? = nil) -> Result {
        var exe = argv[0].hasPrefix("/") ? argv[0] : "/usr/bin/env"
        var args = argv[0].hasPrefix("/") ? argv : ["env"] + argv
        if let c = cwd {   // coreutils env -C: chdir, then exec
            exe = "/usr/bin/env"
            args = ["env", "-C", c] + (argv[0].hasPrefix("/") ? argv : argv)
        }
        var e = ProcessInfo.processInfo.environment
        for (k, v) in env { e[k] = v }
        var outP: [Int32] = [-1, -1], errP: [Int32] = [-1, -1], inP: [Int32] = [-1, -1]
        // Pipes are made close-on-exec under a lock shared with the spawn, so a command started
        // by another thread at the same moment cannot inherit (and hold open) our pipes.
        spawnLock.lock()
        guard pipe(&outP) == 0, pipe(&errP) == 0, pipe(&inP) == 0 else {
            spawnLock.unlock()
            return Result(status: 127, stdout: "", stderr: "pipe failed")
        }
        for fd in outP + errP + inP { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var fa = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&fa)
        if stdin == nil {
            posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)
        } else {
            posix_spawn_file_actions_adddup2(&fa, inP[0], 0)
        }
        posix_spawn_file_actions_adddup2(&fa, outP[1], 1)
        posix_spawn_file_actions_adddup2(&fa, errP[1], 2)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        // Default signal dispositions and an empty mask in the child.
        var all = sigset_t(), none = sigset_t()
        sigfillset(&all); sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attr, &all)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let cargv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
        let cenv: [UnsafeMutablePointer<CChar>?] = e.map { strdup("\($0.key)=\($0.value)") } + [nil]
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, exe, &fa, &attr, cargv, cenv)
        spawnLock.unlock()
        posix_spawn_file_actions_destroy(&fa)
        posix_spawnattr_destroy(&attr)
        for p in cargv { free(p) }
        for p in cenv { free(p) }
        close(outP[1]); close(errP[1]); close(inP[0])
        guard rc == 0 else {
            close(outP[0]); close(errP[0]); close(inP[1])
            return Result(status: 127, stdout: "", stderr: "posix_spawn \(exe): \(String(cString: strerror(rc)))")
        }
        if let s = stdin {
            // Small inputs only (passwords, a few lines): fits the pipe buffer.
            let b = Array(s.utf8)
            _ = b.withUnsafeBytes { write(inP[1], $0.baseAddress, b.count) }
        }
        close(inP[1])
        var outData = [UInt8](), errData = [UInt8]()
        var open: [Int32] = [outP[0], errP[0]]
        var status: Int32 = 0
        var exited = false
        var killed = false
        let deadline = Date().addingTimeInterval(timeout)
        var drainUntil: Date? = nil
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            if !exited {
                let w = waitpid(pid, &status, WNOHANG)
                if w == pid || (w < 0 && errno == ECHILD) {
                    exited = true
                    // A grandchild may keep the pipes: read what is there, not forever.
                    drainUntil = Date().addingTimeInterval(2)
                }
            }
            if open.isEmpty && exited { break }
            if let d = drainUntil, Date() > d { break }
            if !exited && !killed && Date() > deadline {
                kill(pid, SIGTERM); usleep(200_000)
                if waitpid(pid, &status, WNOHANG) == 0 { kill(pid, SIGKILL) }
                killed = true
            }
            var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&fds, nfds_t(fds.count), 20)
            for f in fds where f.revents != 0 {
                let n = read(f.fd, &buf, buf.count)
                if n > 0 {
                    if f.fd == outP[0] { outData += buf[0..<n] } else { errData += buf[0..<n] }
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    open.removeAll { $0 == f.fd }
                }
            }
        }
        close(outP[0]); close(errP[0])
        if !exited { _ = waitpid(pid, &status, 0) }
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return Result(status: code, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }

    private static let spawnLock = NSLock()

    /// Runs through `bash -c`.
    @discardableResult
    static func sh(_ script: String, env: [String: String] = [:], timeout: Double = 300) -> Result {
        run(["/bin/bash", "-c", script], env: env, timeout: timeout)
    }

    static func pv(_ args: [String], stdin: String? = nil, env: [String: String] = [:], timeout: Double = 120) -> Result {
        run([binary] + args, stdin: stdin, env: env, timeout: timeout)
    }

    static func isMounted(_ path: String) -> Bool {
        // Decoded leniently: one mount anywhere on the machine whose path is not UTF-8 (another
        // test's) made a strict decode fail, and every mount here looked absent.
        guard let data = FileManager.default.contents(atPath: "/proc/self/mountinfo") else { return false }
        let text = String(decoding: data, as: UTF8.self)
        let real = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? path
        return text.split(separator: "\n").contains { line in
            let f = line.split(separator: " ")
            return f.count > 4 && (f[4] == path || f[4] == real)
        }
    }

    static func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(20_000)
        }
        return condition()
    }

    static func forceUnmount(_ path: String) {
        if isMounted(path) { _ = run(["fusermount3", "-uz", path], timeout: 10) }
    }
}

/// A scratch store + account + mountpoint under /tmp, torn down after each test.
final class Sandbox {
    let root: String
    let store: String
    let passfile: String
    var mounts: [String] = []
    static let password = "correct horse battery"

    init(_ name: String = "pv") {
        // Every command inherits this process's umask. The in-process FS tests (same test
        // binary, run in an order SwiftPM does not fix) leave it at 0, as a mount daemon must;
        // the tools driven here expect a user's usual 022.
        umask(0o022)
        // In /tmp itself, not NSTemporaryDirectory(): scripts/test.sh points TMPDIR at a
        // directory of its own (for the toolchain's leftovers) and removes it at the end.
        root = "/tmp/\(name)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        store = root + "/store"
        passfile = root + "/pass"
        try! Sandbox.password.write(toFile: passfile, atomically: true, encoding: .utf8)
        chmod(passfile, 0o600)
    }

    /// Environment for every command: cheap Argon2id for tests, a private runtime dir and
    /// device secret, no D-Bus.
    var env: [String: String] {
        ["PHOTOVAULT_KDF_PROFILE": "floor", "XDG_RUNTIME_DIR": root, "PHOTOVAULT_DEVICE_SECRET": root + "/device-secret",
         "HOME": root, "XDG_DATA_HOME": root + "/data", "XDG_CACHE_HOME": root + "/cache"]
    }

    @discardableResult
    func pv(_ args: [String], stdin: String? = nil, timeout: Double = 120) -> Harness.Result {
        Harness.pv(args, stdin: stdin, env: env, timeout: timeout)
    }

    func initStore(users: [String] = ["alice"]) {
        let r = pv(["init", "--store", store])
        XCTAssertEqual(r.status, 0, "init: \(r.stderr)")
        for u in users { addUser(u) }
    }

    func addUser(_ user: String, passfile pf: String? = nil) {
        let r = pv(["user", "add", user, "--store", store, "--passfile", pf ?? passfile])
        XCTAssertEqual(r.status, 0, "user add \(user): \(r.stderr)")
    }

    /// Mounts `user`'s view and waits for it; returns the mountpoint.
    @discardableResult
    func mount(_ user: String = "alice", at name: String? = nil, extra: [String] = [], passfile pf: String? = nil) -> String {
        let mp = root + "/" + (name ?? "mnt-\(user)")
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let r = pv(["mount", mp, "--store", store, "--user", user, "--passfile", pf ?? passfile, "--no-dbus"] + extra)
        XCTAssertEqual(r.status, 0, "mount: \(r.stderr)")
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) }, "mount did not appear")
        mounts.append(mp)
        return mp
    }

    func unmount(_ mp: String) {
        let r = pv(["unmount", mp])
        XCTAssertEqual(r.status, 0, "unmount: \(r.stderr)")
        XCTAssertFalse(Harness.isMounted(mp))
    }

    /// Every byte of every file, every entry name and every xattr underneath the store:
    /// the needles must appear nowhere.
    func assertNoPlaintext(_ needles: [String], file: StaticString = #filePath, line: UInt = #line) {
        let hits = Sandbox.scan(store, needles)
        XCTAssertEqual(hits, [], "plaintext found underneath the store", file: file, line: line)
    }

    static func scan(_ dir: String, _ needles: [String]) -> [String] {
        var hits: [String] = []
        let fm = FileManager.default
        // Foundation enumerates a missing directory as an empty one: a scan of the wrong
        // place would find nothing and pass.
        var top = stat()
        guard lstat(dir, &top) == 0, (top.st_mode & S_IFMT) == S_IFDIR, let e = fm.enumerator(atPath: dir) else {
            return ["cannot scan \(dir): not a directory"]
        }
        let bytesNeedles = needles.map { Array($0.utf8) }
        while let rel = e.nextObject() as? String {
            for (i, n) in needles.enumerated() where rel.contains(n) { hits.append("name: \(rel) ~ \(needles[i])") }
            let path = dir + "/" + rel
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFLNK {
                let t = (try? fm.destinationOfSymbolicLink(atPath: path)) ?? ""
                for n in needles where t.contains(n) { hits.append("symlink: \(rel) ~ \(n)") }
                continue
            }
            if (st.st_mode & S_IFMT) == S_IFREG, let data = fm.contents(atPath: path) {
                let bytes = [UInt8](data)
                for (i, n) in bytesNeedles.enumerated() where contains(bytes, n) { hits.append("content: \(rel) ~ \(needles[i])") }
            }
            // A getfattr that did not run (not installed: scripts/deps.sh test installs attr)
            // would make the xattr scan pass without looking: that is a hit too.
            // A store on a drive without xattrs (exFAT) holds none: getfattr says EOPNOTSUPP.
            let x = Harness.run(["getfattr", "-d", "-m", "-", "--absolute-names", path], timeout: 10)
            if x.status != 0 && !x.stderr.hasSuffix(": Operation not supported\n") { hits.append("xattr: \(rel): getfattr failed (\(x.status)): \(x.stderr)") }
            for n in needles where x.stdout.contains(n) { hits.append("xattr: \(rel) ~ \(n)") }
        }
        return hits
    }

    static func contains(_ hay: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, hay.count >= needle.count else { return false }
        let first = needle[0]
        var i = 0
        let limit = hay.count - needle.count
        while i <= limit {
            if hay[i] == first && Array(hay[i..<(i + needle.count)]) == needle { return true }
            i += 1
        }
        return false
    }

    deinit {
        for m in mounts { Harness.forceUnmount(m) }
        _ = Harness.run(["rm", "-rf", root], timeout: 60)
    }
}
