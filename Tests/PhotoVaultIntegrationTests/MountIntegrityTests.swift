import Foundation
import XCTest

/// A modified byte underneath gives EIO for that file only, and the daemon's log names the
/// plaintext path (in the foreground the log goes to stderr; in the background to syslog).
final class MountIntegrityTests: XCTestCase {
    func testFlippedByteGivesEIOForThatFileOnlyAndLogsThePath() throws {
        let sb = Sandbox("pv-flip")
        sb.initStore()
        var mp = sb.mount()
        let q = Sandbox.quote(mp)
        // The victim is much larger than anything else, so its ciphertext is the largest file.
        sb.ok("""
        set -e
        mkdir \(q)/Holiday
        head -c 400000 /dev/urandom > \(q)/Holiday/victim-photo.jpg
        for i in 1 2 3; do printf 'INTEGRITY-OK-%s\\n' $i > \(q)/Holiday/fine-$i.jpg; done
        head -c 100000 /dev/urandom > \(q)/other-big.jpg
        """)
        let otherSum = sb.ok("sha256sum < \(q)/other-big.jpg")
        sb.unmount(mp)
        sb.mounts.removeAll { $0 == mp }

        let largest = sb.ok("find \(Sandbox.quote(sb.store))/users -type f -printf '%s %p\\n' | sort -n | tail -1 | cut -d' ' -f2-")
            .trimmingCharacters(in: .newlines)
        let fd = open(largest, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0, "cannot open \(largest)")
        var byte: UInt8 = 0
        XCTAssertEqual(pread(fd, &byte, 1, 200), 1)
        byte ^= 0x01
        XCTAssertEqual(pwrite(fd, &byte, 1, 200), 1)
        close(fd)

        let fg = try ForegroundMount(sandbox: sb, at: "mnt-alice")
        XCTAssertTrue(fg.waitMounted(), "foreground mount did not appear: \(fg.log)")
        mp = fg.mountpoint
        let r = sb.run("cat \(q)/Holiday/victim-photo.jpg > /dev/null")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        // Only that file: the others (and the directory listing) keep working.
        XCTAssertEqual(sb.ok("cat \(q)/Holiday/fine-1.jpg \(q)/Holiday/fine-3.jpg"), "INTEGRITY-OK-1\nINTEGRITY-OK-3\n")
        XCTAssertEqual(sb.ok("sha256sum < \(q)/other-big.jpg"), otherSum)
        XCTAssertEqual(sb.ok("ls \(q)/Holiday | LC_ALL=C sort"), "fine-1.jpg\nfine-2.jpg\nfine-3.jpg\nvictim-photo.jpg\n")
        // Still EIO with caches dropped (nothing served from the page cache).
        sb.ok("sync; echo 3 > /proc/sys/vm/drop_caches")
        XCTAssertTrue(sb.run("cat \(q)/Holiday/victim-photo.jpg").stderr.contains("Input/output error"))
        XCTAssertTrue(Harness.waitUntil(5) { fg.log.contains("/Holiday/victim-photo.jpg") }, "log: \(fg.log)")
        let eioLines = fg.log.split(separator: "\n").filter { $0.contains("EIO") }
        XCTAssertFalse(eioLines.isEmpty, fg.log)
        XCTAssertTrue(eioLines.allSatisfy { $0.contains("/Holiday/victim-photo.jpg") }, fg.log)
        // New writes elsewhere still work on the same mount.
        sb.ok("printf 'INTEGRITY-AFTER\\n' > \(q)/after.jpg")
        XCTAssertEqual(sb.ok("cat \(q)/after.jpg"), "INTEGRITY-AFTER\n")
        fg.stop(sb)
        XCTAssertFalse(fg.log.contains("INTEGRITY-OK"), "file contents in the log")
        sb.assertNoPlaintext(["INTEGRITY-", "victim-photo", "Holiday", "fine-1.jpg"])
    }

