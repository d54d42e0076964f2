import Foundation
import XCTest

/// A store reached over the network or in cloud storage (issue 39, docs/STORAGE.md): sshfs to
/// an sshd on 127.0.0.1 with a key made for the test, and `rclone mount` of a local directory
/// with `--vfs-cache-mode writes`. Nothing leaves the machine. The same workflow as on the
/// drives (StorageDriveTests) runs on each.
final class StorageNetworkTests: XCTestCase {
    /// sshfs: the links it makes give each name its own inode number, so the mount took them
    /// for two files (and fsck reported 'fileIDShared'): `ln` is now EPERM there. A folder
    /// moved over an empty one failed with EPERM (the SFTP server's failure has no errno).
    func testTheWholeWorkflowRunsOverSSHFS() throws {
        try StorageWorkflow.run(.sshfs)
    }

    /// rclone mount: lock files could not be made (O_RDONLY | O_CREAT is EIO there), a new
    /// folder's `.pvdir` read EIO for seconds (rclone loses a file just written in a renamed
    /// directory until its upload is done), and a renamed folder stayed unreadable; folders
    /// are now named before they are filled, and a folder move is EXDEV (mv copies).
    func testTheWholeWorkflowRunsOnAnRcloneMount() throws {
        try StorageWorkflow.run(.rclone)
    }
}

extension Sandbox {
    /// An sshd on a free port of 127.0.0.1, a host key and a user key made here, and the
    /// store's directory mounted from it with sshfs; returns the teardown.
    func storeOverSSH(file: StaticString = #filePath, line: UInt = #line) -> () -> Void {
        let dir = root + "/ssh", qd = Sandbox.quote(dir), qs = Sandbox.quote(store)
        let port = Sandbox.freePort()
        let up = run("""
        set -e
        mkdir -p \(qd)/remote /run/sshd && chmod 0755 /run/sshd
        ssh-keygen -q -t ed25519 -N '' -f \(qd)/host && ssh-keygen -q -t ed25519 -N '' -f \(qd)/user
        cp \(qd)/user.pub \(qd)/authorized_keys
        cat > \(qd)/sshd_config <<EOF
        Port \(port)
        ListenAddress 127.0.0.1
        HostKey \(dir)/host
        AuthorizedKeysFile \(dir)/authorized_keys
        PermitRootLogin prohibit-password
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        UsePAM no
        StrictModes no
        PidFile \(dir)/sshd.pid
        Subsystem sftp internal-sftp
        EOF
        /usr/sbin/sshd -f \(qd)/sshd_config -E \(qd)/sshd.log
        for i in $(seq 100); do [ -s \(qd)/sshd.pid ] && break; sleep 0.05; done
        mkdir \(qs)
        sshfs -o IdentityFile=\(qd)/user,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes,port=\(port) \
          "$(id -un)@127.0.0.1:\(dir)/remote" \(qs)
        """, timeout: 60)
        XCTAssertEqual(up.status, 0, "sshd or sshfs did not start: \(up.stderr)", file: file, line: line)
        XCTAssertTrue(Harness.waitUntil(10) { Harness.isMounted(store) }, "sshfs did not appear", file: file, line: line)
        let pid = (try? String(contentsOfFile: dir + "/sshd.pid", encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        return { [store] in
            _ = Harness.run(["fusermount3", "-u", store], timeout: 30)
            Harness.forceUnmount(store)
            if let p = pid, p > 1 { kill(p, SIGTERM) }
        }
    }

    /// `rclone mount` of a local directory (no remote, no config) at the store's path, with
    /// the write cache people use for photo folders; returns the teardown.
    func storeOnRcloneMount(file: StaticString = #filePath, line: UInt = #line) -> () -> Void {
        let dir = root + "/rclone", qd = Sandbox.quote(dir), qs = Sandbox.quote(store)
        let up = run("""
        set -e
        mkdir -p \(qd)/remote \(qd)/cache \(qs)
        rclone mount \(qd)/remote \(qs) --vfs-cache-mode writes --cache-dir \(qd)/cache --config /dev/null \
          > \(qd)/rclone.log 2>&1 < /dev/null &
        echo $!
        """, timeout: 60)
        XCTAssertEqual(up.status, 0, "rclone did not start: \(up.stderr)", file: file, line: line)
        XCTAssertTrue(Harness.waitUntil(20) { Harness.isMounted(store) }, "the rclone mount did not appear", file: file, line: line)
        let pid = Int32(up.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        return { [store] in
            _ = Harness.run(["fusermount3", "-u", store], timeout: 30)
            Harness.forceUnmount(store)
            if let p = pid, p > 1 {
                kill(p, SIGTERM)
                _ = Harness.waitUntil(10) { kill(p, 0) != 0 }
            }
        }
    }

    /// A TCP port of 127.0.0.1 that nothing listens on now (the kernel's pick).
    static func freePort() -> Int {
        let r = Harness.run(["python3", "-c", "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"])
        return Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 22022
    }
}
