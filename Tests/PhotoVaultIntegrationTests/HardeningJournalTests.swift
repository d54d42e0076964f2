import Foundation
import XCTest

/// Issue 35, "also check": what the background daemon sends to syslog (the journal, kept on
/// disk) names no file and holds no password or user name, as README's security section
/// promises. The daemon runs in a mount namespace whose /dev/log is this test's socket.
final class HardeningJournalTests: XCTestCase {
    func testTheDaemonsLogNamesNoFileAndHoldsNoPassword() throws {
        XCTAssertEqual(getuid(), 0, "this test needs root for a mount namespace with its own /dev")
        let sb = Sandbox("pv-hard-journal")
        sb.initStore()
        let secretName = "Holiday-\(UUID().uuidString.prefix(8))"
        let socket = sb.root + "/log.sock"
        // A datagram socket, as syslog(3) writes to first; each datagram is one message.
        let listener = try BackgroundProcess(["/usr/bin/python3", "-c", """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(sys.argv[1])
            print("ready", flush=True)
            while True:
                print(s.recv(65536).decode("utf-8", "replace").replace("\\n", " "), flush=True)
            """, socket], output: sb.root + "/log.txt")
        defer { listener.stop() }
        XCTAssertTrue(Harness.waitUntil(10) { listener.output.contains("ready") }, listener.output)
        let q = Sandbox.quote
        let mp = sb.root + "/mnt"
        XCTAssertEqual(mkdir(mp, 0o700), 0)
        let env = sb.env.map { "\($0.key)=\(q($0.value))" }.joined(separator: " ")
        let pv = "env \(env) \(q(Harness.binary))"
        // A /dev of its own: the device nodes photovault needs, and /dev/log bound to the socket.
        let script = """
            set -u
            mount -t tmpfs -o mode=755 dev /dev
            mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/urandom c 1 9
            mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/fuse c 10 229
            touch /dev/log && mount --bind \(q(socket)) /dev/log
            \(pv) mount \(q(mp)) --store \(q(sb.store)) --user alice --passfile \(q(sb.passfile)) --no-dbus || exit 1
            mkdir \(q(mp + "/" + secretName)) && echo 'private words' > \(q(mp + "/" + secretName + "/" + secretName + ".jpg"))
            cp \(q(mp + "/" + secretName + "/" + secretName + ".jpg")) \(q(mp + "/" + secretName + "/" + secretName + "-copy.jpg"))
            sync
            # One ciphertext file damaged underneath: reading it gives EIO and a log line.
            f=$(find \(q(sb.store + "/users")) -type f -size +100c ! -name '.pv*' | head -1)
            printf 'XXXX' | dd of="$f" bs=1 seek=80 conv=notrunc status=none
            echo 3 > /proc/sys/vm/drop_caches
            for n in \(q(mp + "/" + secretName))/*; do cat "$n" >/dev/null 2>&1; done
            \(pv) lock \(q(mp)) >/dev/null
            for i in $(seq 1 100); do grep -q \(q(mp)) /proc/self/mountinfo || break; sleep 0.1; done
            echo done
            """
        let r = sb.run("unshare -m --propagation private bash -c \(q(script))", timeout: 120)
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("done"), r.stdout + r.stderr)
        XCTAssertTrue(Harness.waitUntil(10) { listener.output.contains("keys zeroed") }, "no log arrived: \(listener.output)")
        let log = listener.output
        // Tagged, so that `journalctl -t photovault` finds it.
        XCTAssertTrue(log.split(separator: "\n").dropFirst().allSatisfy { $0.contains(" photovault[") }, log)
        XCTAssertTrue(log.contains("failed authentication"), "the damaged file must be logged: \(log)")
        for needle in [secretName, Sandbox.password, "alice", "private words"] {
            XCTAssertFalse(log.contains(needle), "the daemon's log holds '\(needle)': \(log)")
        }
    }
}
