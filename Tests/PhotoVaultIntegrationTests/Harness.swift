import Foundation
import XCTest

/// Drives the built `photovault` binary and real tools, the way a user or a script does.
/// Every mount made here is a real FUSE mount through /dev/fuse.
enum Harness {
    /// The `photovault` executable built beside this test bundle (.build/<triple>/debug/).
    static var binary: String {
        let bundle = Bundle(for: Token.self).bundleURL
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
    @discardableResult
    static func run(_ argv: [String], stdin: String? = nil, env: [String: String] = [:], timeout: Double = 120,
                    cwd: String? = nil) -> Result {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: argv[0].hasPrefix("/") ? argv[0] : "/usr/bin/env")
        p.arguments = argv[0].hasPrefix("/") ? Array(argv.dropFirst()) : argv
        var e = ProcessInfo.processInfo.environment
        for (k, v) in env { e[k] = v }
        p.environment = e
        if let c = cwd { p.currentDirectoryURL = URL(fileURLWithPath: c) }
        let out = Pipe(), err = Pipe(), inp = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = stdin == nil ? FileHandle.nullDevice : inp
        do { try p.run() } catch { return Result(status: 127, stdout: "", stderr: "\(error)") }
        if let s = stdin {
            inp.fileHandleForWriting.write(Data(s.utf8))
            try? inp.fileHandleForWriting.close()
        }
        // Read both pipes concurrently so a chatty child cannot block.
        var outData = Data(), errData = Data()
        let g = DispatchGroup()
        g.enter(); DispatchQueue.global().async { outData = out.fileHandleForReading.readDataToEndOfFile(); g.leave() }
        g.enter(); DispatchQueue.global().async { errData = err.fileHandleForReading.readDataToEndOfFile(); g.leave() }
        let deadline = Date().addingTimeInterval(timeout)
        while p.isRunning && Date() < deadline { usleep(10_000) }
        if p.isRunning { p.terminate(); usleep(200_000); if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        g.wait()
        p.waitUntilExit()
        return Result(status: p.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }

    /// Runs through `bash -c`.
    @discardableResult
    static func sh(_ script: String, env: [String: String] = [:], timeout: Double = 300) -> Result {
        run(["/bin/bash", "-c", script], env: env, timeout: timeout)
    }

    static func pv(_ args: [String], stdin: String? = nil, env: [String: String] = [:], timeout: Double = 120) -> Result {
        run([binary] + args, stdin: stdin, env: env, timeout: timeout)
    }

    static func isMounted(_ path: String) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
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
        root = NSTemporaryDirectory() + "\(name)-\(UUID().uuidString.prefix(8))"
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
        guard let e = fm.enumerator(atPath: dir) else { return ["cannot scan \(dir)"] }
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
            let x = Harness.run(["getfattr", "-d", "-m", "-", "--absolute-names", path], timeout: 10).stdout
            for n in needles where x.contains(n) { hits.append("xattr: \(rel) ~ \(n)") }
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
