import Foundation
import XCTest

/// `rsync -a` and `tar` round trips through the mount: content, modes, mtimes, symlinks,
/// sparse and very large files, unicode and 255-byte names.
final class MountToolRoundTripTests: XCTestCase {
    /// A tree exercising what rsync preserves. `tag` is written into names and contents.
    static func makeTree(_ sb: Sandbox, at dir: String, tag: String, bigFile: Bool) {
        let long255 = String(repeating: "L", count: 251) + ".jpg"                    // 255 bytes
        let longUnicode = String(repeating: "é", count: 127) + "x"                    // 255 bytes in UTF-8
        XCTAssertEqual(long255.utf8.count, 255)
        XCTAssertEqual(longUnicode.utf8.count, 255)
        sb.ok("""
        set -e
        cd \(Sandbox.quote(dir))
        mkdir -p "album \(tag)/2024/Ürlaub 北京 📷" empty-dir
        printf 'private notes %s\\n' \(tag) > "album \(tag)/notes-0600.txt"; chmod 0600 "album \(tag)/notes-0600.txt"
        printf '#!/bin/sh\\necho %s\\n' \(tag) > "album \(tag)/run-0755.sh"; chmod 0755 "album \(tag)/run-0755.sh"
        printf 'shared %s\\n' \(tag) > "album \(tag)/2024/shared-0640.txt"; chmod 0640 "album \(tag)/2024/shared-0640.txt"
        head -c 200000 /dev/urandom > "album \(tag)/2024/Ürlaub 北京 📷/IMG_0001.JPG"
        printf 'caption %s\\n' \(tag) > "album \(tag)/2024/Ürlaub 北京 📷/Résumé – ünïcödé.txt"
        printf 'long %s\\n' \(tag) > \(Sandbox.quote(long255))
        printf 'long unicode %s\\n' \(tag) > \(Sandbox.quote(longUnicode))
        : > empty-file
        # A sparse file: 10 MiB with data only at 5 MiB.
        truncate -s 10M sparse.img
        printf 'middle %s' \(tag) | dd of=sparse.img bs=1 seek=5242880 conv=notrunc status=none
        ln -s "album \(tag)/notes-0600.txt" link-relative
        ln -s "/nonexistent/target-\(tag)" link-dangling
        ln -s "2024" "album \(tag)/link-to-dir"
        chmod 0750 "album \(tag)/2024"
        touch -h -d '2001-02-03 04:05:06' link-relative
        touch -d '2010-01-01 12:00:00' "album \(tag)/notes-0600.txt" sparse.img empty-file
        touch -d '1999-12-31 23:59:59' "album \(tag)/2024/Ürlaub 北京 📷/IMG_0001.JPG"
        touch -d '2020-06-15 08:30:00' "album \(tag)/2024" "album \(tag)/2024/Ürlaub 北京 📷"
        """)
        if bigFile {
            // 2 GiB, written at a few offsets (including across chunk boundaries and at the
            // very end) and otherwise zeros.
            sb.ok("""
            set -e
            cd \(Sandbox.quote(dir))
            truncate -s 2G big.raw
            for off in 0 65530 1048575 1073741824 2147479552; do
              head -c 4096 /dev/urandom | dd of=big.raw bs=1 seek=$off conv=notrunc status=none
            done
            test $(stat -c %s big.raw) -eq 2147483648
            """)
        }
    }

    /// `name mode size mtime` of every entry (symlinks not followed), sorted.
    static func listing(_ sb: Sandbox, _ dir: String) -> String {
        // Directory sizes are the backing filesystem's business (they grow with entries), so
        // directories are listed without one.
        sb.ok("""
        cd \(Sandbox.quote(dir)) && {
          find . -mindepth 1 ! -type d -print0 | xargs -0 -r stat -c '%n %a %s %Y %F'
          find . -mindepth 1 -type d -print0 | xargs -0 -r stat -c '%n %a - %Y %F'
        } | LC_ALL=C sort
        """)
    }

