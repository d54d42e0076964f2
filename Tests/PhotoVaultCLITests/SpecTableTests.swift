import XCTest
import PhotoVaultStore
import PhotoVaultCrypto
@testable import PhotoVaultCLI

/// The command table is an interface other tools script against; these keep it coherent.
final class SpecTableTests: XCTestCase {
    func testEveryCommandHasAHandlerAndViceVersa() {
        let names = Set(CommandSpec.all.map(\.name))
        XCTAssertEqual(names.count, CommandSpec.all.count, "duplicate command")
        XCTAssertEqual(names, Set(Dispatch.handlers.keys))
        XCTAssertEqual(names, ["init", "user add", "user passwd", "user reset-password", "user remove", "user list",
                               "user check", "mount", "unmount", "lock", "unlock", "status", "class set",
                               "class get", "class list", "import", "export", "fsck",
                               "user add-login", "user remove-login", "pam"])
    }

    func testOptionsAreUniqueAndMeanOneThingEverywhere() {
        var takesValue: [String: Bool] = [:]
        for c in CommandSpec.all {
            let longs = c.allOptions.map(\.long) + ["help"]
            XCTAssertEqual(Set(longs).count, longs.count, "duplicate option in \(c.name)")
            let shorts = c.allOptions.compactMap(\.short) + ["h"]
            XCTAssertEqual(Set(shorts).count, shorts.count, "duplicate short option in \(c.name)")
            XCTAssertLessThanOrEqual(c.arguments.filter(\.variadic).count, 1, c.name)
            for o in c.allOptions {
                if let t = takesValue[o.long] { XCTAssertEqual(t, o.takesValue, "--\(o.long) differs in \(c.name)") }
                takesValue[o.long] = o.takesValue
            }
            XCTAssertFalse(c.summary.isEmpty)
            XCTAssertFalse(c.examples.isEmpty, "\(c.name) needs an example")
            for e in c.examples { XCTAssertTrue(e.command.contains("photovault \(c.name)"), e.command) }
        }
    }

    func testPasswordOptionsOnCommandsThatNeedAPassword() {
        for name in ["user add", "user passwd", "user remove", "mount", "unlock", "class set", "class get",
                     "class list", "import", "export", "fsck"] {
            let c = ArgumentParser().command(name.split(separator: " ").map(String.init))!
            for o in ["passfile", "password-stdin", "extpass"] {
                XCTAssertTrue(c.options.contains { $0.long == o }, "\(name) lacks --\(o)")
            }
        }
    }

    func testClassChoicesMatchProtectionClassNames() {
        XCTAssertEqual(CommandSpec.classNames, ProtectionClass.allCases.map(\.name))
    }

