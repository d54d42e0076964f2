import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// Shared fixture of the credential tests: a fresh store in a temporary directory whose
/// record-name KDF is cheap, accounts at `Argon2Parameters.floor`, and a device secret path
/// inside the temporary directory (never the real /var/lib/photovault).
class CredentialTestCase: XCTestCase {
    var tmp = ""
    var layout: StoreLayout!
    var store: AccountStore!
    let fast = Argon2Parameters.floor

    override func setUpWithError() throws {
        var template = Array("/tmp/pv-cred-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw StoreError.posix("mkdtemp") }
        tmp = String(cString: p)
        layout = try makeStore("store")
        store = try AccountStore(layout: layout)
        setDevice("device-a")
    }

    override func tearDownWithError() throws {
        unsetenv(DeviceSecret.pathVariable)
        defer { try? TreeRemoval.removeRecursively(tmp) }
        try assertNoSecretsOnDisk()
    }

    /// Every password this test typed (8+ bytes, so a chance match in random bytes is
    /// negligible) must appear in no file and no file name under the test's directory.
    var typed: Set<String> = []

    func assertNoSecretsOnDisk() throws {
        let needles = typed.filter { $0.utf8.count >= 8 }.map { Data($0.utf8) }
        guard !needles.isEmpty, let e = FileManager.default.enumerator(atPath: tmp) else { return }
        while let rel = e.nextObject() as? String {
            var st = stat()
            guard lstat(tmp + "/" + rel, &st) == 0 else { continue }
            for n in needles { XCTAssertFalse(rel.utf8.count >= n.count && Data(rel.utf8).range(of: n) != nil, "secret in name \(rel)") }
            guard (st.st_mode & S_IFMT) == S_IFREG else { continue }
            let data = try Data(contentsOf: URL(fileURLWithPath: tmp + "/" + rel))
            for n in needles { XCTAssertNil(data.range(of: n), "a typed password is in \(rel)") }
        }
    }

    func makeStore(_ name: String, config: StoreConfig? = nil) throws -> StoreLayout {
        let l = StoreLayout(root: tmp + "/" + name)
        var c = config ?? StoreConfig()
        c.accountNameKDF = .testing
        try l.initialise(config: c)
        return l
    }

    func setDevice(_ name: String) { setenv(DeviceSecret.pathVariable, tmp + "/" + name, 1) }

    func pw(_ s: String) -> SecureBytes {
        typed.insert(s)
        return SecureBytes(copying: Array(s.utf8))
    }

    /// SecureBytes cannot be 0 bytes long (the CLI reports an empty line itself); the empty
    /// password the store can be handed is a wiped one.
    func emptyPassword() -> SecureBytes { let p = pw("x"); p.wipe(); return p }

    /// Fails every fsync of the accounts directory from now to the end of the test.
    func failAccountsDirectorySync() {
        let accounts = OfflineFixture.identity(layout.accountsDir)
        XCTAssertFalse(accounts.isEmpty)
        OfflineFixture.hookFsync(self) { OfflineFixture.identity($0) != accounts }
    }

    func assertThrows(_ expected: StoreError, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
        XCTAssertThrowsError(try body(), file: file, line: line) { e in
            XCTAssertEqual(e as? StoreError, expected, "got \(e)", file: file, line: line)
        }
    }

    func recordFiles(_ l: StoreLayout? = nil) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: (l ?? layout).accountsDir)
            .filter { $0.hasSuffix(".rec") }.sorted()
    }

    /// A fingerprint of every key an account derives: the class B public key, and a test key
    /// wrapped under the `complete` class key and the metadata key.
    func fingerprint(_ a: OpenedAccount) throws -> [UInt8] {
        let k = try a.keyring()
        defer { k.wipeAll() }
        var out = k.classBPublicKey
        for c in [ProtectionClass.complete, .untilFirstAuth, .none] {
            out += try k.withClassKey(c) { key in key.withUnsafeBytes { KeyedHash.hash(Array($0)) } }
        }
        out += k.metadataKey.withUnsafeBytes { KeyedHash.hash(Array($0)) }
        return out
    }
}

