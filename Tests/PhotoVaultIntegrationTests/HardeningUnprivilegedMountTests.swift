import Foundation
import XCTest

/// Issue 35, "also check": a mount made by an ordinary user (not root, a /dev/fuse anyone may
/// open, the setuid fusermount3), as the review could not try. Its daemon keeps its keys in
/// locked memory and cannot be dumped or read through /proc by its own user, and `unmount`
/// works, also with a mount table longer than a page: MountInfoEntry read /proc/self/mountinfo
/// with String(contentsOfFile:), which stops after the first page, and `unmount` said "no
/// vault is mounted" about this live mount.
final class HardeningUnprivilegedMountTests: XCTestCase {
    func testAnOrdinaryUsersMountLocksItsKeysIsNotDumpableAndUnmounts() throws {
        XCTAssertEqual(getuid(), 0, "this test needs root to become another user and to bind a device node")
        XCTAssertTrue(MountAccessTests.ensureTestUser(), "useradd pvtestuser failed")
        let sb = Sandbox("pv-hard-user")
        chmod(sb.root, 0o755)
        let home = sb.root + "/home", mp = sb.root + "/mnt", dev = sb.root + "/fuse"
        // The binary where the user can run it (the build directory may be root's alone).
        let binary = sb.root + "/photovault"
        try FileManager.default.copyItem(atPath: Harness.binary, toPath: binary)
        for d in [home, mp] { XCTAssertEqual(mkdir(d, 0o700), 0) }
        try Sandbox.password.write(toFile: home + "/pass", atomically: false, encoding: .utf8)
        sb.ok("chown -R pvtestuser: \(Sandbox.quote(home)) \(Sandbox.quote(mp)) && chmod 600 \(Sandbox.quote(home + "/pass"))"
              + " && mknod \(Sandbox.quote(dev)) c 10 229 && chmod 666 \(Sandbox.quote(dev))")
        // In a mount namespace of its own: /dev/fuse opened up for everyone, as on a desktop,
        // and 80 more mounts, so that the mount table is longer than a page.
        let q = Sandbox.quote
        let script = """
            set -u
            mount --bind \(q(dev)) /dev/fuse
            mkdir -p \(q(sb.root + "/pad"))
            for i in $(seq 1 80); do mkdir -p \(q(sb.root + "/pad"))/$i && mount -t tmpfs -o size=4k pad \(q(sb.root + "/pad"))/$i; done
            echo "mountinfo=$(wc -c < /proc/self/mountinfo)"
            export PHOTOVAULT_KDF_PROFILE=floor HOME=\(q(home)) XDG_RUNTIME_DIR=\(q(home)) XDG_DATA_HOME=\(q(home + "/data")) XDG_CONFIG_HOME=\(q(home + "/config"))
            U="setpriv --reuid=pvtestuser --regid=pvtestuser --clear-groups"
            PV=\(q(binary))
            $U $PV init --store \(q(home + "/store")) >/dev/null || echo "init failed"
            $U $PV user add alice --store \(q(home + "/store")) --passfile \(q(home + "/pass")) >/dev/null || echo "add failed"
            $U $PV mount \(q(mp)) --store \(q(home + "/store")) --user alice --passfile \(q(home + "/pass")) --no-dbus; echo "mount=$?"
            PID=$($U $PV status | awk -F'\\t' '{print $2}' | sed 's/pid=//')
            echo "pid=$PID"
            echo "uid=$(awk '/^Uid:/ {print $2}' /proc/$PID/status)"
            echo "vmlck=$(awk '/^VmLck:/ {print $2}' /proc/$PID/status)"
            echo "environ-owner=$(stat -c %U /proc/$PID/environ)"
            $U cat /proc/$PID/environ >/dev/null 2>&1; echo "environ-read=$?"
            $U sh -c 'echo kept > \(q(mp + "/a.txt")) && cat \(q(mp + "/a.txt"))' | sed 's/^/content=/'
            $U $PV unmount \(q(mp)); echo "unmount=$?"
            for i in $(seq 1 50); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
            kill -0 $PID 2>/dev/null && { echo "daemon=running"; kill $PID; } || echo "daemon=gone"
            """
        let r = sb.run("unshare -m --propagation private bash -c \(q(script))", timeout: 120)
        var facts: [String: String] = [:]
        for line in r.stdout.split(separator: "\n") {
            if let eq = line.firstIndex(of: "=") { facts[String(line[..<eq])] = String(line[line.index(after: eq)...]) }
        }
        let all = r.stdout + r.stderr
        XCTAssertGreaterThan(Int(facts["mountinfo"] ?? "") ?? 0, 4096, all)
        XCTAssertEqual(facts["mount"], "0", all)
        XCTAssertEqual(facts["uid"], "\(try XCTUnwrap(Self.uid("pvtestuser")))", "the daemon must run as the user: \(all)")
        XCTAssertGreaterThan(Int(facts["vmlck"] ?? "") ?? 0, 0, "the keys must be in locked memory: \(all)")
        XCTAssertEqual(facts["environ-owner"], "root", "a non-dumpable process's /proc files are root's: \(all)")
        XCTAssertNotEqual(facts["environ-read"], "0", "its own user must not read its memory or environment: \(all)")
        XCTAssertEqual(facts["content"], "kept", all)
        XCTAssertEqual(facts["unmount"], "0", all)
        XCTAssertEqual(facts["daemon"], "gone", all)
    }

    static func uid(_ user: String) -> uid_t? {
        guard let pw = getpwnam(user) else { return nil }
        return pw.pointee.pw_uid
    }
}
