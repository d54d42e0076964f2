import Foundation
import XCTest

/// Extended attributes through `setfattr`/`getfattr`, and how `mount` and `df` present the vault.
final class MountXattrAndStatfsTests: XCTestCase {
    func testUserXattrsRoundTripAndVirtualAttributes() {
        let sb = Sandbox("pv-xattr")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("""
        set -e
        mkdir \(q)/Album && printf 'x' > \(q)/Album/photo.jpg
        setfattr -n user.xattr-secret-name -v XATTR-SECRET-VALUE \(q)/Album/photo.jpg
        setfattr -n user.comment -v 'Ürlaub 北京' \(q)/Album/photo.jpg
        setfattr -n user.rating -v 0x0501ff \(q)/Album/photo.jpg
        setfattr -n user.xattr-on-dir -v DIR-XATTR-VALUE \(q)/Album
        """)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xattr-secret-name \(q)/Album/photo.jpg"), "XATTR-SECRET-VALUE")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.comment \(q)/Album/photo.jpg"), "Ürlaub 北京")
        XCTAssertEqual(sb.ok("getfattr -e hex -n user.rating \(q)/Album/photo.jpg | grep rating"), "user.rating=0x0501ff\n")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xattr-on-dir \(q)/Album"), "DIR-XATTR-VALUE")
        // Listing shows the stored attributes only (the virtual ones are read by name).
        let names = sb.ok("getfattr -m - --absolute-names \(q)/Album/photo.jpg | grep '^user' | LC_ALL=C sort")
        XCTAssertEqual(names, "user.comment\nuser.rating\nuser.xattr-secret-name\n")
        // Removal and replacement.
        sb.ok("setfattr -x user.comment \(q)/Album/photo.jpg && setfattr -n user.rating -v 3 \(q)/Album/photo.jpg")
        let gone = sb.run("getfattr -n user.comment \(q)/Album/photo.jpg")
        XCTAssertNotEqual(gone.status, 0)
        XCTAssertTrue(gone.stderr.contains("No such attribute"), gone.stderr)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.rating \(q)/Album/photo.jpg"), "3")

        // Virtual attributes: indexers and backups are told to keep out of every directory.
        for dir in [q, "\(q)/Album"] {
            XCTAssertEqual(sb.ok("getfattr --only-values -n user.xdg.robots.index \(dir)"), "false")
            XCTAssertEqual(sb.ok("getfattr --only-values -n user.xdg.robots.backup \(dir)"), "false")
        }
        let classNames = ["complete", "complete-unless-open", "until-first-auth", "none"]
        XCTAssertTrue(classNames.contains(sb.ok("getfattr --only-values -n user.photovault.class \(q)/Album/photo.jpg")))
        XCTAssertTrue(classNames.contains(sb.ok("getfattr --only-values -n user.photovault.class \(q)/Album")))
        // The robots attributes are not writable.
        XCTAssertNotEqual(sb.run("setfattr -n user.xdg.robots.index -v true \(q)/Album").status, 0)
        // Names up to 160 bytes (FORMAT.md section 8); longer ones get ERANGE, as over 255 on ext4.
        let longest = "user." + String(repeating: "n", count: 155)
        sb.ok("setfattr -n \(longest) -v LONG-NAME-VALUE \(q)/Album/photo.jpg")
        XCTAssertEqual(sb.ok("getfattr --only-values -n \(longest) \(q)/Album/photo.jpg"), "LONG-NAME-VALUE")
        let tooLong = sb.run("setfattr -n \(longest)n -v x \(q)/Album/photo.jpg")
        XCTAssertNotEqual(tooLong.status, 0)
        XCTAssertTrue(tooLong.stderr.contains("Numerical result out of range"), tooLong.stderr)
        sb.ok("setfattr -x \(longest) \(q)/Album/photo.jpg")

        sb.remount(mp)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xattr-secret-name \(q)/Album/photo.jpg"), "XATTR-SECRET-VALUE")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xattr-on-dir \(q)/Album"), "DIR-XATTR-VALUE")
        sb.unmount(mp)
        sb.assertNoPlaintext(["XATTR-SECRET-VALUE", "xattr-secret-name", "DIR-XATTR-VALUE", "xattr-on-dir",
                              "Ürlaub", "北京", "user.comment", "user.rating", "photo.jpg", "Album"])
    }

    func testMountAndDfShowPhotoVaultWithTheStoreFreeSpace() {
        let sb = Sandbox("pv-df")
        sb.initStore()
        let mp = sb.mount()
        let mounts = sb.ok("mount")
        let line = mounts.split(separator: "\n").first { $0.contains(" on \(mp) ") }.map(String.init) ?? ""
        XCTAssertTrue(line.contains("type fuse.photovault"), line)
        XCTAssertTrue(line.hasPrefix("photovault ") || line.contains("/photovault on "), line)
        let dfLine = sb.ok("df -P \(Sandbox.quote(mp)) | tail -1")
        XCTAssertTrue(dfLine.hasPrefix("photovault "), dfLine)
        XCTAssertTrue(sb.ok("df -T \(Sandbox.quote(mp)) | tail -1").contains("fuse.photovault"))
        // Free space is the store filesystem's (measured back to back; other work on the disk
        // may move it a little).
        let both = sb.ok("df -B1 --output=size,avail \(Sandbox.quote(mp)) \(Sandbox.quote(sb.store)) | tail -2")
        let nums = both.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Int64($0) }
        XCTAssertEqual(nums.count, 4, both)
        if nums.count == 4 {
            XCTAssertEqual(nums[0], nums[2], "total size differs: \(both)")
            XCTAssertLessThan(abs(nums[1] - nums[3]), 256 << 20, "free space differs by more than 256 MiB: \(both)")
        }
        sb.unmount(mp)
    }
}
