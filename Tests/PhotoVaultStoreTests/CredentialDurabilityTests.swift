import Foundation
import Glibc
import XCTest
import PhotoVaultCrypto
@testable import PhotoVaultStore

/// What add, password change, reset and remove report when the fsync of `accounts/` fails
/// after the record was linked, renamed or unlinked (EIO injected through `FileIO.fsync`):
/// the truth about what took effect, and nothing half done.
final class CredentialDurabilityTests: CredentialTestCase {
    /// The new record is in place, so the new password works: a failed directory fsync is
    /// reported as that (exit 28), not as a failed change (it was `.io`, exit 1, although
    /// the old password had already stopped working).
    func testPasswordChangeAndResetWhoseDirectorySyncFailsSayTheNewPasswordIsInEffect() throws {
        let recovery = try store.add(user: "alice", password: pw("old password"), deviceBound: false, parameters: fast)
        defer { recovery.wipe() }
        failAccountsDirectorySync()
        let expected = StoreError.notConfirmedOnDisk(done: "the new password is in effect",
                                                     afterCrash: "the old password may be the one that works again", errno: EIO)
        assertThrows(expected) { try self.store.changePassword(user: "alice", old: self.pw("old password"), new: self.pw("new password")) }
        XCTAssertEqual(expected.exitCode, 28)
        XCTAssertEqual(expected.description, "the new password is in effect, but the change could not be confirmed on disk "
                       + "(fsync of its directory: Input/output error): after a crash the old password may be the one that works again")
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("old password")) }
        try store.open(user: "alice", password: pw("new password")).wipe()

        assertThrows(expected) { try self.store.resetPassword(user: "alice", recoveryKey: recovery, new: self.pw("reset password")) }
        assertThrows(.wrongPassword) { _ = try self.store.open(user: "alice", password: self.pw("new password")) }
        try store.open(user: "alice", password: pw("reset password")).wipe()
        XCTAssertEqual(try recordFiles().count, 1)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.accountsDir).filter { $0.hasPrefix(AtomicFile.tempPrefix) }, [])
    }

    /// An add whose record cannot be confirmed on disk fails and leaves nothing: no record,
    /// no tree, and the same add works once the disk does. It used to remove the tree but
    /// keep the record, so the account said 'already exists' and opened to 'tree missing'.
    func testAddWhoseDirectorySyncFailsLeavesNoAccountAndNoTree() throws {
        failAccountsDirectorySync()
        XCTAssertThrowsError(try store.add(user: "bob", password: pw("bob password"), deviceBound: false, parameters: fast)) {
            XCTAssertEqual(($0 as? StoreError)?.errno, EIO, "\($0)")
        }
        XCTAssertFalse(try store.exists(user: "bob"))
        XCTAssertEqual(try recordFiles(), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.usersDir), [])
        FileIO.fsync = { Glibc.fsync($0) }
        let recovery = try store.add(user: "bob", password: pw("bob password"), deviceBound: false, parameters: fast)
        recovery.wipe()
        try store.open(user: "bob", password: pw("bob password")).wipe()
    }

    /// An add that fails while it makes the account's tree (before its record: here the
    /// fsync after the tree's `.pvdir`; on a full store its ENOSPC) leaves no tree behind.
    /// It used to leave `users/<id>/` for good, one more each time the add was tried again.
    func testAddThatFailsWhileMakingItsTreeLeavesNoTree() throws {
        let users = layout.usersDir
        let usersID = OfflineFixture.identity(users)
        XCTAssertFalse(usersID.isEmpty)
        OfflineFixture.hookFsync(self) { fd in
            // Fails for the new tree: a directory whose parent is users/.
            var parent = stat()
            guard fstatat(fd, "..", &parent, 0) == 0 else { return true }
            return [UInt64(parent.st_dev), UInt64(parent.st_ino)] != usersID
        }
        XCTAssertThrowsError(try store.add(user: "dave", password: pw("dave password"), deviceBound: false, parameters: fast)) {
            XCTAssertEqual(($0 as? StoreError)?.errno, EIO, "\($0)")
        }
        XCTAssertFalse(try store.exists(user: "dave"))
        XCTAssertEqual(try recordFiles(), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: users), [], "a failed add left its tree")
        FileIO.fsync = { Glibc.fsync($0) }
        try store.add(user: "dave", password: pw("dave password"), deviceBound: false, parameters: fast).wipe()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: users).count, 1)
    }

    /// The record is unlinked, so the account is gone; a crash may bring it back, so its
    /// photos are kept even with deletePhotos (a record naming a deleted tree opens to
    /// nothing). It used to be `.io` (exit 1), as if nothing had happened.
    func testRemoveWhoseDirectorySyncFailsSaysTheAccountIsGoneAndKeepsThePhotos() throws {
        try store.add(user: "carol", password: pw("carol password"), deviceBound: false, parameters: fast).wipe()
        let opened = try store.open(user: "carol", password: pw("carol password"))
        opened.wipe()
        failAccountsDirectorySync()
        assertThrows(.notConfirmedOnDisk(done: "the account is removed",
                                         afterCrash: "it may be back (its photos were kept for that reason)", errno: EIO)) {
            try self.store.remove(user: "carol", password: self.pw("carol password"), deletePhotos: true)
        }
        XCTAssertFalse(try store.exists(user: "carol"))
        var st = stat()
        XCTAssertEqual(stat(opened.treePath, &st), 0, "the photos were deleted although the removal may be undone")
    }
}