    func testExitCodesAreDistinctAndCoverEveryError() {
        let codes = ExitCodes.table.map(\.code)
        XCTAssertEqual(Set(codes).count, codes.count, "an exit code appears twice")
        let storeErrors: [StoreError] = [
            .emptyUsername, .emptyPassword, .passwordTooShort(minimum: 8), .accountExists, .noSuchAccount,
            .wrongPassword, .storeNotInitialised(path: "/s"), .storeExists(path: "/s"), .corruptRecord("x"),
            .corruptStore("x"), .unknownVersion(found: 9, supported: 1),
            .unknownVersionOf(path: "/a", found: 9, supported: 1), .weakKDFParameters, .weakStoreKDFParameters(field: "kdfFloor"), .storeBusy, .accountChangedMeanwhile,
            .wrongDevice, .integrity(path: "/a", detail: "tag"), .locked, .notFound("/a"), .exists("/a"),
            .noSpace, .destinationFull("/d"), .io(errno: EIO, context: "read"), .invalidArgument("bad"),
            .notConfirmedOnDisk(done: "done", afterCrash: "undone", errno: EIO),
            .attemptNotCounted(errno: ENOSPC), .attemptNotCounted(errno: EIO), .untrustedStore("x"),
        ]
        for e in storeErrors {
            XCTAssertNotNil(ExitCodes.meaning(of: e.exitCode), "StoreError \(e) -> \(e.exitCode) not in the table")
        }
        // A password attempt that a full store cannot count has the full-disk code.
        XCTAssertEqual(StoreError.attemptNotCounted(errno: ENOSPC).exitCode, StoreError.noSpace.exitCode)
        XCTAssertEqual(StoreError.attemptNotCounted(errno: EDQUOT).exitCode, StoreError.noSpace.exitCode)
        let cliErrors: [CLIError] = [
            .notImplemented("x"), .noFuseDevice(ENOENT), .noFuseDevice(EACCES), .notFuseDevice("a regular file"), .mountpointNotEmptyDirectory("/m"), .alreadyMounted("/m"),
            .mountBusy("/m"), .notMounted("/m"), .notMountedToUnlock("/m"), .fsckFoundDamage(problems: 2), .fsckRepaired(problems: 2), .noSuchAccount(user: "u", store: "/s"), .allowOtherNotPermitted(conf: "/etc/fuse.conf"), .fsckRepairIncomplete(problems: 2, leftInPlace: 1), .passwordsDoNotMatch,
            .noTerminal, .passwordTooLong(maximum: 1), .cannotReadPassword(source: "f", errno: ENOENT),
            .externalPasswordCommandFailed(status: 1), .failed("x"), .deadMount("/m", fsType: "fuse.photovault"),
            .deadMount("/m", fsType: "fuse.sshfs"), .vaultMounted(user: "u", mountpoint: "/m", pid: 1),
            .vaultAlreadyMounted(mountpoint: "/m", pid: 1), .vaultAlreadyMounted(mountpoint: nil, pid: nil),
            .repairWhileMounted(user: "u", mountpoint: "/m", pid: nil), .repairWhileMounted(user: "u", mountpoint: nil, pid: 1),
            .removeWhileMounted(user: "u", mountpoint: "/m", pid: 1, deletePhotos: true),
            .vaultLockedAtMount(user: "u", mountpoint: "/m"),
        ]
        for e in cliErrors { XCTAssertNotNil(ExitCodes.meaning(of: e.exitCode), "\(e)") }
        XCTAssertEqual(CLIError.noFuseDevice(ENOENT).exitCode, 14)
        XCTAssertEqual(CLIError.notFuseDevice("a directory").exitCode, 14)
        XCTAssertEqual(CLIError.mountpointNotEmptyDirectory("/m").exitCode, 15)
        XCTAssertEqual(CLIError.alreadyMounted("/m").exitCode, 16)
        XCTAssertEqual(CLIError.vaultAlreadyMounted(mountpoint: nil, pid: 1).exitCode, 16)
        XCTAssertEqual(CLIError.vaultClosing(mountpoint: "/m", pid: 1).exitCode, 16)
        XCTAssertEqual(CLIError.mountBusy("/m").exitCode, 17)
        XCTAssertEqual(CLIError.notMounted("/m").exitCode, 18)
        XCTAssertEqual(CLIError.fsckFoundDamage(problems: 1).exitCode, 21)
        XCTAssertEqual(CLIError.fsckRepairIncomplete(problems: 2, leftInPlace: 1).exitCode, 29)
        XCTAssertEqual(CLIError.fsckRepaired(problems: 2).exitCode, 32)
        XCTAssertEqual(CLIError.noSuchAccount(user: "u", store: "/s").exitCode, 4)
        XCTAssertEqual(CLIError.allowOtherNotPermitted(conf: "/etc/fuse.conf").exitCode, 2)
        XCTAssertEqual(CLIError.notMountedToUnlock("/m").exitCode, 18)
        XCTAssertEqual(CLIError.deadMount("/m", fsType: "fuse.photovault").exitCode, 25)
        // Every way a password cannot be read has one code of its own (it used to be 1, "other failure").
        for e: CLIError in [.passwordsDoNotMatch, .noTerminal, .passwordTooLong(maximum: 1),
                            .cannotReadPassword(source: "f", errno: ENOENT), .externalPasswordCommandFailed(status: 1)] {
            XCTAssertEqual(e.exitCode, 27, "\(e)")
        }
        // A mount holding the tree is a busy store, with the same code as StoreError.storeBusy.
        XCTAssertEqual(CLIError.vaultMounted(user: "u", mountpoint: nil, pid: 1).exitCode, StoreError.storeBusy.exitCode)
        XCTAssertEqual(CLIError.repairWhileMounted(user: "u", mountpoint: "/m", pid: nil).exitCode, StoreError.storeBusy.exitCode)
        XCTAssertEqual(CLIError.removeWhileMounted(user: "u", mountpoint: "/m", pid: 1, deletePhotos: true).exitCode, StoreError.storeBusy.exitCode)
        XCTAssertEqual(CLIError.vaultLockedAtMount(user: "u", mountpoint: "/m").exitCode, StoreError.locked.exitCode)
        // The CLI's own codes must not collide with a StoreError code of another meaning.
        let cliOwn: Set<Int32> = [14, 15, 16, 17, 18, 21, 25]
        XCTAssertTrue(cliOwn.isDisjoint(with: storeErrors.map(\.exitCode)))
    }

    func testDefaults() {
        XCTAssertEqual(Defaults.storePath(environment: ["PHOTOVAULT_STORE": "/v", "HOME": "/h"]), "/v")
        XCTAssertEqual(Defaults.storePath(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]), "/x/photovault/store")
        XCTAssertEqual(Defaults.storePath(environment: ["HOME": "/h"]), "/h/.local/share/photovault/store")
        XCTAssertEqual(Defaults.storePath(environment: ["XDG_DATA_HOME": "rel", "HOME": "/h"]), "/h/.local/share/photovault/store")
        XCTAssertEqual(Defaults.storePath(environment: ["PHOTOVAULT_STORE": "", "XDG_DATA_HOME": "", "HOME": "/h"]),
                       "/h/.local/share/photovault/store")
        XCTAssertEqual(Defaults.mountpoint(environment: ["HOME": "/h"]), "/h/PhotoVault")
        XCTAssertEqual(Defaults.parseDuration("90"), 90)
        XCTAssertEqual(Defaults.parseDuration("60s"), 60)
        XCTAssertEqual(Defaults.parseDuration("10m"), 600)
        XCTAssertEqual(Defaults.parseDuration("1.5h"), 5400)
        XCTAssertNil(Defaults.parseDuration("m"))
        XCTAssertNil(Defaults.parseDuration("5x"))
        XCTAssertNil(Defaults.parseDuration("-5s"))
    }

    func testLoginNameIsThePasswdEntryOfTheRealUser() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/id")
        p.arguments = ["-un"]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        p.waitUntilExit()
        let expected = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Defaults.loginName(), expected)
        let parsed = try ArgumentParser().parse(["user", "check"])
        guard case .run(_, let args) = parsed else { return XCTFail("not a command") }
        XCTAssertEqual(try args.userName(), expected)
    }

    func testDurationOptionRejectsGarbage() throws {
        guard case .run(_, let args) = try ArgumentParser().parse(["mount", "--idle", "ten"]) else {
            return XCTFail("not a command")
        }
        XCTAssertThrowsError(try args.duration("idle")) { e in
            XCTAssertEqual((e as? UsageError)?.command, ["mount"])
        }
        XCTAssertNil(try args.duration("lock-grace"))
    }
}