    func testRsyncRoundTrip() {
        let sb = Sandbox("pv-rsync")
        sb.initStore()
        let mp = sb.mount()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let tag = "RSYNC\(UUID().uuidString.prefix(8))"
        Self.makeTree(sb, at: src, tag: tag, bigFile: true)

        sb.ok("rsync -a \(Sandbox.quote(src))/ \(Sandbox.quote(mp))/tree/", timeout: 600)
        sb.ok("rsync -a \(Sandbox.quote(mp))/tree/ \(Sandbox.quote(out))/", timeout: 600)

        let expected = Self.listing(sb, src)
        XCTAssertTrue(expected.contains("sparse.img 644 10485760 "), expected)
        XCTAssertTrue(expected.contains("notes-0600.txt 600 "), expected)
        XCTAssertEqual(Self.listing(sb, mp + "/tree"), expected)
        XCTAssertEqual(Self.listing(sb, out), expected)
        sb.ok("diff -r --no-dereference \(Sandbox.quote(src)) \(Sandbox.quote(mp))/tree")
        sb.ok("diff -r --no-dereference \(Sandbox.quote(src)) \(Sandbox.quote(out))")
        // diff already compares the bytes; cmp states it for the 2 GiB file explicitly.
        sb.ok("cmp \(Sandbox.quote(src))/big.raw \(Sandbox.quote(mp))/tree/big.raw", timeout: 600)
        sb.ok("cmp \(Sandbox.quote(src))/big.raw \(Sandbox.quote(out))/big.raw", timeout: 600)
        XCTAssertEqual(sb.ok("readlink \(Sandbox.quote(mp))/tree/link-dangling"), "/nonexistent/target-\(tag)\n")

        // A second rsync finds nothing to transfer: sizes and mtimes read back exactly.
        let again = sb.ok("rsync -a --itemize-changes \(Sandbox.quote(src))/ \(Sandbox.quote(mp))/tree/", timeout: 600)
        XCTAssertEqual(again, "", "rsync saw differences after a round trip")

        // The 2 GiB file is random blocks and zeros: no needle in it; drop it so the scan
        // reads the small files only.
        sb.ok("rm \(Sandbox.quote(mp))/tree/big.raw")
        sb.unmount(mp)
        sb.assertNoPlaintext([tag, "Ürlaub", "北京", "Résumé", "notes-0600", "LLLLLLLLLLLLLLLL", "éééééééé", "nonexistent"])
    }

    func testTarRoundTrip() {
        let sb = Sandbox("pv-tar")
        sb.initStore()
        let mp = sb.mount()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let tag = "TAR\(UUID().uuidString.prefix(8))"
        Self.makeTree(sb, at: src, tag: tag, bigFile: false)
        sb.ok("ln \(Sandbox.quote(src))/empty-file \(Sandbox.quote(src))/empty-file-hardlink")

        sb.ok("mkdir \(Sandbox.quote(mp))/t && tar -C \(Sandbox.quote(src)) -cf - . | tar -C \(Sandbox.quote(mp))/t -xpf -")
        sb.ok("tar -C \(Sandbox.quote(mp))/t -cf - . | tar -C \(Sandbox.quote(out)) -xpf -")
        sb.ok("diff -r --no-dereference \(Sandbox.quote(src)) \(Sandbox.quote(out))")
        XCTAssertEqual(Self.listing(sb, out), Self.listing(sb, src))
        // tar recorded the hard link as a link, and it is one inside the mount.
        XCTAssertEqual(sb.ok("stat -c %h \(Sandbox.quote(mp))/t/empty-file-hardlink"), "2\n")
        // A tar archive stored inside the mount lists the same members.
        sb.ok("tar -C \(Sandbox.quote(src)) -cf \(Sandbox.quote(mp))/archive-\(tag).tar .")
        XCTAssertEqual(sb.ok("tar -tf \(Sandbox.quote(mp))/archive-\(tag).tar | sort"),
                       sb.ok("tar -C \(Sandbox.quote(src)) -cf - . | tar -tf - | sort"))
        sb.unmount(mp)
        sb.assertNoPlaintext([tag, "Ürlaub", "北京", "Résumé", "notes-0600", "sparse.img", "empty-file"])
    }
}
