import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

/// `.pvdir`, symlink targets and xattrs are authenticated like contents.
final class TamperMetadataTests: XCTestCase {
    func testEveryDirectoryInfoByteFlipIsDetected() throws {
        let keyring = try Fixture.randomKeyring()
        let dir = Fixture.tempDir(self)
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(fd) }
        let info = DirectoryInfo(defaultClass: .untilFirstAuth)
        try info.write(dirfd: fd, keyring: keyring)
        XCTAssertEqual(try DirectoryInfo.read(dirfd: fd, keyring: keyring), info)
        let original = info.encode(keyring: keyring)
        XCTAssertEqual(original.count, DirectoryInfo.size)
        for i in 0..<original.count {
            for mask: UInt8 in [0x01, 0x80] {
                var t = original
                t[i] ^= mask
                try AtomicFile.write(t, in: fd, name: DirectoryInfo.fileName, mode: 0o600)
                do {
                    _ = try DirectoryInfo.read(dirfd: fd, keyring: keyring)
                    XCTFail("byte \(i) ^ \(mask): accepted")
                } catch StoreError.integrity {
                } catch StoreError.unknownVersion where i == 3 {
                    // byte 3 is the format version: refused as unknown (EIO, exit 10).
                } catch { XCTFail("byte \(i): unexpected \(error)") }
            }
        }
        // Truncated, extended, missing, and another account's .pvdir.
        for bad in [Array(original.dropLast()), original + [0], []] {
            try AtomicFile.write(bad, in: fd, name: DirectoryInfo.fileName, mode: 0o600)
            XCTAssertIntegrityError(try DirectoryInfo.read(dirfd: fd, keyring: keyring), "\(bad.count) bytes")
        }
        try AtomicFile.write(info.encode(keyring: try Fixture.randomKeyring()), in: fd, name: DirectoryInfo.fileName, mode: 0o600)
        XCTAssertIntegrityError(try DirectoryInfo.read(dirfd: fd, keyring: keyring), "foreign key")
        unlinkat(fd, DirectoryInfo.fileName, 0)
        XCTAssertIntegrityError(try DirectoryInfo.read(dirfd: fd, keyring: keyring), "missing")
    }

    /// Whoever can write the store can put a FIFO (no writer: an open for reading would wait
    /// for good), a symlink (to a valid file outside the store) or a directory where `.pvdir`
    /// or a long-name companion should be. Each is damage, found at once: integrity (EIO and a
    /// log line through a mount, `directoryInfoDamaged` in fsck), never a wait, never followed.
    func testDirectoryInfoOrCompanionThatIsNotARegularFileIsDamageAtOnce() throws {
        let keyring = try Fixture.randomKeyring()
        let dir = Fixture.tempDir(self), outside = Fixture.tempDir(self)
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ofd = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(fd); close(ofd) }
        let info = DirectoryInfo()
        try info.write(dirfd: ofd, keyring: keyring)   // a valid .pvdir, outside
        let pvdir = dir + "/" + DirectoryInfo.fileName
        func read() throws { _ = try DirectoryInfo.read(dirfd: fd, keyring: keyring) }
        for (what, make) in [("FIFO", { mkfifo(pvdir, 0o600) }), ("symlink", { symlink(outside + "/.pvdir", pvdir) }),
                             ("directory", { mkdir(pvdir, 0o700) })] {
            XCTAssertEqual(make(), 0, what)
            let error = Self.errorWithin(releasing: pvdir, read)
            XCTAssertEqual(remove(pvdir), 0)
            guard case StoreError.integrity(_, let d)? = error as? StoreError else { XCTFail("\(what): \(String(describing: error))"); continue }
            XCTAssertEqual(d, "directory ID file is not a regular file", what)
        }

        // A long name whose companion is a FIFO, then a symlink to its real bytes.
        try info.write(dirfd: fd, keyring: keyring)
        let codec = NameCodec(keyring: keyring)
        let enc = codec.encode(Array(String(repeating: "n", count: 200).utf8), in: info)
        let companion = try XCTUnwrap(enc.companion)
        try NameCodec.writeCompanion(enc, in: ofd)
        close(openat(fd, enc.entry, O_WRONLY | O_CREAT, 0o600))
        for (what, make) in [("FIFO", { mkfifo(dir + "/" + companion, 0o600) }),
                             ("symlink", { symlink(outside + "/" + companion, dir + "/" + companion) })] {
            XCTAssertEqual(make(), 0, what)
            let error = Self.errorWithin(releasing: dir + "/" + companion) { _ = try codec.decode(entry: enc.entry, in: info, dirfd: fd) }
            XCTAssertEqual(unlink(dir + "/" + companion), 0)
            guard case StoreError.integrity(_, let d)? = error as? StoreError else { XCTFail("\(what): \(String(describing: error))"); continue }
            XCTAssertTrue(d.hasSuffix("is not a regular file"), "\(what): \(d)")
        }
    }

    struct TimedOut: Error {}
    final class ErrorBox: @unchecked Sendable { var error: Error? }

    /// What `body` throws (nil if nothing), if it returns within `seconds`; otherwise
    /// `TimedOut`, after opening `fifo` for writing so that an open(2) blocked on it returns
    /// (the test fails rather than hangs on code that waits for a FIFO's writer).
    static func errorWithin(_ seconds: Double = 5, releasing fifo: String, _ body: @escaping () throws -> Void) -> Error? {
        let done = DispatchSemaphore(value: 0)
        let box = ErrorBox()
        Thread { do { try body() } catch { box.error = error }; done.signal() }.start()
        guard done.wait(timeout: .now() + seconds) == .timedOut else { return box.error }
        let w = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        done.wait()
        if w >= 0 { close(w) }
        return TimedOut()
    }

    func testSymlinkTargetChangesAreDetected() throws {
        let keyring = try Fixture.randomKeyring()
        let target = Array("../Pictures/2024/IMG_0042.HEIC".utf8)
        let sealed = try LinkTarget.seal(target, keyring: keyring).symlink
        XCTAssertEqual(try LinkTarget.open(Array(sealed.utf8), keyring: keyring, rootFD: -1), target)
        XCTAssertNotEqual(try LinkTarget.seal(target, keyring: keyring).symlink, sealed, "random nonce per target")
        var bytes = Array(sealed.utf8)
        for i in 0..<bytes.count {
            for replacement: UInt8 in [0x41, 0x5F, 0x2E] where replacement != bytes[i] {
                let orig = bytes[i]
                bytes[i] = replacement
                XCTAssertIntegrityError(try LinkTarget.open(bytes, keyring: keyring, rootFD: -1), "position \(i)")
                bytes[i] = orig
            }
        }
        XCTAssertIntegrityError(try LinkTarget.open(Array(bytes.dropLast(4)), keyring: keyring, rootFD: -1))
        XCTAssertIntegrityError(try LinkTarget.open(Array("/etc/passwd".utf8), keyring: keyring, rootFD: -1), "a plain symlink")
        XCTAssertIntegrityError(try LinkTarget.open(bytes, keyring: try Fixture.randomKeyring(), rootFD: -1), "another account")
        XCTAssertThrowsError(try LinkTarget.seal([UInt8](repeating: 0x61, count: LinkTarget.maxPlainLength + 1), keyring: keyring))
    }

    /// Targets up to 727 bytes stay in the symlink (1,023 bytes of base64url, which every
    /// store file system holds); longer ones, up to 4,095, go to a companion in the tree's
    /// root that the symlink names. Any change to the companion, one that belongs to another
    /// symlink, a missing one, and one holding a target short enough to be inline (forged:
    /// such targets are only ever stored inline) are integrity errors.
    func testLongSymlinkTargetsLiveInACompanion() throws {
        let keyring = try Fixture.randomKeyring()
        let dir = Fixture.tempDir(self)
        let root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(root, 0)
        defer { close(root) }
        let inline = try LinkTarget.seal([UInt8](repeating: 0x61, count: 727), keyring: keyring)
        guard case .inline(let text) = inline else { return XCTFail("727 bytes must stay inline") }
        XCTAssertEqual(text.utf8.count, LinkTarget.maxInlineLength)
        for length in [728, 3000, LinkTarget.maxPlainLength] {
            let target = (0..<length).map { UInt8(0x61 + $0 % 26) }
            let stored = try LinkTarget.seal(target, keyring: keyring)
            guard case .companion(let link, let sealed) = stored else { return XCTFail("\(length) bytes must use a companion") }
            XCTAssertEqual(link.utf8.count, 44)
            XCTAssertIntegrityError(try LinkTarget.open(Array(link.utf8), keyring: keyring, rootFD: root), "missing companion")
            try LinkTarget.writeCompanion(stored, rootFD: root)
            XCTAssertEqual(try LinkTarget.open(Array(link.utf8), keyring: keyring, rootFD: root), target)
            XCTAssertTrue(NameCodec.isInternal(link + LinkTarget.companionSuffix))
            // A changed byte of the companion.
            let path = dir + "/" + link + LinkTarget.companionSuffix
            chmod(path, 0o600)
            var bytes = sealed
            bytes[bytes.count / 2] ^= 1
            Fixture.writeFile(path, bytes)
            XCTAssertIntegrityError(try LinkTarget.open(Array(link.utf8), keyring: keyring, rootFD: root), "\(length): changed companion")
            // Another symlink's companion (authentic on its own) under this one's name.
            guard case .companion(_, let other) = try LinkTarget.seal(target, keyring: keyring) else { return XCTFail() }
            Fixture.writeFile(path, other)
            XCTAssertIntegrityError(try LinkTarget.open(Array(link.utf8), keyring: keyring, rootFD: root), "\(length): swapped companion")
            LinkTarget.removeCompanion(ofStored: Array(link.utf8), rootFD: root)
            XCTAssertNotEqual(access(path, F_OK), 0)
        }
        // A short target's sealed bytes in a companion that hashes right: forged.
        let short = SecretBox.seal(Array("x".utf8), key: keyring.metadataKey, ad: LinkTarget.ad)
        let reference = LinkTarget.reference(to: short)
        Fixture.writeFile(dir + "/" + reference + LinkTarget.companionSuffix, short)
        XCTAssertIntegrityError(try LinkTarget.open(Array(reference.utf8), keyring: keyring, rootFD: root), "inline-sized companion")
    }

    func testXattrValueChangesAreDetected() throws {
        let keyring = try Fixture.randomKeyring()
        defer { withExtendedLifetime(keyring) {} }
        let codec = XattrCodec(keyring: keyring)
        let name = codec.storedName(Array("user.comment".utf8))
        XCTAssertTrue(name.hasPrefix("user.pv."))
        XCTAssertEqual(codec.storedName(Array("user.comment".utf8)), name, "deterministic, so getxattr needs no scan")
        XCTAssertEqual(codec.plainName(name), Array("user.comment".utf8))
        let value = Array("rating=5".utf8)
        let sealed = codec.sealValue(value, storedName: name)
        XCTAssertEqual(try codec.openValue(sealed, storedName: name), value)
        for i in 0..<sealed.count {
            var t = sealed
            t[i] ^= 0x04
            XCTAssertIntegrityError(try codec.openValue(t, storedName: name), "byte \(i)")
        }
        XCTAssertIntegrityError(try codec.openValue(Array(sealed.dropLast()), storedName: name))
        // A value moved under another attribute name is rejected (the name is associated data).
        let other = codec.storedName(Array("user.other".utf8))
        XCTAssertIntegrityError(try codec.openValue(sealed, storedName: other))
        // Empty values round-trip.
        XCTAssertEqual(try codec.openValue(codec.sealValue([], storedName: name), storedName: name), [])
    }

    func testForeignOrModifiedXattrNamesAreHidden() throws {
        let keyring = try Fixture.randomKeyring()
        defer { withExtendedLifetime(keyring) {} }
        let codec = XattrCodec(keyring: keyring)
        let name = codec.storedName(Array("user.tag".utf8))
        var chars = Array(name)
        let i = chars.count - 5
        chars[i] = chars[i] == "A" ? "B" : "A"
        XCTAssertNil(codec.plainName(String(chars)))
        XCTAssertNil(codec.plainName("user.xdg.origin.url"))
        XCTAssertNil(codec.plainName("security.selinux"))
        XCTAssertNil(codec.plainName("user.pv."))
        XCTAssertNil(codec.plainName("user.pv.!!!"))
        let otherKeyring = try Fixture.randomKeyring()
        XCTAssertNil(XattrCodec(keyring: otherKeyring).plainName(name), "another account's attribute")
        withExtendedLifetime(otherKeyring) {}
    }
}
