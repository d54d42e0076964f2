import XCTest
@testable import PhotoVaultSession

/// mount.fuse3's command line turned into `photovault mount` (the mounts themselves are in
/// PhotoVaultIntegrationTests/SessionFstabTests).
final class MountHelperFormTests: XCTestCase {
    func testTheFormMountFuse3RunsBecomesMount() throws {
        let line = try MountHelperForm.commandLine(for: [
            "/srv/store", "/mnt/v", "-o",
            "ro,passfile=/etc/pw,idle=10m,on-lock=stay,allow_other,extpass=cat /x,user=bob,exec,suid,dev,dev,suid"])
        XCTAssertEqual(line, ["mount", "--store", "/srv/store", "--passfile", "/etc/pw", "--idle", "10m",
                              "--on-lock", "stay", "--allow-other", "--extpass", "cat /x", "--user", "bob",
                              "--read-only", "--", "/mnt/v"])
    }

    func testGenericWordsAreIgnoredAndTheLastOfRoAndRwWins() throws {
        XCTAssertEqual(try MountHelperForm.commandLine(for: ["./s", "/m", "-o", "ro,noauto,nofail,_netdev",
                                                             "-orw,x-systemd.automount,defaults,comment=x"]),
                       ["mount", "--store", "./s", "--", "/m"])
        XCTAssertEqual(try MountHelperForm.commandLine(for: ["/s", "/m"]), ["mount", "--store", "/s", "--", "/m"])
    }

    func testAFirstWordWithoutASlashIsACommand() throws {
        XCTAssertNil(try MountHelperForm.commandLine(for: ["mount", "/m", "-o", "ro"]))
        XCTAssertNil(try MountHelperForm.commandLine(for: ["user", "add"]))
        XCTAssertNil(try MountHelperForm.commandLine(for: ["--store", "/s", "mount"]))
        XCTAssertNil(try MountHelperForm.commandLine(for: []))
    }

    func testMalformedLinesAreRefused() {
        XCTAssertThrowsError(try MountHelperForm.commandLine(for: ["/s"])) { XCTAssertEqual($0 as? SessionError, .helperUsage) }
        XCTAssertThrowsError(try MountHelperForm.commandLine(for: ["/s", "/m", "-o"]))
        XCTAssertThrowsError(try MountHelperForm.commandLine(for: ["/s", "/m", "-f"]))
        XCTAssertThrowsError(try MountHelperForm.commandLine(for: ["/s", "/m", "-o", "sync"])) {
            XCTAssertEqual($0 as? SessionError, .unknownMountOption("sync"))
        }
        XCTAssertThrowsError(try MountHelperForm.commandLine(for: ["/s", "/m", "-o", "user="])) {
            XCTAssertEqual($0 as? SessionError, .mountOptionNeedsValue("user"))
        }
        XCTAssertThrowsError(try MountHelperForm.commandLine(for: ["/s", "/m", "-o", "ro=1"])) {
            XCTAssertEqual($0 as? SessionError, .mountOptionTakesNoValue("ro"))
        }
    }
}
