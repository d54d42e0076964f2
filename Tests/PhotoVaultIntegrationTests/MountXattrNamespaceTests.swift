import Foundation
import XCTest

/// `trusted.*` and `security.*` attributes through the mount, as root's `rsync -aX` and
/// `cp -a` copy them (FORMAT.md section 8): stored sealed like `user.*` ones, but for
/// `security.capability`, which the `nosuid` mount refuses.
final class MountXattrNamespaceTests: XCTestCase {
    /// Every attribute of every entry under `dir` but the mount's virtual ones, as root
    /// sees them, sorted by path.
    static func allXattrs(_ sb: Sandbox, _ dir: String) -> String {
        sb.ok("""
        set -o pipefail
        cd \(Sandbox.quote(dir)) && find . -mindepth 1 -print0 | LC_ALL=C sort -z | while IFS= read -r -d '' f; do
          getfattr -h -d -e hex -m - --absolute-names -- "$f" | awk -v f="$f" '/=/ { print f " " $0 }'
        done | { LC_ALL=C grep -v -E '\(MountXattrCopyTests.virtualPattern)' || true; }
        """)
    }

    /// Runs `script`, which must exit 0 and print nothing on stderr.
    static func quiet(_ sb: Sandbox, _ script: String, file: StaticString = #filePath, line: UInt = #line) {
        let r = sb.run(script)
        XCTAssertEqual(r.status, 0, r.stderr, file: file, line: line)
        XCTAssertEqual(r.stderr, "", file: file, line: line)
    }

    /// Runs `script`, which must fail with `message` on stderr.
    static func refused(_ sb: Sandbox, _ script: String, _ message: String, file: StaticString = #filePath, line: UInt = #line) {
        let r = sb.run(script)
        XCTAssertNotEqual(r.status, 0, script, file: file, line: line)
        XCTAssertTrue(r.stderr.contains(message), r.stderr, file: file, line: line)
    }

    /// A photo folder with `user.`, `trusted.` and `security.` attributes on files and a
    /// directory (as root, on the ext4 or tmpfs under /tmp).
    static func makeTree(_ sb: Sandbox, at dir: String) {
        sb.ok("""
        set -e
        cd \(Sandbox.quote(dir))
        mkdir -p Album/2024
        head -c 40000 /dev/urandom > Album/2024/IMG_0001.JPG
        head -c 3000 /dev/urandom > Album/IMG_0002.JPG
        setfattr -n user.comment -v NS-USER-VALUE Album/2024/IMG_0001.JPG
        setfattr -n trusted.ns-md5 -v NS-TRUSTED-VALUE Album/2024/IMG_0001.JPG
        setfattr -n security.ns-label -v NS-SECURITY-VALUE Album/IMG_0002.JPG
        setfattr -n trusted.ns-dir-note -v 0x00ff01 Album
        """)
    }

    func testRootsRsyncAndCpCopyTrustedAndSecurityAttributesInAndOut() {
        XCTAssertEqual(getuid(), 0, "trusted.* attributes need CAP_SYS_ADMIN")
        let sb = Sandbox("pv-xattr-ns")
        sb.initStore()
        let mp = sb.mount()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        Self.makeTree(sb, at: src)
        let q = Sandbox.quote(mp), qsrc = Sandbox.quote(src)
        let expected = Self.allXattrs(sb, src)
        XCTAssertEqual(expected.split(separator: "\n").count, 4, expected)
        XCTAssertTrue(expected.contains("./Album trusted.ns-dir-note=0x00ff01"), expected)

        // They were refused with EOPNOTSUPP: rsync exited 23, cp --preserve=xattr 1, and
        // cp -a dropped them without a word.
        Self.quiet(sb, "rsync -aX \(qsrc)/ \(q)/rsync/")
        Self.quiet(sb, "cp -a \(qsrc)/. \(q)/cp-a/")
        Self.quiet(sb, "cp -a --preserve=xattr \(qsrc)/. \(q)/cp-x/")
        for copy in ["rsync", "cp-a", "cp-x"] {
            XCTAssertEqual(Self.allXattrs(sb, mp + "/" + copy), expected, copy)
        }
        sb.remount(mp)
        XCTAssertEqual(Self.allXattrs(sb, mp + "/rsync"), expected)
        let back = sb.run("rsync -aX \(q)/rsync/ \(Sandbox.quote(out))/")
        XCTAssertEqual(back.status, 0, back.stderr)
        XCTAssertEqual(Self.allXattrs(sb, out), expected)
        XCTAssertEqual(sb.ok("getfattr --only-values -n trusted.ns-md5 \(q)/rsync/Album/2024/IMG_0001.JPG"), "NS-TRUSTED-VALUE")

        // Removal and replacement, as for user.* attributes.
        sb.ok("setfattr -x trusted.ns-md5 \(q)/rsync/Album/2024/IMG_0001.JPG "
              + "&& setfattr -n security.ns-label -v relabelled \(q)/rsync/Album/IMG_0002.JPG")
        XCTAssertTrue(sb.run("getfattr -n trusted.ns-md5 \(q)/rsync/Album/2024/IMG_0001.JPG").stderr.contains("No such attribute"))
        XCTAssertEqual(sb.ok("getfattr --only-values -n security.ns-label \(q)/rsync/Album/IMG_0002.JPG"), "relabelled")

        // Offline export keeps user.* attributes only, as import takes only those.
        sb.unmount(mp)
        let exported = sb.plainDir("exported")
        let exp = OfflineCommandTests.pv(sb, ["export", "/cp-a", exported])
        XCTAssertEqual(exp.status, 0, exp.stderr)
        XCTAssertEqual(Self.allXattrs(sb, exported), "./cp-a/Album/2024/IMG_0001.JPG user.comment=0x4e532d555345522d56414c5545\n")
        sb.assertNoPlaintext(["NS-USER-VALUE", "NS-TRUSTED-VALUE", "NS-SECURITY-VALUE", "relabelled",
                              "ns-md5", "ns-label", "ns-dir-note", "IMG_0001"])
    }

