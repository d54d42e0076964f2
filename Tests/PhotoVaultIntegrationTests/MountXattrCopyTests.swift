import Foundation
import XCTest

/// Copy tools that preserve extended attributes (`rsync -aX`, `cp -a --preserve=xattr`,
/// `tar --xattrs`) into and out of the mount: exact round trips, and the virtual attributes
/// (`user.photovault.class`, `user.xdg.robots.*`), read by name and not listed, accepted
/// when a tree from elsewhere carries them.
final class MountXattrCopyTests: XCTestCase {
    static let virtualPattern = #" user\.(photovault\.class|xdg\.robots\.(index|backup))="#

    /// A small tree with user xattrs on files and directories (text, unicode, binary values).
    static func makeTree(_ sb: Sandbox, at dir: String, tag: String) {
        sb.ok("""
        set -e
        cd \(Sandbox.quote(dir))
        mkdir -p "Album \(tag)/2024" plain-dir
        head -c 150000 /dev/urandom > "Album \(tag)/2024/IMG_0001.JPG"
        head -c 70000 /dev/urandom > "Album \(tag)/IMG_0002.JPG"
        printf 'no xattrs %s\\n' \(tag) > plain-dir/readme.txt
        printf 'notes %s\\n' \(tag) > notes.txt; chmod 0600 notes.txt
        ln -s notes.txt link-to-notes
        setfattr -n user.comment -v "XATTR-COMMENT-\(tag) Ürlaub 北京" "Album \(tag)/2024/IMG_0001.JPG"
        setfattr -n user.rating -v 0x0501ff00 "Album \(tag)/2024/IMG_0001.JPG"
        setfattr -n user.xdg.origin.url -v "https://example.invalid/\(tag)" "Album \(tag)/IMG_0002.JPG"
        setfattr -n user.album-note -v "XATTR-DIR-\(tag)" "Album \(tag)"
        setfattr -n user.year -v 2024 "Album \(tag)/2024"
        setfattr -n user.root-note -v "XATTR-ROOT-\(tag)" .
        touch -d '2011-03-04 05:06:07' "Album \(tag)/2024/IMG_0001.JPG" notes.txt
        touch -d '2012-01-01 00:00:00' "Album \(tag)/2024" "Album \(tag)"
        """)
    }

    /// `path user.name=0x...` for every user xattr of every entry under `dir` (the root
    /// included, symlinks not followed), sorted; the virtual attributes left out unless asked.
    static func xattrs(_ sb: Sandbox, _ dir: String, includingVirtual: Bool = false) -> String {
        // C locale: a name that is not UTF-8 would make grep call the whole listing binary.
        let filter = includingVirtual ? "cat" : "LC_ALL=C grep -v -E '\(virtualPattern)'"
        return sb.ok("""
        set -o pipefail
        cd \(Sandbox.quote(dir)) && find . -print0 | LC_ALL=C sort -z | while IFS= read -r -d '' f; do
          getfattr -h -d -e hex -m '^user\\.' --absolute-names -- "$f" | awk -v f="$f" '/^user\\./ { print f " " $0 }'
        done | { \(filter) || true; }
        """)
    }

    static func checksums(_ sb: Sandbox, _ dir: String) -> String {
        sb.ok("cd \(Sandbox.quote(dir)) && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum")
    }