final class CredentialAccountTests: CredentialTestCase {
    func testAddOpenAndTreeCreated() throws {
        let rk = try store.add(user: "alice", password: pw("correct horse"), deviceBound: false, parameters: fast)
        defer { rk.wipe() }
        XCTAssertEqual(try store.count(), 1)
        XCTAssertTrue(try store.exists(user: "alice"))
        XCTAssertFalse(try store.exists(user: "bob"))
        let a = try store.open(user: "alice", password: pw("correct horse"))
        defer { a.wipe() }
        XCTAssertEqual(a.treeID.count, 16)
        XCTAssertEqual(a.treePath, layout.userTree(a.treeID))
        var st = stat()
        XCTAssertEqual(stat(a.treePath, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFDIR)
        XCTAssertEqual(st.st_mode & 0o777, 0o700)
        // The tree's root directory info was written by UserTree.initialiseRoot.
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: a.treePath).isEmpty)
        // Record file: 0600, named by 64 hex digits.
        let recs = try recordFiles()
        XCTAssertEqual(recs.count, 1)
        XCTAssertTrue(AccountName.isRecordFileName(recs[0]))
        XCTAssertEqual(stat(layout.accountsDir + "/" + recs[0], &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
    }

    func testTwoUsersHaveSeparateKeysAndPasswords() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        _ = try store.add(user: "bob", password: pw("bob-password!"), deviceBound: false, parameters: fast)
        XCTAssertEqual(try store.count(), 2)
        let a = try store.open(user: "alice", password: pw("alice-password"))
        let b = try store.open(user: "bob", password: pw("bob-password!"))
        XCTAssertNotEqual(a.treeID, b.treeID)
        XCTAssertNotEqual(try fingerprint(a), try fingerprint(b))
        XCTAssertFalse(a.masterKey.withUnsafeBytes { x in b.masterKey.withUnsafeBytes { constantTimeEqual(x, $0) } })
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("bob-password!")) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "bob", password: self.pw("alice-password")) }
        // Opening again gives the same keys.
        let a2 = try store.open(user: "alice", password: pw("alice-password"))
        XCTAssertEqual(try fingerprint(a), try fingerprint(a2))
        XCTAssertEqual(a.treeID, a2.treeID)
    }

    func testWrongPassword() throws {
        _ = try store.add(user: "alice", password: pw("correct horse"), deviceBound: false, parameters: fast)
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("correct hors")) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("Correct horse")) }
    }

    func testArgumentErrors() throws {
        assertThrows(.emptyUsername) { _ = try self.store.add(user: "", password: self.pw("long enough"), deviceBound: false, parameters: self.fast) }
        assertThrows(.emptyPassword) { _ = try self.store.add(user: "alice", password: self.emptyPassword(), deviceBound: false, parameters: self.fast) }
        assertThrows(.passwordTooShort(minimum: 8)) { _ = try self.store.add(user: "alice", password: self.pw("1234567"), deviceBound: false, parameters: self.fast) }
        // Code points, not bytes: 7 two-byte characters are too short, 8 are enough.
        assertThrows(.passwordTooShort(minimum: 8)) { _ = try self.store.add(user: "alice", password: self.pw("ééééééé"), deviceBound: false, parameters: self.fast) }
        _ = try store.add(user: "alice", password: pw("éééééééé"), deviceBound: false, parameters: fast)
        assertThrows(.emptyUsername) { _ = try self.store.open(user: "", password: self.pw("whatever1")) }
        assertThrows(.emptyPassword) { _ = try self.store.open(user: "alice", password: self.emptyPassword()) }
        assertThrows(.emptyPassword) { try self.store.changePassword(user: "alice", old: self.pw("éééééééé"), new: self.emptyPassword()) }
        assertThrows(.emptyUsername) { _ = try self.store.exists(user: "") }
        // Cost below the floor is refused when creating, too.
        assertThrows(.weakKDFParameters) { _ = try self.store.add(user: "carol", password: self.pw("long enough"), deviceBound: false, parameters: .testing) }
        XCTAssertEqual(try store.count(), 1)
    }

    /// A new name that is only white space, begins or ends with it, or holds a control
    /// character is refused before hashing (they used to become accounts that 'alice' typed
    /// plainly never finds, or that put escape sequences on the terminal). Existing accounts
    /// with such names still open: only new names are judged.
    func testNewUserNamesWithEdgeWhiteSpaceOrControlCharactersAreRefused() throws {
        for (name, message) in [("   ", "the user name is only white space"),
                                (" alice", "the user name begins or ends with white space"),
                                ("alice\u{3000}", "the user name begins or ends with white space"),
                                ("al\nice", "the user name contains a control character (a tab, a newline, an escape)"),
                                ("\u{1B}[31malice", "the user name contains a control character (a tab, a newline, an escape)")] {
            assertThrows(.invalidArgument(message)) {
                _ = try self.store.add(user: name, password: self.pw("long enough"), deviceBound: false, parameters: self.fast)
            }
        }
        XCTAssertEqual(try store.count(), 0)
        _ = try store.add(user: "Anna Maria", password: pw("long enough"), deviceBound: false, parameters: fast)
        XCTAssertTrue(try store.exists(user: "Anna Maria"))
        XCTAssertFalse(try store.exists(user: " alice"))   // asking is fine, it just is no account
    }

    func testAccountExistsAndNoSuchAccount() throws {
        _ = try store.add(user: "alice", password: pw("password-1"), deviceBound: false, parameters: fast)
        assertThrows(.accountExists) { _ = try self.store.add(user: "alice", password: self.pw("password-2"), deviceBound: false, parameters: self.fast) }
        assertThrows(.noSuchAccount) { _ = try self.store.open(user: "bob", password: self.pw("password-1")) }
        assertThrows(.noSuchAccount) { try self.store.changePassword(user: "bob", old: self.pw("password-1"), new: self.pw("password-2")) }
        assertThrows(.noSuchAccount) { try self.store.remove(user: "bob", password: self.pw("password-1"), deletePhotos: true) }
        // The failed second add left no extra tree behind.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.usersDir).count, 1)
    }

    func testUserNamesAreNormalisedButCaseSensitive() throws {
        _ = try store.add(user: "Jos\u{E9}", password: pw("password-1"), deviceBound: false, parameters: fast)
        XCTAssertTrue(try store.exists(user: "Jose\u{301}"))   // decomposed form, same name
        XCTAssertFalse(try store.exists(user: "jos\u{E9}"))
        let a = try store.open(user: "Jose\u{301}", password: pw("password-1"))
        a.wipe()
    }

    func testPasswordChangeKeepsEveryKey() throws {
        let rk = try store.add(user: "alice", password: pw("old password"), deviceBound: false, parameters: fast)
        let recovery = rk.formatted
        let before = try store.open(user: "alice", password: pw("old password"))
        let recordBefore = try Data(contentsOf: URL(fileURLWithPath: layout.accountsDir + "/" + recordFiles()[0]))
        // A file sealed under the `complete` class before the change...
        let fileKey = SecureBytes(randomCount: 32)
        let wrapped = try before.keyring().withClassKey(.complete) { SecretBox.wrap(fileKey, under: $0, ad: [1, 2, 3]) }

        try store.changePassword(user: "alice", old: pw("old password"), new: pw("new password"))
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("old password")) }
        let after = try store.open(user: "alice", password: pw("new password"))
        XCTAssertEqual(after.treeID, before.treeID)
        XCTAssertTrue(after.masterKey.withUnsafeBytes { x in before.masterKey.withUnsafeBytes { constantTimeEqual(x, $0) } })
        XCTAssertEqual(try fingerprint(after), try fingerprint(before))
        // ...still opens after it.
        let unwrapped = try after.keyring().withClassKey(.complete) { try SecretBox.unwrap(wrapped, under: $0, ad: [1, 2, 3]) }
        XCTAssertTrue(unwrapped.withUnsafeBytes { x in fileKey.withUnsafeBytes { constantTimeEqual(x, $0) } })
        // New salt, new slot; same record name; recovery key still valid.
        let recordAfter = try Data(contentsOf: URL(fileURLWithPath: layout.accountsDir + "/" + recordFiles()[0]))
        XCTAssertNotEqual(recordBefore, recordAfter)
        XCTAssertEqual(try recordFiles().count, 1)
        try store.resetPassword(user: "alice", recoveryKey: recovery, new: pw("third password"))
        let third = try store.open(user: "alice", password: pw("third password"))
        XCTAssertEqual(try fingerprint(third), try fingerprint(before))
        // Wrong old password: nothing changes.
        assertThrows(.wrongPassword) { try self.store.changePassword(user: "alice", old: self.pw("nope nope"), new: self.pw("fourth password")) }
        assertThrows(.passwordTooShort(minimum: 8)) { try self.store.changePassword(user: "alice", old: self.pw("third password"), new: self.pw("short")) }
        _ = try store.open(user: "alice", password: pw("third password"))
    }

    func testPasswordChangeCanRaiseTheCostAndRefusesLoweringIt() throws {
        _ = try store.add(user: "alice", password: pw("old password"), deviceBound: false, parameters: fast)
        let raised = Argon2Parameters(opsLimit: 3, memLimit: 64 << 20)
        try store.changePassword(user: "alice", old: pw("old password"), new: pw("new password"), parameters: raised)
        let rec = try AccountRecord.decode(FileIO.readFile(layout.accountsDir + "/" + recordFiles()[0]))
        XCTAssertEqual(rec.kdf, raised)
        assertThrows(.weakKDFParameters) {
            try self.store.changePassword(user: "alice", old: self.pw("new password"), new: self.pw("other password"), parameters: .testing)
        }
        _ = try store.open(user: "alice", password: pw("new password"))
    }

    func testRemove() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        _ = try store.add(user: "bob", password: pw("bob-password"), deviceBound: false, parameters: fast)
        let a = try store.open(user: "alice", password: pw("alice-password"))
        let b = try store.open(user: "bob", password: pw("bob-password"))
        assertThrows(.wrongPassword) { try self.store.remove(user: "alice", password: self.pw("bob-password"), deletePhotos: true) }
        XCTAssertEqual(try store.count(), 2)

        try store.remove(user: "alice", password: pw("alice-password"), deletePhotos: true)
        XCTAssertEqual(try store.count(), 1)
        XCTAssertFalse(try store.exists(user: "alice"))
        XCTAssertNotEqual(access(a.treePath, F_OK), 0)
        XCTAssertEqual(access(b.treePath, F_OK), 0)

        // Without deletePhotos the tree stays (unreadable without the record).
        try store.remove(user: "bob", password: pw("bob-password"), deletePhotos: false)
        XCTAssertEqual(try store.count(), 0)
        XCTAssertEqual(access(b.treePath, F_OK), 0)
        assertThrows(.noSuchAccount) { _ = try self.store.open(user: "bob", password: self.pw("bob-password")) }
    }

    /// An account whose tree is gone (lost, or not copied with the store) can still be
    /// removed with deletePhotos; it used to fail on "open users/<id>/.pvmount: No such file".
    func testRemoveWithDeletePhotosOfAnAccountWhoseTreeIsGone() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let a = try store.open(user: "alice", password: pw("alice-password"))
        try TreeRemoval.removeRecursively(a.treePath)
        try store.remove(user: "alice", password: pw("alice-password"), deletePhotos: true)
        XCTAssertEqual(try store.count(), 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.usersDir), [])
    }

    /// An offline command working in the tree (an import, an export) holds the tree's lock:
    /// remove with deletePhotos is refused (store busy) with nothing removed, instead of
    /// deleting the tree under it (the import then failed with "rename ...: No such file").
    func testRemoveWithDeletePhotosWaitsForAnOfflineCommandInTheTree() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let a = try store.open(user: "alice", password: pw("alice-password"))
        var quick = store!
        quick.lockTimeout = 0.3
        for mode in [TreeLock.Mode.exclusive, .shared] {   // import, export
            let offline = try TreeLock(root: a.treePath, mode: mode)
            assertThrows(.storeBusy) { try quick.remove(user: "alice", password: self.pw("alice-password"), deletePhotos: true) }
            XCTAssertEqual(try store.count(), 1)
            XCTAssertEqual(access(a.treePath + "/.pvdir", F_OK), 0)
            offline.release()
        }
        try quick.remove(user: "alice", password: pw("alice-password"), deletePhotos: true)
        XCTAssertNotEqual(access(a.treePath, F_OK), 0)
    }

    func testRemoveDoesNotFollowSymlinksOutOfTheTree() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let a = try store.open(user: "alice", password: pw("alice-password"))
        let outside = tmp + "/outside"
        XCTAssertEqual(mkdir(outside, 0o700), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: outside + "/keep", contents: Data([1])))
        XCTAssertEqual(mkdir(a.treePath + "/sub", 0o700), 0)
        XCTAssertEqual(symlink(outside, a.treePath + "/sub/link"), 0)
        try store.remove(user: "alice", password: pw("alice-password"), deletePhotos: true)
        XCTAssertNotEqual(access(a.treePath, F_OK), 0)
        XCTAssertEqual(access(outside + "/keep", F_OK), 0)
    }

    /// A tree nested 5,000 directories deep (a mount makes one as easily as a shallow one) is
    /// deleted whole with deletePhotos: the removal recursed once per level and crashed
    /// (SIGSEGV, stack overflow).
    func testRemoveWithDeletePhotosDeletesADeeplyNestedTree() throws {
        _ = try store.add(user: "alice", password: pw("alice-password"), deviceBound: false, parameters: fast)
        let a = try store.open(user: "alice", password: pw("alice-password"))
        var fd = open(a.treePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for _ in 0..<5000 {
            XCTAssertEqual(mkdirat(fd, "d", 0o700), 0)
            let sub = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(fd)
            fd = sub
            XCTAssertGreaterThanOrEqual(fd, 0)
        }
        close(openat(fd, "bottom", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))
        close(fd)
        try store.remove(user: "alice", password: pw("alice-password"), deletePhotos: true)
        XCTAssertNotEqual(access(a.treePath, F_OK), 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.usersDir), [])
    }

    /// Removal that stops deep in the tree names the path where it stopped (an immutable
    /// file, chattr +i: unlink fails with EPERM), and leaves what it could not remove.
    func testRemovalThatStopsNamesThePathBelowTheTree() throws {
        let top = tmp + "/tree"
        XCTAssertEqual(mkdir(top, 0o700), 0)
        XCTAssertEqual(mkdir(top + "/a", 0o700), 0)
        XCTAssertEqual(mkdir(top + "/a/b", 0o700), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: top + "/a/b/pinned", contents: Data([1])))
        XCTAssertTrue(FileManager.default.createFile(atPath: top + "/a/gone", contents: Data([1])))
        let chattr = { (flag: String) -> Int32 in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
            p.arguments = [flag, top + "/a/b/pinned"]
            try? p.run()
            p.waitUntilExit()
            return p.terminationStatus
        }
        XCTAssertEqual(chattr("+i"), 0, "chattr +i needs root on ext4/xfs/btrfs")
        defer { _ = chattr("-i") }
        XCTAssertThrowsError(try TreeRemoval.removeRecursively(top)) { error in
            XCTAssertEqual("\(error)", "unlink \(top)/a/b/pinned: Operation not permitted")
        }
        XCTAssertEqual(access(top + "/a/b/pinned", F_OK), 0)
    }

    func testStoreErrorsOnOpeningTheStore() throws {
        assertThrows(.storeNotInitialised(path: tmp + "/none")) { _ = try AccountStore(layout: StoreLayout(root: self.tmp + "/none")) }
    }
}
