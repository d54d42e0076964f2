import Foundation
import XCTest

/// `--on-lock unmount` (the default) with a copy into the vault still running: a
/// `complete-unless-open` file may finish within the grace, a `complete` one may not.
final class LockUnmountTests: XCTestCase {
    static let chunks = 48   // MiB fed into the copy, one per 60 ms: about 3 s of copying

    /// Starts `cp FIFO DEST` with the FIFO fed slowly from `source`, so the copy is certainly
    /// running when the test locks. The script prints `cp=<status>` when cp ends.
    private func startSlowCopy(_ s: Sandbox, source: String, dest: String, pause: Double = 0.06) throws -> BackgroundProcess {
        let fifo = s.root + "/fifo-\(UUID().uuidString.prefix(4))"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let script = """
            ( for i in $(seq 0 \(Self.chunks - 1)); do dd if='\(source)' bs=1M skip=$i count=1 status=none; sleep \(pause); done ) > '\(fifo)' &
            cp '\(fifo)' '\(dest)'
            echo "cp=$?"
            wait
            """
        return try BackgroundProcess(["/bin/bash", "-c", script], output: s.root + "/cp-\(UUID().uuidString.prefix(4)).log")
    }

    private func makeSource(_ s: Sandbox) throws -> (String, Data) {
        let path = s.root + "/source.bin"
        let data = try XCTUnwrap(FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: Self.chunks << 20))
        XCTAssertEqual(data.count, Self.chunks << 20)
        try data.write(to: URL(fileURLWithPath: path))
        return (path, data)
    }

    func testCompleteUnlessOpenCopyFinishesWithinTheGrace() throws {
        let s = Sandbox("lock-grace")
        s.initStore()
        let (source, data) = try makeSource(s)
        let mp = s.mount(extra: ["--lock-grace", "30s"])
        try FileManager.default.createDirectory(atPath: mp + "/open", withIntermediateDirectories: false)
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/open", "complete-unless-open").status, 0)
        try Data("old".utf8).write(to: URL(fileURLWithPath: mp + "/open/old.jpg"))
        try Data("none".utf8).write(to: URL(fileURLWithPath: mp + "/n.jpg"))
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/n.jpg", "none").status, 0)
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))

        let cp = try startSlowCopy(s, source: source, dest: mp + "/open/big.bin")
        XCTAssertTrue(Harness.waitUntil(10) {
            ((try? FileManager.default.attributesOfItem(atPath: mp + "/open/big.bin"))?[.size] as? Int ?? 0) > 1 << 20
        }, "the copy did not start")
        let lock = s.pv(["lock", mp])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertTrue(cp.isRunning, "the copy must still be running when the lock comes")
        // During the grace no new open succeeds, even of a complete-unless-open file.
        // Nor does anything else that reaches a file's content without an open: a file made
        // by mknod, a truncate by path, a class change.
        if Harness.isMounted(mp) {
            let r = Harness.run(["/bin/cat", mp + "/open/old.jpg"], timeout: 10)
            XCTAssertNotEqual(r.status, 0, "a new open succeeded during the grace")
            // Refused as locked (EACCES), not failing for another reason (a missing tool or file, EIO).
            XCTAssertTrue(r.stderr.contains("Permission denied"), "open during the grace: \(r.stderr)")
            let probes: [(String, [String])] = [
                ("mknod", ["/usr/bin/python3", "-c", "import os, stat, sys; os.mknod(sys.argv[1], 0o600 | stat.S_IFREG)",
                           mp + "/open/made.jpg"]),
                ("truncate", ["/usr/bin/truncate", "-s", "0", mp + "/open/old.jpg"]),
                ("class change", ["/usr/bin/setfattr", "-n", "user.photovault.class", "-v", "none", mp + "/open/old.jpg"]),
                // A `none` file keeps its key through the lock: only the grace rule stops these.
                // (truncate(1) opens the file; truncate(2) by path does not.)
                ("truncate by path of a none file", ["/usr/bin/python3", "-c", "import os, sys; os.truncate(sys.argv[1], 0)",
                                                     mp + "/n.jpg"]),
                ("class change of a none file", ["/usr/bin/setfattr", "-n", "user.photovault.class", "-v", "until-first-auth",
                                                 mp + "/n.jpg"]),
            ]
            for (label, argv) in probes {
                let p = Harness.run(argv, timeout: 10)
                XCTAssertNotEqual(p.status, 0, "\(label) succeeded during the grace")
                XCTAssertTrue(p.stderr.contains("Permission denied"), "\(label) during the grace: \(p.stderr)")
            }
            XCTAssertTrue(cp.isRunning, "the probes must run inside the grace")
        }
        XCTAssertEqual(cp.wait(30), 0, cp.output)
        XCTAssertTrue(cp.output.contains("cp=0"), "cp failed during the grace: \(cp.output)")
        XCTAssertTrue(Harness.waitUntil(10) { !Harness.isMounted(mp) }, "not unmounted after the copy finished")
        XCTAssertTrue(Harness.waitUntil(5) { !MountProbe.isAlive(pid) })

        let mp2 = s.mount(at: "again")
        let copied = try Data(contentsOf: URL(fileURLWithPath: mp2 + "/open/big.bin"))
        XCTAssertEqual(copied.count, data.count)
        XCTAssertTrue(copied == data, "the copy finished in the grace must be identical")
        XCTAssertEqual(try? String(contentsOfFile: mp2 + "/open/old.jpg", encoding: .utf8), "old")
        XCTAssertEqual(ClassAttributeTests.getClass(mp2 + "/open/old.jpg"), "complete-unless-open")
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp2 + "/open/made.jpg"))
        XCTAssertEqual(try? String(contentsOfFile: mp2 + "/n.jpg", encoding: .utf8), "none")
        XCTAssertEqual(ClassAttributeTests.getClass(mp2 + "/n.jpg"), "none")
        s.unmount(mp2)
    }

    /// A suspend during the grace period ends it within the sleep delay (3 s), as a suspend
    /// that starts the lock does: the machine must not sleep with the vault mounted while a
    /// long `complete-unless-open` copy keeps the grace going.
    func testSuspendDuringTheGraceEndsItWithinTheSleepDelay() throws {
        let s = Sandbox("lock-grace-sleep")
        s.initStore()
        let rig = try DBusRig(directory: s.root + "/bus")
        defer { rig.stop() }
        let (source, _) = try makeSource(s)
        let mp = LockSourceTests.mountWatched(s, rig, name: "mnt", extra: ["--lock-grace", "60s"])
        try FileManager.default.createDirectory(atPath: mp + "/open", withIntermediateDirectories: false)
        XCTAssertEqual(ClassAttributeTests.setClass(mp + "/open", "complete-unless-open").status, 0)
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))

        // About 24 s of copying: far longer than the sleep delay, far shorter than the grace.
        let cp = try startSlowCopy(s, source: source, dest: mp + "/open/big.bin", pause: 0.5)
        XCTAssertTrue(Harness.waitUntil(10) {
            ((try? FileManager.default.attributesOfItem(atPath: mp + "/open/big.bin"))?[.size] as? Int ?? 0) > 1 << 20
        }, "the copy did not start")
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(s, mp), "grace")
        usleep(500_000)
        XCTAssertTrue(Harness.isMounted(mp), "the grace must keep the mount while the copy runs")
        let t0 = Date()
        rig.prepareForSleep(true)
        XCTAssertTrue(Harness.waitUntil(6) { !Harness.isMounted(mp) },
                      "still mounted 6 s after PrepareForSleep during the grace")
        let ms = Date().timeIntervalSince(t0) * 1000
        print(String(format: "suspend during the grace: unmounted %.0f ms after PrepareForSleep", ms))
        XCTAssertTrue(Harness.waitUntil(10) { cp.output.contains("cp=") }, "cp hangs after the unmount")
        XCTAssertFalse(cp.output.contains("cp=0"), "the copy cannot have finished: \(cp.output)")
        cp.stop()   // the slow feeder behind the FIFO has nothing left to feed
        XCTAssertTrue(Harness.waitUntil(5) { !MountProbe.isAlive(pid) })
    }

    func testCompleteCopyFailsAndLeavesNoCompleteLookingFile() throws {
        let s = Sandbox("lock-nograce")
        s.initStore()
        let (source, data) = try makeSource(s)
        let mp = s.mount(extra: ["--lock-grace", "30s"])
        XCTAssertEqual(ClassAttributeTests.getClass(mp), "complete")
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))

        let cp = try startSlowCopy(s, source: source, dest: mp + "/big.bin")
        XCTAssertTrue(Harness.waitUntil(10) {
            ((try? FileManager.default.attributesOfItem(atPath: mp + "/big.bin"))?[.size] as? Int ?? 0) > 1 << 20
        }, "the copy did not start")
        let t0 = Date()
        XCTAssertEqual(s.pv(["lock", mp]).status, 0)
        XCTAssertTrue(cp.isRunning, "the copy must still be running when the lock comes")
        // No complete-unless-open writer: the mount goes at once, without waiting for the grace.
        XCTAssertTrue(Harness.waitUntil(10) { !Harness.isMounted(mp) })
        print(String(format: "complete copy: unmounted %.0f ms after the lock", Date().timeIntervalSince(t0) * 1000))
        XCTAssertNotNil(cp.wait(30), "cp hangs after the unmount")
        XCTAssertFalse(cp.output.contains("cp=0"), "cp of a complete file must fail after the lock: \(cp.output)")
        XCTAssertTrue(Harness.waitUntil(5) { !MountProbe.isAlive(pid) })

        let mp2 = s.mount(at: "again")
        let path = mp2 + "/big.bin"
        if FileManager.default.fileExists(atPath: path) {
            let copied = try? Data(contentsOf: URL(fileURLWithPath: path))
            XCTAssertFalse(copied == data, "an interrupted complete copy must not look complete")
            let size = (try FileManager.default.attributesOfItem(atPath: path))[.size] as? Int ?? -1
            print("complete copy after the lock: \(size) of \(data.count) bytes, readable: \(copied != nil)")
            XCTAssertTrue(size != data.count || copied == nil, "size \(size) equals the source's")
        }
        s.unmount(mp2)
    }
}
