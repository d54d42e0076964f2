import Foundation
import XCTest

/// How large an extended attribute's value can be through the mount (FORMAT.md section 8):
/// the sealed value (value + 40 bytes) is one xattr of the ciphertext file, so at most
/// 65,536 - 40 = 65,496 bytes where the store's file system holds a 64 KiB value (tmpfs,
/// ext4 with `ea_inode`, XFS), less where it does not (ext4's default: one 4 KiB block).
final class MountXattrSizeLimitTests: XCTestCase {
    static let limit = 65_496

    /// Sets a random value of `size` bytes on `file` with `setfattr --restore` (a value on
    /// the command line is capped at 128 KiB of hex) and reads it back; nil when it
    /// round-trips, setfattr's message otherwise.
    static func roundTrip(_ sb: Sandbox, _ file: String, _ size: Int) -> String? {
        let f = Sandbox.quote(file), dump = Sandbox.quote(sb.root + "/xattr-\(size).dump")
        let set = sb.run("""
        set -e -o pipefail
        head -c \(size) /dev/urandom > \(dump).bin
        { printf '# file: %s\\nuser.big=0x' \(f); od -An -v -tx1 \(dump).bin | tr -d ' \\n'; printf '\\n\\n'; } > \(dump)
        setfattr --restore=\(dump)
        """)
        guard set.status == 0 else { return set.stderr }
        let back = sb.ok("getfattr --only-values -n user.big \(f) | cmp - \(dump).bin && echo same")
        return back == "same\n" ? nil : "read back differs: \(back)"
    }

    /// Makes the store on a file system of its own (`makeFS` mounts it at `sb.store`; the
    /// caller unmounts it).
    func storeOn(_ sb: Sandbox, _ makeFS: String) {
        sb.ok("mkdir \(Sandbox.quote(sb.store)) && \(makeFS)")
        sb.initStore()
    }

    func testValuesUpToTheLimitRoundTripOnATmpfsStore() throws {
        XCTAssertEqual(getuid(), 0, "tmpfs mounts need root")
        let sb = Sandbox("pv-xattr-size-tmpfs")
        storeOn(sb, "mount -t tmpfs -o size=16m,mode=0700 tmpfs \(Sandbox.quote(sb.store))")
        defer { _ = Harness.run(["umount", "-l", sb.store]) }
        let mp = sb.mount()
        let photo = mp + "/photo.jpg"
        sb.ok("printf x > \(Sandbox.quote(photo))")

        for size in [0, 4096, 65_000, Self.limit] {
            XCTAssertNil(Self.roundTrip(sb, photo, size), "value of \(size) bytes")
        }
        // One byte more no longer fits the 64 KiB that Linux allows for the sealed value:
        // E2BIG, as the kernel itself answers over 64 KiB, and the old value stays.
        for size in [Self.limit + 1, 65_536] {
            XCTAssertEqual(Self.roundTrip(sb, photo, size)?.contains("Argument list too long"), true, "value of \(size) bytes")
        }
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.big \(Sandbox.quote(photo)) | wc -c"), "\(Self.limit)\n")
        sb.remount(mp)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.big \(Sandbox.quote(photo)) | wc -c"), "\(Self.limit)\n")
        sb.unmount(mp)
    }

    /// ext4 without `ea_inode` (Debian's default) keeps all of a file's attributes in one
    /// block: a value that does not fit gets ext4's own ENOSPC, however much space is free.
    func testAnExt4StoreHoldsWhatFitsItsXattrBlock() throws {
        XCTAssertEqual(getuid(), 0, "loop mounts need root")
        let sb = Sandbox("pv-xattr-size-ext4")
        let image = Sandbox.quote(sb.root + "/ext4.img")
        storeOn(sb, "truncate -s 64M \(image) && mkfs.ext4 -q -F -b 4096 -O ^ea_inode \(image) "
                + "&& mount -o loop \(image) \(Sandbox.quote(sb.store))")
        defer { _ = Harness.run(["umount", "-l", sb.store]) }
        let mp = sb.mount()
        let photo = mp + "/photo.jpg"
        sb.ok("printf x > \(Sandbox.quote(photo))")

        XCTAssertNil(Self.roundTrip(sb, photo, 3_900), "a value that fits one 4 KiB block")
        XCTAssertEqual(Self.roundTrip(sb, photo, 4_000)?.contains("No space left on device"), true)
        XCTAssertEqual(Self.roundTrip(sb, photo, Self.limit)?.contains("No space left on device"), true)
        XCTAssertEqual(Self.roundTrip(sb, photo, 65_536)?.contains("Argument list too long"), true)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.big \(Sandbox.quote(photo)) | wc -c"), "3900\n")
        sb.unmount(mp)
    }
}

/// Offline import holds values to the same limit, and says which attribute is too large.
final class OfflineXattrSizeLimitTests: XCTestCase {
    func testImportRefusesAValueOverTheLimitNamingTheAttribute() throws {
        XCTAssertEqual(getuid(), 0, "tmpfs mounts need root")
        let sb = Sandbox("pv-xattr-size-import")
        let src = sb.plainDir("src")
        sb.ok("mkdir \(Sandbox.quote(sb.store)) && mount -t tmpfs -o size=16m,mode=0700 tmpfs \(Sandbox.quote(sb.store)) "
              + "&& mount -t tmpfs -o size=4m tmpfs \(Sandbox.quote(src))")
        defer { _ = Harness.run(["umount", "-l", sb.store]); _ = Harness.run(["umount", "-l", src]) }
        sb.initStore()
        sb.ok("mkdir \(Sandbox.quote(src))/fits \(Sandbox.quote(src))/over && printf x > \(Sandbox.quote(src))/fits/a.jpg "
              + "&& printf y > \(Sandbox.quote(src))/over/b.jpg")
        for (file, size) in [("fits/a.jpg", MountXattrSizeLimitTests.limit), ("over/b.jpg", 65_536)] {
            sb.ok("python3 -c 'import os, sys; os.setxattr(sys.argv[1], \"user.big\", os.urandom(int(sys.argv[2])))' "
                  + "\(Sandbox.quote(src + "/" + file)) \(size)")
        }
        let fits = OfflineCommandTests.pv(sb, ["import", src + "/fits", "/in"])
        XCTAssertEqual(fits.status, 0, fits.stderr)
        let over = OfflineCommandTests.pv(sb, ["import", src + "/over", "/in"])
        assertFailure(over, 1, "photovault: cannot import \(src)/over/b.jpg: set the extended attribute user.big: Argument list too long")

        let mp = sb.mount()
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.big \(Sandbox.quote(mp))/in/fits/a.jpg | wc -c"),
                       "\(MountXattrSizeLimitTests.limit)\n")
        // The failed import made in/over for the file it could not finish; holding nothing,
        // it is removed again (OFFLINE.md, "Import": directories it made stay only when they hold something).
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))/in"), "fits\n")
        sb.unmount(mp)
    }
}
