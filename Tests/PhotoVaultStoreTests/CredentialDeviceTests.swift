import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// `--this-device-only` accounts (CREDENTIALS.md, "Device binding"). Another device is
/// simulated by pointing PHOTOVAULT_DEVICE_SECRET at another file.
final class CredentialDeviceTests: CredentialTestCase {
    func testDeviceBoundAccountOpensOnlyWithItsDeviceSecret() throws {
        let rk = try store.add(user: "alice", password: pw("alice-password"), deviceBound: true, parameters: fast)
        let recovery = rk.formatted
        let a = try store.open(user: "alice", password: pw("alice-password"))

        // Another device that has no secret yet: refused, and nothing is created there.
        setDevice("device-b")
        assertThrows(.wrongDevice) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        XCTAssertNotEqual(access(tmp + "/device-b", F_OK), 0)
        // Another device with its own secret: refused too, also for recovery and removal.
        _ = try DeviceSecret.loadOrCreate(at: tmp + "/device-b")
        assertThrows(.wrongDevice) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
        assertThrows(.wrongDevice) { try self.store.resetPassword(user: "alice", recoveryKey: recovery, new: self.pw("new password")) }
        assertThrows(.wrongDevice) { try self.store.remove(user: "alice", password: self.pw("alice-password"), deletePhotos: true) }

        // Back on the right device: works, same keys; wrong password is still a wrong password.
        setDevice("device-a")
        let again = try store.open(user: "alice", password: pw("alice-password"))
        XCTAssertEqual(try fingerprint(again), try fingerprint(a))
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-passwore")) }
        try store.changePassword(user: "alice", old: pw("alice-password"), new: pw("second password"))
        try store.resetPassword(user: "alice", recoveryKey: recovery, new: pw("third password"))
        XCTAssertEqual(try fingerprint(store.open(user: "alice", password: pw("third password"))), try fingerprint(a))
    }

    func testDeviceSecretIDSwappedIntoTheRecordStillFails() throws {
        // Editing the stored device ID to match another device only turns "wrong device"
        // into an authentication failure: the secret itself is mixed into the key.
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: true, parameters: fast)
        let path = layout.accountsDir + "/" + (try recordFiles())[0]
        let other = try DeviceSecret.loadOrCreate(at: tmp + "/device-b")
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as! [String: Any]
        json["deviceID"] = Base64URL.encode(DeviceSecret.id(of: other))
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
        setDevice("device-b")
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("alice-password")) }
    }

    func testUnboundAccountsIgnoreTheDeviceSecret() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        XCTAssertNotEqual(access(tmp + "/device-a", F_OK), 0, "an unbound account must not create a device secret")
        setDevice("device-b")
        _ = try store.open(user: "alice", password: pw("alice-password"))
    }

    func testDeviceSecretFileIsCreatedPrivatelyAndReused() throws {
        setenv(DeviceSecret.pathVariable, tmp + "/conf/photovault/device-secret", 1)
        let s1 = try DeviceSecret.loadOrCreate(at: DeviceSecret.path())
        var st = stat()
        XCTAssertEqual(stat(tmp + "/conf/photovault/device-secret", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertEqual(st.st_size, 32)
        XCTAssertEqual(stat(tmp + "/conf/photovault", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o700)
        let s2 = try DeviceSecret.loadOrCreate(at: DeviceSecret.path())
        XCTAssertEqual(DeviceSecret.id(of: s1), DeviceSecret.id(of: s2))
        // No temporary files left behind.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: tmp + "/conf/photovault"), ["device-secret"])
        // A damaged secret file is an error, not silently replaced.
        XCTAssertEqual(truncate(tmp + "/conf/photovault/device-secret", 16), 0)
        XCTAssertThrowsError(try DeviceSecret.loadOrCreate(at: DeviceSecret.path()))
    }

    /// A FIFO where the device secret belongs is refused at once (not a regular file). It
    /// used to block in open(2) until some writer came: here a helper opens the write end
    /// after 3 s, which is what let the old code return at all.
    func testADeviceSecretThatIsAFifoIsRefusedWithoutWaiting() throws {
        let path = tmp + "/fifo-secret"
        XCTAssertEqual(mkfifo(path, 0o600), 0)
        let unblock = Thread {
            sleep(3)
            let w = open(path, O_WRONLY | O_NONBLOCK)   // ENXIO unless a reader is waiting
            if w >= 0 { close(w) }
        }
        unblock.start()
        let start = Date()
        XCTAssertThrowsError(try DeviceSecret.load(at: path)) {
            XCTAssertEqual(($0 as? StoreError)?.errno, EINVAL, "\($0)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 2, "load waited for a writer of the FIFO")
        while !unblock.isFinished { usleep(50_000) }
    }

    func testDefaultDeviceSecretPath() throws {
        unsetenv(DeviceSecret.pathVariable)
        if geteuid() == 0 {
            XCTAssertEqual(DeviceSecret.path(), "/var/lib/photovault/device-secret")
        } else {
            setenv("XDG_CONFIG_HOME", tmp + "/xdg", 1)
            XCTAssertEqual(DeviceSecret.path(), tmp + "/xdg/photovault/device-secret")
        }
        setDevice("device-a")
        XCTAssertEqual(DeviceSecret.path(), tmp + "/device-a")
    }
}
