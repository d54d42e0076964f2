import Foundation
import XCTest

/// Issue 35, item 1: `unmount`, `lock` and an unmount by another tool end the daemon, keys
/// and all, whatever else keeps a copy of the mount: another mount namespace (any local
/// user's `unshare -Urm`), or a file still open in a lazily unmounted mount. The daemon used
/// to go on serving that copy with every key in memory while `unmount` said it had succeeded,
/// and a new `mount` was refused.
final class HardeningUnmountTests: XCTestCase {
    /// `unshare -Urm sleep 300`: a user and mount namespace of its own, holding a copy of
    /// every mount, `mp` included. Returned once its namespace shows the mount.
    private func namespaceHolder(_ s: Sandbox, _ mp: String) throws -> BackgroundProcess {
        let holder = try BackgroundProcess(["/usr/bin/unshare", "-Urm", "/bin/sleep", "300"],
                                           output: s.root + "/holder-\(UUID().uuidString.prefix(4)).log")
        XCTAssertTrue(Harness.waitUntil(10) {
            ((try? String(contentsOfFile: "/proc/\(holder.pid)/mountinfo", encoding: .utf8)) ?? "").contains(" \(mp) ")
                && ((try? String(contentsOfFile: "/proc/\(holder.pid)/comm", encoding: .utf8)) ?? "") == "sleep\n"
        }, "the holder's namespace does not show \(mp): \(holder.output)")
        return holder
    }

    /// errno of stat(2) on `mp` as the holder's mount namespace sees it (0: it worked).
    private func statErrno(through holder: BackgroundProcess, _ mp: String) -> Int32 {
        var st = stat()
        return stat("/proc/\(holder.pid)/root" + mp, &st) == 0 ? 0 : errno
    }

    /// After the daemon ended: nothing of it is left, and the vault mounts again with its data.
    private func assertEndedAndMountsAgain(_ s: Sandbox, _ mp: String, pid: pid_t, holder: BackgroundProcess?,
                                           file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(Harness.waitUntil(10) { MountProbe.hasEnded(pid) },
                      "the daemon (pid \(pid)) still runs, with the keys", file: file, line: line)
        if let holder {
            // ENOTCONN, or ECONNABORTED where the kernel says the connection was aborted.
            let e = statErrno(through: holder, mp)
            XCTAssertTrue(e == ENOTCONN || e == ECONNABORTED, "the other namespace's copy must be cut off: errno \(e)",
                          file: file, line: line)
        }
        // (Not "no vault mounted": other tests' dead mounts of this user may be listed.)
        let status = s.pv(["status"]).stdout
        XCTAssertFalse(status.contains(mp), status, file: file, line: line)
        s.mounts.removeAll { $0 == mp }
        let again = s.mount(at: (mp as NSString).lastPathComponent)
        XCTAssertEqual(try? String(contentsOfFile: again + "/a.txt", encoding: .utf8), "kept\n", file: file, line: line)
        s.unmount(again)
    }

    func testUnmountEndsTheDaemonWhileAnotherNamespaceHoldsACopy() throws {
        let s = Sandbox("pv-hard-unmount")
        s.initStore()
        let mp = s.mount()
        try "kept\n".write(toFile: mp + "/a.txt", atomically: false, encoding: .utf8)
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let holder = try namespaceHolder(s, mp)
        defer { holder.stop() }
        XCTAssertEqual(statErrno(through: holder, mp), 0, "the copy must work before the unmount")

        let r = s.pv(["unmount", mp], timeout: 30)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr, "")
        assertEndedAndMountsAgain(s, mp, pid: pid, holder: holder)
        XCTAssertTrue(holder.isRunning, "the holder must outlive the daemon")
    }

    func testLockEndsTheDaemonWhileAnotherNamespaceHoldsACopy() throws {
        let s = Sandbox("pv-hard-lock")
        s.initStore()
        let mp = s.mount()
        try "kept\n".write(toFile: mp + "/a.txt", atomically: false, encoding: .utf8)
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let holder = try namespaceHolder(s, mp)
        defer { holder.stop() }

        let r = s.pv(["lock", mp], timeout: 30)
        XCTAssertEqual(r.status, 0, r.stderr)
        assertEndedAndMountsAgain(s, mp, pid: pid, holder: holder)
    }

    /// `umount -l` (or `fusermount3 -uz`) by another tool while a file is open in the vault:
    /// the mount leaves the namespace, the open file keeps it alive, and the daemon with it.
    func testALazyUnmountByAnotherToolEndsTheDaemon() throws {
        let s = Sandbox("pv-hard-lazy")
        s.initStore()
        let mp = s.mount()
        try "kept\n".write(toFile: mp + "/a.txt", atomically: false, encoding: .utf8)
        let pid = try XCTUnwrap(MountProbe.daemonPID(s, mp))
        let reader = try BackgroundProcess(["/bin/bash", "-c", "exec 3<\(Sandbox.quote(mp + "/a.txt")); echo open; exec sleep 300"],
                                           output: s.root + "/reader.log")
        defer { reader.stop() }
        XCTAssertTrue(Harness.waitUntil(10) { reader.output.contains("open") }, reader.output)

        let umount = Harness.run(["/bin/umount", "-l", mp], timeout: 10)
        XCTAssertEqual(umount.status, 0, umount.stderr)
        XCTAssertTrue(reader.isRunning)
        assertEndedAndMountsAgain(s, mp, pid: pid, holder: nil)
        // What the open file still reaches is cut off too.
        let fd = "/proc/\(reader.pid)/fd/3"
        XCTAssertNil(try? String(contentsOfFile: fd, encoding: .utf8), "the open file must no longer read")
    }
}