    func testRsyncXattrsRoundTripThroughTheMount() {
        let sb = Sandbox("pv-rsyncx")
        sb.initStore()
        let mp = sb.mount()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let tag = "RSX\(UUID().uuidString.prefix(8))"
        Self.makeTree(sb, at: src, tag: tag)
        let q = Sandbox.quote(mp), qsrc = Sandbox.quote(src), qout = Sandbox.quote(out)

        // In and out: rsync removes the destination's attributes its source lacks (the
        // virtual ones, on the way in) and must still exit 0 without complaint.
        let into = sb.run("rsync -aX \(qsrc)/ \(q)/tree/")
        XCTAssertEqual(into.status, 0, into.stderr)
        XCTAssertEqual(into.stderr, "")
        let back = sb.run("rsync -aX \(q)/tree/ \(qout)/")
        XCTAssertEqual(back.status, 0, back.stderr)
        XCTAssertEqual(back.stderr, "")

        let expected = Self.xattrs(sb, src)
        XCTAssertEqual(expected.split(separator: "\n").count, 6, expected)
        XCTAssertTrue(expected.contains("./Album \(tag)/2024/IMG_0001.JPG user.rating=0x0501ff00"), expected)
        XCTAssertEqual(Self.xattrs(sb, mp + "/tree", includingVirtual: true), expected)
        XCTAssertEqual(Self.xattrs(sb, out, includingVirtual: true), expected)
        let sums = Self.checksums(sb, src)
        XCTAssertEqual(sums.split(separator: "\n").count, 4, sums)
        XCTAssertEqual(Self.checksums(sb, mp + "/tree"), sums)
        XCTAssertEqual(Self.checksums(sb, out), sums)
        let listing = MountToolRoundTripTests.listing(sb, src)
        XCTAssertEqual(MountToolRoundTripTests.listing(sb, mp + "/tree"), listing)
        XCTAssertEqual(MountToolRoundTripTests.listing(sb, out), listing)

        // The mount still answers its virtual attributes by name; the copy out has none of
        // them (it used to carry a class and robots attributes the source never had).
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xdg.robots.index \(q)/tree/'Album \(tag)'"), "false")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(q)/tree/notes.txt"), "complete")
        XCTAssertNotEqual(sb.run("getfattr -n user.photovault.class \(qout)/notes.txt").status, 0)

        // A copy that carries the virtual attributes (made by an earlier build, or by hand)
        // goes back in: the robots values are accepted as they are, the class attribute sets
        // the class.
        sb.ok("setfattr -n user.photovault.class -v none \(qout)/notes.txt")
        sb.ok("setfattr -n user.xdg.robots.index -v false \(qout)/'Album \(tag)'")
        let again = sb.run("rsync -aX \(qout)/ \(q)/again/")
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(q)/again/notes.txt"), "none")
        XCTAssertEqual(Self.xattrs(sb, mp + "/again"), expected)
        XCTAssertEqual(Self.checksums(sb, mp + "/again"), sums)

        // A second run has nothing to change, attributes included.
        let noop = sb.run("rsync -aXi \(qsrc)/ \(q)/tree/")
        XCTAssertEqual(noop.status, 0, noop.stderr)
        XCTAssertEqual(noop.stdout, "")
        XCTAssertEqual(Self.checksums(sb, mp + "/tree"), sums)
        XCTAssertEqual(MountToolRoundTripTests.listing(sb, mp + "/tree"), listing)

        sb.unmount(mp)
        sb.assertNoPlaintext([tag, "XATTR-COMMENT", "XATTR-DIR", "XATTR-ROOT", "Ürlaub", "example.invalid", "user.rating"])
    }

    /// Attribute names are bytes, as file names are: two names that are not valid UTF-8
    /// stay two attributes and come back byte for byte (they were once both turned into
    /// "user.\u{FFFD}", the second value silently replacing the first).
    /// A photo with three attributes whose names are not UTF-8 (two differ in one byte).
    static func makePhotoWithNamesNotUTF8(_ sb: Sandbox, _ path: String) {
        let f = Sandbox.quote(path)
        sb.ok("""
        set -e
        head -c 5000 /dev/urandom > \(f)
        setfattr -n $'user.\\xff' -v first-value \(f)
        setfattr -n $'user.\\xfe' -v second-value \(f)
        setfattr -n $'user.caf\\xe9' -v latin1-name \(f)
        """)
    }

    func testXattrNamesThatAreNotUTF8StayDistinctThroughRsync() {
        let sb = Sandbox("pv-xbytes")
        sb.initStore()
        var mp = sb.mount()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let q = Sandbox.quote(mp), qsrc = Sandbox.quote(src), qout = Sandbox.quote(out)
        Self.makePhotoWithNamesNotUTF8(sb, src + "/photo.jpg")
        sb.ok("setfattr -n user.café -v utf8-name \(qsrc)/photo.jpg")
        let expected = Self.xattrs(sb, src)
        XCTAssertEqual(expected.split(separator: "\n").count, 4, expected)

        let into = sb.run("rsync -aX \(qsrc)/ \(q)/in/")
        XCTAssertEqual(into.status, 0, into.stderr)
        XCTAssertEqual(Self.xattrs(sb, mp + "/in"), expected)
        XCTAssertEqual(sb.ok("getfattr --only-values -n $'user.\\xff' \(q)/in/photo.jpg"), "first-value")
        XCTAssertEqual(sb.ok("getfattr --only-values -n $'user.\\xfe' \(q)/in/photo.jpg"), "second-value")
        // Nothing left to send on a second run (a name that came back different would be).
        let noop = sb.run("rsync -aXi \(qsrc)/ \(q)/in/")
        XCTAssertEqual(noop.status, 0, noop.stderr)
        XCTAssertEqual(noop.stdout, "")
        // Removing one leaves the other.
        sb.ok("setfattr -x $'user.\\xff' \(q)/in/photo.jpg")
        XCTAssertEqual(sb.run("getfattr -n $'user.\\xff' \(q)/in/photo.jpg").status, 1)
        XCTAssertEqual(sb.ok("getfattr --only-values -n $'user.\\xfe' \(q)/in/photo.jpg"), "second-value")
        sb.ok("setfattr -n $'user.\\xff' -v first-value \(q)/in/photo.jpg")

        // Stored as written: the same after a remount, and rsync out gives the source back.
        sb.unmount(mp)
        mp = sb.mount()
        XCTAssertEqual(Self.xattrs(sb, mp + "/in"), expected)
        let back = sb.run("rsync -aX \(q)/in/ \(qout)/")
        XCTAssertEqual(back.status, 0, back.stderr)
        XCTAssertEqual(Self.xattrs(sb, out), expected)
        sb.unmount(mp)
        sb.assertNoPlaintext(["first-value", "second-value", "latin1-name", "utf8-name"])
    }

    func testCpAndTarPreserveXattrsThroughTheMount() {
        let sb = Sandbox("pv-cptarx")
        sb.initStore()
        let mp = sb.mount()
        let src = sb.plainDir("src")
        let tag = "CTX\(UUID().uuidString.prefix(8))"
        Self.makeTree(sb, at: src, tag: tag)
        let q = Sandbox.quote(mp), qsrc = Sandbox.quote(src), root = Sandbox.quote(sb.root)
        let expected = Self.xattrs(sb, src), sums = Self.checksums(sb, src)

        // cp in, cp out, cp that copy back in.
        sb.ok("cp -a --preserve=xattr \(qsrc) \(q)/cp && cp -a --preserve=xattr \(q)/cp \(root)/cp-out")
        sb.ok("cp -a --preserve=xattr \(root)/cp-out \(q)/cp-back")
        // tar out of the mount and back in.
        sb.ok("""
        set -e -o pipefail
        mkdir \(q)/tar
        tar --xattrs --xattrs-include='*' -C \(q)/cp -cf - . | tar --xattrs --xattrs-include='*' -C \(q)/tar -xpf -
        """)
        for dir in [mp + "/cp", sb.root + "/cp-out", mp + "/cp-back", mp + "/tar"] {
            XCTAssertEqual(Self.xattrs(sb, dir, includingVirtual: true), expected, dir)
            XCTAssertEqual(Self.checksums(sb, dir), sums, dir)
        }
        sb.unmount(mp)
    }

    /// The exact semantics of the virtual attributes (FORMAT.md section 8).
    func testVirtualAttributesAcceptWhatCopyToolsDo() {
        let sb = Sandbox("pv-virtx")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/d && printf x > \(q)/d/f && setfattr -n user.photovault.class -v none \(q)/d/f")
        // Removing succeeds and changes nothing.
        sb.ok("setfattr -x user.xdg.robots.index \(q)/d && setfattr -x user.xdg.robots.backup \(q)")
        sb.ok("setfattr -x user.photovault.class \(q)/d/f && setfattr -x user.photovault.class \(q)/d")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xdg.robots.index \(q)/d"), "false")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xdg.robots.backup \(q)"), "false")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(q)/d/f"), "none")
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(q)/d"), "complete")
        // A robots attribute takes its own value only.
        sb.ok("setfattr -n user.xdg.robots.index -v false \(q)/d && setfattr -n user.xdg.robots.backup -v false \(q)")
        let other = sb.run("setfattr -n user.xdg.robots.backup -v true \(q)/d")
        XCTAssertNotEqual(other.status, 0)
        XCTAssertTrue(other.stderr.contains("Operation not permitted"), other.stderr)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.xdg.robots.backup \(q)/d"), "false")
        // The class attribute takes class names only.
        let bogus = sb.run("setfattr -n user.photovault.class -v false \(q)/d/f")
        XCTAssertTrue(bogus.stderr.contains("Invalid argument"), bogus.stderr)
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(q)/d/f"), "none")
        // Removing an attribute that is not virtual and not there is still an error.
        let missing = sb.run("setfattr -x user.not-there \(q)/d/f")
        XCTAssertTrue(missing.stderr.contains("No such attribute"), missing.stderr)
        XCTAssertEqual(sb.ok("cat \(q)/d/f"), "x")
        sb.unmount(mp)
    }
    /// An attribute stored under `user.pv.` whose name fails authentication (forged or
    /// damaged underneath; fsck reports it `xattrDamaged`) is left out of the listing, as
    /// before, but no longer silently: the daemon logs one line per file, naming it in the
    /// foreground, however often the file is listed. The other attributes still list.
    func testAnAttributeWhoseNameFailsAuthenticationIsLoggedOnce() throws {
        let s = Sandbox("xattr-forged-name")
        s.initStore()
        let fg = try ForegroundMount(sandbox: s, at: "mnt")
        defer { fg.stop(s) }
        XCTAssertTrue(fg.waitMounted(), fg.log)
        let mp = fg.mountpoint
        let size = 20_000 + 13
        try Data(AccountFixtures.randomBytes(size)).write(to: URL(fileURLWithPath: mp + "/p.jpg"))
        XCTAssertEqual(Harness.run(["setfattr", "-n", "user.note", "-v", "kept", mp + "/p.jpg"], timeout: 10).status, 0)
        let backing = try XCTUnwrap(ClassAttributeTests.cipherFile(s.store, plaintextSize: size))
        // A well-formed stored name (base64url, 39 bytes: no padding) that authenticates under no key.
        let forged = "user.pv." + Data(AccountFixtures.randomBytes(39)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        XCTAssertEqual(Harness.run(["setfattr", "-n", forged, "-v", "x", backing], timeout: 10).status, 0)
        for _ in 0..<3 {
            let r = Harness.run(["getfattr", "-d", "--absolute-names", mp + "/p.jpg"], timeout: 10)
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertTrue(r.stdout.contains("user.note=\"kept\""), r.stdout)
            XCTAssertFalse(r.stdout.contains("user.pv."), r.stdout)
        }
        let lines = fg.log.split(separator: "\n").filter { $0.contains("extended attribute whose name fails authentication") }
        XCTAssertEqual(lines.count, 1, fg.log)
        XCTAssertTrue(lines.first?.contains("/p.jpg") ?? false, fg.log)
    }
}
