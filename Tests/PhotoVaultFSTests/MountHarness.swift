import Foundation
import XCTest
@testable import PhotoVaultFS

/// Mounts a `VaultFileSystem` in this test process, serves it on a background thread, and
/// drives it with real command-line tools.
final class MountHarness {
    let base: String
    let backing: String
    let mountpoint: String
    let fs: VaultFileSystem
    private var thread: Thread?
    private let done = DispatchSemaphore(value: 0)
    let logLines = LogSink()

    final class LogSink: @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [String] = []
        func append(_ s: String) { lock.lock(); lines.append(s); lock.unlock() }
        var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
    }

    /// `make` builds the filesystem for (backing dir, options, log).
    init(options: (String) -> MountOptions = { MountOptions(mountpoint: $0) },
         prepare: (String) throws -> Void = { _ in },
         make: (String, MountOptions, @escaping @Sendable (String) -> Void) throws -> VaultFileSystem) throws {
        // In /tmp itself, not NSTemporaryDirectory(): TMPDIR may be scripts/test.sh's own, removed at the end.
        base = "/tmp/pvfs-" + UUID().uuidString
        backing = base + "/backing"
        mountpoint = base + "/mnt"
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        try prepare(backing)
        let sink = logLines
        fs = try make(backing, options(mountpoint), { sink.append($0) })
    }

    func start() throws {
        try fs.mount()
        let fs = self.fs, done = self.done
        let t = Thread {
            _ = fs.run()
            done.signal()
        }
        t.start()
        thread = t
        let deadline = Date().addingTimeInterval(10)
        while !MountHarness.mounted(mountpoint) {
            guard Date() < deadline else {
                XCTFail("the mount did not appear in /proc/self/mountinfo")
                return
            }
            usleep(20_000)
        }
    }

    /// Unmounts with fusermount3 -u and waits for `run()` to return.
    @discardableResult
    func stop() -> Bool {
        guard thread != nil else { return true }
        if MountHarness.mounted(mountpoint) {
            MountHarness.sh("fusermount3", "-u", mountpoint)
        }
        var clean = true
        if done.wait(timeout: .now() + 10) == .timedOut {
            clean = false
            MountHarness.sh("fusermount3", "-uz", mountpoint)
            _ = done.wait(timeout: .now() + 10)
        }
        thread = nil
        return clean
    }

    func cleanUp() {
        stop()
        if MountHarness.mounted(mountpoint) { MountHarness.sh("fusermount3", "-uz", mountpoint) }
        try? FileManager.default.removeItem(atPath: base)
    }

    static func mounted(_ path: String) -> Bool {
        // Read to the end: String(contentsOfFile:) stops after the first 4 KB of a /proc file.
        guard let data = FileHandle(forReadingAtPath: "/proc/self/mountinfo")?.readDataToEndOfFile() else { return false }
        let info = String(decoding: data, as: UTF8.self)
        return info.split(separator: "\n").contains { line in
            let f = line.split(separator: " ")
            return f.count > 4 && f[4] == path
        }
    }

    /// Runs a tool; returns (exit status, stdout, stderr).
    @discardableResult
    static func sh(_ args: String...) -> (status: Int32, out: String, err: String) {
        run(args)
    }

    static func run(_ args: [String]) -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = args
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch { return (-1, "", "\(error)") }
        // Drain stderr on another thread so neither pipe can fill up and block the child.
        final class Box: @unchecked Sendable { var data = Data() }
        let e = Box()
        let g = DispatchGroup()
        g.enter()
        DispatchQueue.global().async {
            e.data = err.fileHandleForReading.readDataToEndOfFile()
            g.leave()
        }
        let o = out.fileHandleForReading.readDataToEndOfFile()
        g.wait()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e.data, as: UTF8.self))
    }

    /// Runs a bash snippet with `$M` = mount point and `$B` = backing dir; fails the test on error.
    @discardableResult
    func shell(_ script: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        let r = MountHarness.run(["bash", "-xc", "set -euo pipefail; M='\(mountpoint)'; B='\(backing)'; " + script])
        XCTAssertEqual(r.status, 0, "script failed: \(script)\nstdout: \(r.out)\nstderr: \(r.err)", file: file, line: line)
        return r.out
    }

    /// Exit status of a bash snippet that is expected to fail (stderr returned for checks).
    func shellStatus(_ script: String) -> (status: Int32, err: String) {
        let r = MountHarness.run(["bash", "-c", "M='\(mountpoint)'; B='\(backing)'; " + script])
        return (r.status, r.err)
    }

    /// Every byte under the backing directory (names, contents, link targets, xattrs), for leak checks.
    func backingBytes() -> Data {
        var all = Data()
        let fm = FileManager.default
        guard let e = fm.enumerator(atPath: backing) else { return all }
        while let rel = e.nextObject() as? String {
            all.append(Data(rel.utf8))
            all.append(0)
            let path = backing + "/" + rel
            if let target = try? fm.destinationOfSymbolicLink(atPath: path) {
                all.append(Data(target.utf8))
                continue
            }
            var isDir: ObjCBool = false
            if fm.fileExists(atPath: path, isDirectory: &isDir), !isDir.boolValue,
               let d = fm.contents(atPath: path) {
                all.append(d)
            }
        }
        // The xattr part of a leak check must not pass because getfattr did not run.
        let x = MountHarness.sh("getfattr", "-h", "-R", "-d", "-m", "-", "-e", "text", backing)
        XCTAssertEqual(x.status, 0, "getfattr over the backing tree failed (scripts/deps.sh test installs attr): \(x.err)")
        all.append(Data(x.out.utf8))
        return all
    }
}