    /// The kernel lets only CAP_SYS_ADMIN read or write `trusted.*`, but passes a listing
    /// on as given: like ext4 and tmpfs, the mount lists those names only to such callers,
    /// so another user's `getfattr -d -m -` or `cp -a` out of an `--allow-other` mount
    /// meets no name it cannot read. `security.*` names are listed to everyone, as there.
    func testTrustedNamesAreListedOnlyToCallersWithCapSysAdmin() {
        XCTAssertEqual(getuid(), 0, "trusted.* attributes need CAP_SYS_ADMIN")
        let sb = Sandbox("pv-xattr-ns-list")
        sb.initStore()
        let mp = sb.mount(extra: ["--allow-other"])
        let photo = Sandbox.quote(mp + "/IMG_0003.JPG")
        sb.ok("""
        chmod 755 \(Sandbox.quote(sb.root)) \(Sandbox.quote(mp)) && head -c 1000 /dev/urandom > \(photo) && chmod 644 \(photo)
        setfattr -n trusted.ns-hidden -v 1 \(photo) && setfattr -n security.ns-shown -v 2 \(photo) && setfattr -n user.ns-user -v 3 \(photo)
        """)
        func names(_ prefix: String) -> String {
            sb.ok("\(prefix) getfattr -m - --absolute-names \(photo) | grep '^[a-z]*\\.ns-' | LC_ALL=C sort")
        }
        XCTAssertEqual(names(""), "security.ns-shown\ntrusted.ns-hidden\nuser.ns-user\n")
        let nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"
        XCTAssertEqual(names(nobody), "security.ns-shown\nuser.ns-user\n")
        // Root without CAP_SYS_ADMIN does not see them either.
        XCTAssertEqual(names("setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin"), "security.ns-shown\nuser.ns-user\n")
        // Nor does a user who holds CAP_SYS_ADMIN only in a user namespace of their own.
        XCTAssertEqual(names("\(nobody) unshare -r"), "security.ns-shown\nuser.ns-user\n")
        let copy = sb.plainDir("nobody-copy")
        sb.ok("chown 65534 \(Sandbox.quote(copy))")
        Self.quiet(sb, "\(nobody) cp -a \(photo) \(Sandbox.quote(copy))/")
        sb.unmount(mp)
    }

    /// What stays refused, and why (FORMAT.md section 8): `security.capability` (the mount
    /// is `nosuid`, so it would never be honoured; EOPNOTSUPP, which `cp -a` skips and
    /// `rsync -aX` reports), and any attribute on a symlink (the store keeps attributes as
    /// `user.*` ones of the ciphertext, which Linux allows only on files and directories:
    /// EPERM, Linux's own answer for `user.*` there).
    func testFileCapabilitiesAndSymlinkAttributesAreRefused() {
        XCTAssertEqual(getuid(), 0, "setcap and trusted.* need root")
        let sb = Sandbox("pv-xattr-ns-refused")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        let line = sb.ok("grep ' \(mp) ' /proc/mounts")
        XCTAssertTrue(line.contains("nosuid"), line)
        sb.ok("cp /usr/bin/cat \(q)/tool && ln -s tool \(q)/link")
        Self.refused(sb, "setcap cap_net_raw+ep \(q)/tool", "Operation not supported")
        Self.refused(sb, "setfattr -h -n trusted.ns-link -v 1 \(q)/link", "Operation not permitted")
        Self.refused(sb, "getcap -v \(q)/tool; getfattr -n security.capability \(q)/tool", "Operation not supported")
        Self.refused(sb, "setfattr -n security.selinux -v system_u:object_r:user_home_t:s0 \(q)/tool", "Operation not supported")
        sb.unmount(mp)
    }

    /// `ls -l` asks for every file's SELinux label (`lgetxattr security.selinux`) until one
    /// answer is EOPNOTSUPP, then stops asking on that file system. The mount refuses the
    /// label (SELinux labels a FUSE mount as a whole), so a listing costs one such request,
    /// not one round trip per file.
    func testLsAsksForTheSELinuxLabelOnlyOnce() {
        XCTAssertEqual(getuid(), 0, "mounting needs root")
        let sb = Sandbox("pv-xattr-ns-selinux")
        sb.initStore()
        let mp = sb.mount()
        let q = Sandbox.quote(mp)
        let trace = Sandbox.quote(sb.root + "/ls.trace")
        sb.ok("mkdir \(q)/album && for i in $(seq 1 40); do : > \(q)/album/IMG_$i.JPG; done")
        sb.ok("strace -f -e trace=getxattr,lgetxattr -o \(trace) ls -l \(q)/album > /dev/null")
        XCTAssertEqual(sb.ok("grep -c '\"security.selinux\"' \(trace)"), "1\n", sb.ok("cat \(trace)"))
        sb.unmount(mp)
    }
}