    /// A FIFO in place of a directory's `.pvdir` (whoever writes the store can make one): the
    /// daemon must not wait on it for a writer. Listing that directory fails with EIO within
    /// seconds, the log names the damage, and the rest of the vault keeps working.
    func testFifoInPlaceOfADirectoryInfoGivesEIONotAHang() throws {
        let sb = Sandbox("pv-fifo-pvdir")
        sb.initStore()
        let first = sb.mount()
        sb.ok("mkdir -p \(Sandbox.quote(first))/album/sub && printf 'FIFO-OK\\n' > \(Sandbox.quote(first))/album/kept.txt")
        sb.unmount(first)
        sb.mounts.removeAll { $0 == first }
        let pvdir = OfflineCommandTests.deepestPvdir(sb)   // /album/sub's
        sb.ok("rm \(Sandbox.quote(pvdir)) && mkfifo \(Sandbox.quote(pvdir))")
        // On code that waits, opening the FIFO for writing releases the daemon's open (and
        // `ls`, which waits for the daemon): after 8 s, so that the test fails, not hangs.
        sb.ok("(sleep 8; timeout 5 sh -c ': > \(pvdir)') >/dev/null 2>&1 </dev/null &")

        let fg = try ForegroundMount(sandbox: sb, at: "mnt-alice")
        XCTAssertTrue(fg.waitMounted(), "foreground mount did not appear: \(fg.log)")
        let q = Sandbox.quote(fg.mountpoint)
        let start = Date()
        let r = sb.run("ls \(q)/album/sub", timeout: 10)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5, "ls waited")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        XCTAssertTrue(Harness.waitUntil(5) { fg.log.contains("directory ID file is not a regular file") }, "log: \(fg.log)")
        XCTAssertTrue(fg.log.contains("/album/sub"), fg.log)
        XCTAssertEqual(sb.ok("cat \(q)/album/kept.txt", timeout: 10), "FIFO-OK\n")
        fg.stop(sb)
    }

    /// A long name's companion that the daemon cannot read (EIO, EACCES: injected with strace
    /// into the running daemon) makes the listing fail with that errno, and the log names
    /// the request but no name. The entry used to be left out as one whose "name fails
    /// authentication", so `rsync --delete` from the mount deleted its copy of a file that
    /// was only unreadable for the moment. An entry whose name really fails authentication
    /// is still left out and logged, and the listing is whole again once reads work.
    func testAnUnreadableLongNameCompanionFailsTheListingInsteadOfDroppingTheEntry() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let sb = Sandbox("pv-companion-eio-mount")
        sb.initStore()
        let fg = try ForegroundMount(sandbox: sb, at: "mnt-alice")
        XCTAssertTrue(fg.waitMounted(), "foreground mount did not appear: \(fg.log)")
        defer { fg.stop(sb) }
        let q = Sandbox.quote(fg.mountpoint)
        let long = String(repeating: "long-", count: 40) + ".jpg"
        sb.ok("mkdir \(q)/album && printf L > \(q)/album/\(long) && printf T > \(q)/album/tampered.jpg")
        let album = sb.ok("dirname \"$(find \(Sandbox.quote(sb.store))/users -name '~*.name')\"").trimmingCharacters(in: .newlines)
        let companion = sb.ok("ls -d \(Sandbox.quote(album))/~*.name").trimmingCharacters(in: .newlines)
        // tampered.jpg's entry (the only short one) renamed to a name that fails authentication.
        sb.ok("cd \(Sandbox.quote(album)) && f=$(ls | grep -v -e '^~' -e '^[.]pvdir$') && mv \"$f\" \"AAAA${f:4}\"")
        XCTAssertEqual(sb.ok("ls \(q)/album"), long + "\n")
        XCTAssertTrue(Harness.waitUntil(5) { fg.log.contains("fails authentication") }, fg.log)

        for (errorName, message) in [("EIO", "Input/output error"), ("EACCES", "Permission denied")] {
            let strace = try fg.injectFault(on: companion, syscall: "pread64", error: errorName)
            var r = sb.run("ls \(q)/album", timeout: 10)
            XCTAssertTrue(Harness.waitUntil(5) { r = sb.run("ls \(q)/album", timeout: 10); return r.status != 0 },
                          "with reads of the companion failing (\(errorName)) ls still succeeds: \(r.stdout)")
            strace.terminate()
            strace.waitUntilExit()
            XCTAssertEqual(r.stdout, "", errorName)
            XCTAssertTrue(r.stderr.contains(message), "\(errorName): \(r.stderr)")
            XCTAssertTrue(Harness.waitUntil(5) { fg.log.contains("opendir: a directory entry's name cannot be read (\(message))") },
                          fg.log)
            // Reads work again: the listing is whole again (the tampered entry still left out).
            XCTAssertEqual(sb.ok("ls \(q)/album"), long + "\n", errorName)
        }
        XCTAssertFalse(fg.log.contains("long-long"), "a plaintext name in the log: \(fg.log)")
    }

    /// A vault holding /album/a.jpg ("A"), mounted in the foreground, with EIO injected (by
    /// strace, attached to all the daemon's threads before anything is listed or looked up)
    /// into every read of album's `.pvdir`, which the daemon has not read yet. The caller
    /// stops the mount; terminating strace ends the fault.
    static func albumWithUnreadablePvdir(_ name: String) throws -> (Sandbox, ForegroundMount, Process) {
        let sb = Sandbox(name)
        sb.initStore()
        let src = sb.plainDir("src")
        sb.ok("mkdir \(Sandbox.quote(src))/album && printf A > \(Sandbox.quote(src))/album/a.jpg")
        XCTAssertEqual(sb.pv(["import", src + "/album", "/", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile]).status, 0)
        let pvdir = sb.ok("find \(Sandbox.quote(sb.store))/users -mindepth 3 -name .pvdir").trimmingCharacters(in: .newlines)
        XCTAssertFalse(pvdir.isEmpty || pvdir.contains("\n"), pvdir)
        let fg = try ForegroundMount(sandbox: sb, at: "mnt-alice")
        XCTAssertTrue(fg.waitMounted(), "foreground mount did not appear: \(fg.log)")
        do { return (sb, fg, try fg.injectFault(on: pvdir, syscall: "pread64", error: "EIO")) } catch {
            fg.stop(sb)
            throw error
        }
    }

    /// A directory whose `.pvdir` the daemon cannot read (EIO injected with strace into the
    /// running daemon, on its first read of that `.pvdir`) fails the listing with EIO, and
    /// the log says so in one line naming the request (and, in the foreground, the path).
    /// It logged nothing unless debug logging was on.
    func testAnUnreadablePvdirFailsTheListingAndIsLogged() throws {
        let (sb, fg, strace) = try Self.albumWithUnreadablePvdir("pv-pvdir-eio-mount")
        defer { fg.stop(sb) }
        let q = Sandbox.quote(fg.mountpoint)
        let r = sb.run("ls \(q)/album", timeout: 10)
        strace.terminate()
        strace.waitUntilExit()
        XCTAssertNotEqual(r.status, 0, r.stdout)
        XCTAssertEqual(r.stdout, "")
        XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        // In the foreground (`-f`) the daemon logs plaintext paths (MountDaemon); in the
        // background it would say "the listing fails".
        XCTAssertTrue(Harness.waitUntil(5) {
            fg.log.contains("opendir: the directory's .pvdir cannot be read (Input/output error): listing /album fails")
        }, fg.log)
        // Reads work again: so does the listing.
        XCTAssertEqual(sb.ok("ls \(q)/album"), "a.jpg\n")
    }

    /// The same `.pvdir` met by lookups (`stat` of names in a directory that was never
    /// listed): each fails with EIO, and the log says so in one line, once for the directory
    /// however many lookups fail. Lookups logged it only with debug on.
    func testAnUnreadablePvdirMetInALookupIsLoggedOnce() throws {
        let (sb, fg, strace) = try Self.albumWithUnreadablePvdir("pv-pvdir-eio-lookup")
        defer { fg.stop(sb) }
        let q = Sandbox.quote(fg.mountpoint)
        for name in ["a.jpg", "b.jpg", "a.jpg"] {
            let r = sb.run("stat \(q)/album/\(name)", timeout: 10)
            XCTAssertNotEqual(r.status, 0, r.stdout)
            XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        }
        strace.terminate()
        strace.waitUntilExit()
        let line = "the directory's .pvdir cannot be read (Input/output error): requests in /album fail (logged once per directory)"
        XCTAssertTrue(Harness.waitUntil(5) { fg.log.contains(line) }, fg.log)
        // Reads work again: so does the lookup, and nothing more was logged.
        XCTAssertEqual(sb.ok("cat \(q)/album/a.jpg"), "A")
        XCTAssertEqual(fg.log.components(separatedBy: ".pvdir cannot be read").count - 1, 1, fg.log)
    }

    /// A store whose tree spans two file systems (here the store on one tmpfs and a second
    /// tmpfs mounted on a directory of the tree, its `.pvdir` copied in): both number their
    /// files 2, 3, 4, ..., so files on either side share backing inode numbers. Each must stay
    /// itself through the mount: its own content (the node table keyed by st_ino alone gave
    /// the file looked up second the first one's node, content included), a st_ino no other
    /// file shows (tar and cp take equal numbers for hard links), the same number in a
    /// listing's d_ino and across lookups and remounts, and — on the tree's own file system —
    /// the backing number.
    func testFilesOnTwoFileSystemsInsideTheTreeStayApart() throws {
        let sb = Sandbox("pv-two-fs")
        let outer = sb.store, users = Sandbox.quote(sb.store + "/users")
        try FileManager.default.createDirectory(atPath: outer, withIntermediateDirectories: true)
        sb.ok("mount -t tmpfs -o mode=0700 tmpfs \(Sandbox.quote(outer))")
        var inner = ""
        defer {
            for m in sb.mounts where Harness.isMounted(m) { sb.unmount(m) }
            sb.mounts.removeAll()
            if !inner.isEmpty { _ = sb.run("umount \(Sandbox.quote(inner))") }
            _ = sb.run("umount \(Sandbox.quote(outer))")
        }
        sb.initStore()
        var mp = sb.mount()
        var q = Sandbox.quote(mp)
        sb.ok("mkdir \(q)/t && for i in $(seq 0 39); do printf 'outer %s' $i > \(q)/a$i; done")
        sb.unmount(mp)
        inner = sb.ok("find \(users) -mindepth 2 -maxdepth 2 -type d").trimmingCharacters(in: .newlines)
        XCTAssertFalse(inner.isEmpty || inner.contains("\n"), inner)
        let qi = Sandbox.quote(inner)
        sb.ok("cp \(qi)/.pvdir \(sb.root)/saved-pvdir && mount -t tmpfs -o mode=0700 tmpfs \(qi) && cp \(sb.root)/saved-pvdir \(qi)/.pvdir")

        mp = sb.mount(at: "live")
        q = Sandbox.quote(mp)
        // The outer files are looked up (and stay known to the kernel) before the inner ones exist.
        sb.ok("cat \(q)/a* > /dev/null && for i in $(seq 0 39); do printf 'inner %s' $i > \(q)/t/b$i; done")
        // The point of the test: backing numbers that both file systems use.
        let outerNumbers = Set(sb.ok("find \(users) -xdev -type f ! -name '.pv*' -printf '%i\\n'").split(separator: "\n"))
        let innerNumbers = Set(sb.ok("find \(qi) -type f ! -name '.pv*' -printf '%i\\n'").split(separator: "\n"))
        XCTAssertEqual(outerNumbers.count, 40)
        XCTAssertEqual(innerNumbers.count, 40)
        XCTAssertFalse(outerNumbers.isDisjoint(with: innerNumbers), "no shared inode numbers: \(outerNumbers) \(innerNumbers)")

        let names = (0..<40).map { "a\($0)" } + (0..<40).map { "t/b\($0)" }
        func contents() -> [String] {
            names.map { (try? String(contentsOfFile: mp + "/" + $0, encoding: .utf8)) ?? "unreadable" }
        }
        let expected = (0..<40).map { "outer \($0)" } + (0..<40).map { "inner \($0)" }
        XCTAssertEqual(contents(), expected)
        func numbers() -> [String: String] {
            var out: [String: String] = [:]
            for line in sb.ok("cd \(q) && stat -c '%i %n' a* t/b*").split(separator: "\n") {
                let f = line.split(separator: " ", maxSplits: 1)
                out[String(f[1])] = String(f[0])
            }
            return out
        }
        let shown = numbers()
        XCTAssertEqual(Set(shown.values).count, 80, "two files show one st_ino: \(shown)")
        // ls -i reads d_ino from the listing.
        for line in sb.ok("cd \(q)/t && ls -i").split(separator: "\n") {
            let f = line.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
            XCTAssertEqual(String(f[0]), shown["t/" + f[1]], "d_ino of t/\(f[1])")
        }
        // Files on the tree's own file system show their backing numbers.
        XCTAssertEqual(Set((0..<40).compactMap { shown["a\($0)"] }.map { Substring($0) }), outerNumbers)
        // The kernel forgets every node (FORGET), then looks each up again.
        sb.ok("sync && echo 2 > /proc/sys/vm/drop_caches")
        XCTAssertEqual(numbers(), shown, "numbers changed between lookups")
        XCTAssertEqual(contents(), expected)
        sb.unmount(mp)
        mp = sb.mount(at: "again")
        q = Sandbox.quote(mp)
        XCTAssertEqual(contents(), expected)
        let again = numbers()
        XCTAssertEqual(again, shown, "numbers changed across a remount (the inner tmpfs kept its device number)")
    }

    /// A FIFO in place of the tree's mount lock `.pvmount`: the mount fails at once as a corrupt
    /// store (exit 9), instead of waiting for good in the open.
    func testFifoInPlaceOfTheMountLockIsACorruptStore() throws {
        let sb = Sandbox("pv-fifo-pvmount")
        sb.initStore()
        let trees = try FileManager.default.contentsOfDirectory(atPath: sb.store + "/users")
        XCTAssertEqual(trees.count, 1)
        let lock = sb.store + "/users/" + trees[0] + "/.pvmount"
        sb.ok("rm -f \(Sandbox.quote(lock)) && mkfifo \(Sandbox.quote(lock))")
        defer { _ = sb.run("timeout 2 sh -c ': > \(lock)'", timeout: 10) }
        let mp = sb.root + "/mnt-alice"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let r = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"], timeout: 20)
        if r.status == 0 { sb.mounts.append(mp) }
        assertFailure(r, 9, ".pvmount is not a regular file")
        XCTAssertFalse(Harness.isMounted(mp))
    }
}
