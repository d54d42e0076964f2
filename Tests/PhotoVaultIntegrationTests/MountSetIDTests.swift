import Foundation
import XCTest

/// Setuid and setgid bits on files (issue 34, item 4): stored and shown as written, dropped
/// by the kernel's own rules (a write or truncate by a caller without CAP_FSETID, a chown),
/// checked side by side with a plain tmpfs directory. The mount is `nosuid`: they never act.
final class MountSetIDTests: XCTestCase {
    /// Each step on a file in DIR, then its mode: chmod, writes and truncates by root, by root
    /// without CAP_FSETID and by the file's owner (uid 4242), O_TRUNC opens, chown. The same
    /// lines on the mount as on tmpfs; `chmod 6555` used to show 555 on the mount.
    func testSetIDBitsAreKeptAndDroppedAsOnALocalFileSystem() {
        let sb = Sandbox("pv-setid")
        sb.initStore()
        let mp = sb.mount(extra: ["--allow-other"])
        sb.ok("chmod 755 \(Sandbox.quote(mp))")   // the tree's root is 0700: let uid 4242 in
        let ref = sb.plainDir("ref")
        sb.ok("mount -t tmpfs -o size=4m pvsetidref \(Sandbox.quote(ref))")
        defer { _ = Harness.run(["umount", "-l", ref], timeout: 10) }
        let script = """
        set -u
        cd "$1"
        user='setpriv --reuid=4242 --regid=4242 --clear-groups'
        nofsetid='setpriv --bounding-set=-fsetid'
        m() { echo "$1 $(stat -c %a f)"; }
        rm -f f; printf 'DATA' > f
        for mode in 6555 4755 2755 6711 6745 1755 755; do chmod $mode f; m "chmod $mode"; done
        chmod 6755 f; printf x >> f; m "root appends"
        truncate -s 2 f; m "root truncates"
        chmod 6755 f; $nofsetid sh -c 'printf x >> f'; m "root without CAP_FSETID appends"
        chmod 6755 f; $nofsetid truncate -s 1 f; m "root without CAP_FSETID truncates"
        chown 4242:4242 f
        chmod 6755 f; $user sh -c 'printf x >> f'; m "owner appends"
        chmod 6745 f; $user sh -c 'printf x >> f'; m "owner appends (setgid, no group execute)"
        chmod 6755 f; $user truncate -s 1 f; m "owner truncates"
        chmod 6755 f; $user sh -c ': > f'; m "owner opens with O_TRUNC"
        chmod 6755 f; $user sh -c 'printf "" >> f'; m "owner opens for append, writes nothing"
        chmod 6755 f; chown 4243 f; m "root chowns"
        chmod 6745 f; chown 4242 f; m "root chowns (setgid, no group execute)"
        chmod 6755 f; chown :4243 f; m "root changes the group"
        echo "size $(stat -c %s f)"
        """
        let steps = sb.root + "/setid_steps.sh"
        try! script.write(toFile: steps, atomically: true, encoding: .utf8)
        let out = sb.ok("bash \(Sandbox.quote(steps)) \(Sandbox.quote(ref))")
        XCTAssertEqual(sb.ok("bash \(Sandbox.quote(steps)) \(Sandbox.quote(mp))"), out)
        XCTAssertTrue(out.hasPrefix("chmod 6555 6555\nchmod 4755 4755\nchmod 2755 2755\nchmod 6711 6711\n"), out)
        XCTAssertTrue(out.contains("owner appends 755\n"), out)
        XCTAssertTrue(out.contains("root appends 6755\n"), out)
        // Kept across a remount (the bits are the ciphertext file's), and copies keep them.
        sb.ok("chmod 6711 \(Sandbox.quote(mp))/f")
        let again = sb.remount(mp, extra: ["--allow-other"])
        XCTAssertEqual(sb.ok("stat -c %a \(Sandbox.quote(again))/f"), "6711\n")
        let src = sb.plainDir("src"), back = sb.plainDir("back")
        let qs = Sandbox.quote(src), qm = Sandbox.quote(again), qb = Sandbox.quote(back)
        sb.ok("""
        set -e
        for m in 2755 4755 6711; do printf "$m" > \(qs)/m$m; chmod $m \(qs)/m$m; done
        cp -a \(qs) \(qm)/cp && rsync -a \(qs)/ \(qm)/rsync/ && mkdir \(qm)/tar && tar -C \(qs) -cf - . | tar -C \(qm)/tar -xpf -
        rsync -a \(qm)/ \(qb)/
        """)
        for tool in ["cp", "rsync", "tar"] {
            XCTAssertEqual(sb.ok("cd \(qb)/\(tool) && stat -c '%n %a' m2755 m4755 m6711"), "m2755 2755\nm4755 4755\nm6711 6711\n", tool)
        }
        // nosuid: a setuid copy of `id` run from the mount does not gain root's euid.
        sb.ok("cp /usr/bin/id \(qm)/id && chown 4242 \(qm)/id && chmod 4755 \(qm)/id")
        XCTAssertTrue(Harness.sh("grep -w \(Sandbox.quote(again)) /proc/self/mountinfo").stdout.contains("nosuid"))
        XCTAssertEqual(sb.ok("setpriv --reuid=4243 --regid=4243 --clear-groups \(qm)/id -u"), "4243\n")
        sb.unmount(again)
    }
}
