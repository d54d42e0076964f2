import Foundation
import XCTest

/// The writers the CLI sends through a live mount of the same account instead of the store
/// (docs/OFFLINE.md): `import -`, `import --class` and `class set` on a vault path. They used
/// to fail with 'store busy' while the vault was mounted.
final class OfflineLiveMountTests: XCTestCase {
    typealias T = OfflineCommandTests

    static func classOnMount(_ sb: Sandbox, _ path: String) -> String {
        sb.ok("getfattr --only-values -n user.photovault.class \(Sandbox.quote(path))")
    }

    /// Runs each writer that goes through a live mount (`import` of a tree into /new, `import -`,
    /// `class set`) as alice: each must exit with `status` and print `line` alone; `after`
    /// checks what it left, given its arguments.
    static func assertRoutedWritersRefused(_ sb: Sandbox, src: String, status: Int32, line: String,
                                           after: ([String]) -> Void = { _ in },
                                           file: StaticString = #filePath, lineNo: UInt = #line) {
        for (args, stdin) in [(["import", src, "/new/deeper"], nil), (["import", "-", "/new/s.txt"], "streamed\n"),
                              (["class", "set", "/c/src/notes.txt", "none"], nil)] {
            let r = sb.pv(args + ["--store", sb.store, "--user", "alice", "--passfile", sb.passfile], stdin: stdin)
            XCTAssertEqual(r.status, status, "\(args): \(r.stderr)", file: file, line: lineNo)
            XCTAssertEqual(r.stderr, line, "\(args)", file: file, line: lineNo)
            XCTAssertEqual(r.stdout, "", "\(args)", file: file, line: lineNo)
            after(args)
        }
    }

    func testStdinImportGoesThroughTheLiveMount() {
        let sb = Sandbox("pv-live-stdin")
        sb.initStore()
        let input = sb.root + "/in.bin"
        sb.ok("head -c 333333 /dev/urandom > \(Sandbox.quote(input))")
        let mp = sb.mount()

        let imp = sb.run(T.pvLine(sb, ["import", "-", "/streams/deep/in.bin"]) + " < \(Sandbox.quote(input))")
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertEqual(imp.stdout, "")
        XCTAssertEqual(imp.stderr, "imported through the live mount at \(mp)\n")
        // Readable on the mount at once, the same bytes; mode 0644 and parents 0700 as offline;
        // the temp file it was written under is gone.
        let file = Sandbox.quote(mp + "/streams/deep/in.bin")
        XCTAssertEqual(sb.ok("sha256sum < \(file)"), sb.ok("sha256sum < \(Sandbox.quote(input))"))
        XCTAssertEqual(sb.ok("stat -c %a \(file) \(Sandbox.quote(mp))/streams \(Sandbox.quote(mp))/streams/deep"), "644\n700\n700\n")
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))/streams/deep"), "in.bin\n")

        // An existing file needs --force, as offline; a directory is never replaced.
        let again = sb.run("echo other | " + T.pvLine(sb, ["import", "-", "/streams/deep/in.bin"]))
        XCTAssertEqual(again.status, 20, again.stderr)
        XCTAssertEqual(again.stderr, "photovault: already exists: /streams/deep/in.bin (use --force to overwrite)\n")
        let forced = sb.run("echo other | " + T.pvLine(sb, ["import", "--force", "-", "/streams/deep/in.bin"]))
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertEqual(sb.ok("cat \(file)"), "other\n")
        let onDir = sb.run("echo x | " + T.pvLine(sb, ["import", "--force", "-", "/streams/deep"]))
        XCTAssertEqual(onDir.status, 20, onDir.stderr)
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))/streams/deep"), "in.bin\n")

        // Everything is in the store, intact, once unmounted.
        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
        XCTAssertEqual(sb.ok(T.pvLine(sb, ["export", "/streams/deep/in.bin", "-"])), "other\n")
        sb.assertNoPlaintext(["streams", "in.bin", "other", "photovault-import"])
    }

    /// `import -` through the mount syncs what it changed in directories, as offline does: the
    /// directory its temp file was renamed in, and the parent of each directory it made. A
    /// failed fsync there (EIO, injected with strace on that directory only) is one line and
    /// exit 1, as offline, with the file in place. Neither was synced: "imported" could be
    /// undone by a crash (the rename lost, the file back under its temp name).
    func testStdinImportThroughTheMountSyncsTheDirectoriesItChanged() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let sb = Sandbox("pv-live-stdin-sync")
        sb.initStore()
        let mp = sb.mount()
        sb.ok("mkdir \(Sandbox.quote(mp))/streams")
        func importFailingFsync(of dir: String, _ dest: String) -> Harness.Result {
            sb.run("echo photo | /usr/bin/strace -f -o /dev/null -P \(Sandbox.quote(dir)) -e trace=fsync -e inject=fsync:error=EIO "
                   + T.pvLine(sb, ["import", "-", dest]))
        }
        let renamed = importFailingFsync(of: mp + "/streams", "/streams/in.txt")
        assertFailure(renamed, 1, "fsync the directory holding /streams/in.txt: Input/output error")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(mp))/streams/in.txt"), "photo\n", "the rename took effect")
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))/streams"), "in.txt\n")
        let made = importFailingFsync(of: mp, "/made/in.txt")
        assertFailure(made, 1, "fsync the directory holding made: Input/output error")
        // Without the fault both work.
        XCTAssertEqual(sb.run("echo again | " + T.pvLine(sb, ["import", "-", "/made/sub/in.txt"])).status, 0)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(mp))/made/sub/in.txt"), "again\n")
        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
    }

    /// Without --force an existing file is refused through the mount exactly as offline:
    /// exit 20 naming the first conflict in the offline order (sources as given, entries
    /// sorted), what comes before it copied, nothing after it, the existing file untouched.
    /// The vault's own symlinks may point anywhere: an import through the mount never follows
    /// one, as the offline import never does (it used to write plaintext where they pointed).
    func testImportThroughTheMountNeverFollowsAVaultSymlink() {
        let sb = Sandbox("pv-live-symlink")
        sb.initStore()
        let outside = sb.plainDir("outside"), src = sb.plainDir("src")
        let qo = Sandbox.quote(outside), qs = Sandbox.quote(src)
        sb.ok("mkdir \(qs)/d && printf 'NEW-CONTENT\\n' > \(qs)/d/a.txt && printf 'VICTIM\\n' > \(qo)/victim.txt")
        let mp = sb.mount()
        let qm = Sandbox.quote(mp)
        sb.ok("ln -s \(qo) \(qm)/l && mkdir \(qm)/d && ln -s \(qo)/victim.txt \(qm)/d/a.txt")
        // A symlink on the way to DEST is not a directory: refused, nothing written through it.
        assertFailure(T.pv(sb, ["import", src + "/d", "/l"]), 1, "/l: Not a directory")
        assertFailure(sb.run("echo x | " + T.pvLine(sb, ["import", "-", "/l/f.txt"])), 1, "/l: Not a directory")
        XCTAssertEqual(sb.ok("ls -A \(qo)"), "victim.txt\n")
        // --force over a symlink replaces the link, not the file it points to.
        let forced = T.pv(sb, ["import", "--force", src + "/d", "/"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertEqual(sb.ok("cat \(qo)/victim.txt"), "VICTIM\n")
        XCTAssertEqual(sb.ok("stat -c %F \(qm)/d/a.txt; cat \(qm)/d/a.txt"), "regular file\nNEW-CONTENT\n")
        sb.unmount(mp)
    }

    func testImportRefusesAnExistingFileThroughTheLiveMountAsOffline() {
        let (sb, src) = T.sandboxWithTree("pv-live-exists")
        XCTAssertEqual(T.pv(sb, ["import", src, "/off"]).status, 0)
        var mp = sb.mount()
        let first = T.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(first.stderr, "imported through the live mount at \(mp)\n")
        let imported = T.checksums(sb, mp + "/live/src")
        XCTAssertEqual(imported, T.checksums(sb, src))
        let bigBefore = sb.ok("sha256sum < \(Sandbox.quote(mp))/live/src/2024/big.bin")
        sb.unmount(mp)

        // New entries before and after the first conflict (2024/big.bin), which changes too.
        let q = Sandbox.quote(src)
        sb.ok("""
        set -e
        echo before > \(q)/0new.txt; echo before > \(q)/2024/a-new.txt
        echo after > \(q)/2024/zz-new.txt; echo after > \(q)/zz.txt; mkdir \(q)/zz-dir
        head -c 1000 /dev/urandom > \(q)/2024/big.bin
        """)
        let offline = T.pv(sb, ["import", src, "/off"])
        XCTAssertEqual(offline.status, 20, offline.stderr)
        XCTAssertEqual(offline.stderr, "photovault: already exists: /off/src/2024/big.bin (use --force to overwrite)\n")

        mp = sb.mount()
        let again = T.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(again.status, 20, again.stderr)
        XCTAssertEqual(again.stderr, "photovault: already exists: /live/src/2024/big.bin (use --force to overwrite)\n")
        // The same files as offline: the two before the conflict, none after, big.bin unchanged.
        XCTAssertEqual(T.checksums(sb, mp + "/live/src"), T.checksums(sb, mp + "/off/src"))
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp))/live/src && cat 0new.txt 2024/a-new.txt && ls -A"),
                       "before\nbefore\n0new.txt\n2024\nempty\nempty-dir\nnotes.txt\nphoto.jpg\nrun.sh\n")
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))/live/src/2024"), "a-new.txt\nbig.bin\nraw\n")
        XCTAssertEqual(sb.ok("sha256sum < \(Sandbox.quote(mp))/live/src/2024/big.bin"), bigBefore)

        // A file in the way of a directory is refused too (offline does not merge into it),
        // after the missing 0new.txt before it is copied again.
        sb.ok("cd \(Sandbox.quote(mp))/live/src && rm -r 0new.txt 2024 && echo file > 2024")
        let inTheWay = T.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(inTheWay.status, 20, inTheWay.stderr)
        XCTAssertEqual(inTheWay.stderr, "photovault: already exists: /live/src/2024 (use --force to overwrite)\n")
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp))/live/src && cat 2024 0new.txt"), "file\nbefore\n")
        sb.ok("rm \(Sandbox.quote(mp))/live/src/2024")

        // --force copies everything, replacing the existing files.
        let forced = T.pv(sb, ["import", "--force", src, "/live"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertEqual(T.checksums(sb, mp + "/live/src"), T.checksums(sb, src))
        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
    }

    /// FIFOs, sockets and devices in a source are skipped through the mount as offline
    /// (cp -R used to recreate them in the vault): each named on stderr with the offline
    /// line, in the offline order, exit 26, everything else copied with its modes and
    /// times, also in a directory that held a skipped entry. Export, which reads the store
    /// beside the mount, skips such entries made on the mount as it does offline.
    func testImportThroughTheMountSkipsSpecialFilesAsOffline() {
        let sb = Sandbox("pv-live-special")
        sb.initStore()
        let src = sb.plainDir("src"), q = Sandbox.quote(src)
        sb.ok("""
        set -e
        mkdir -p \(q)/album/deep \(q)/plain
        printf a > \(q)/album/a.jpg; printf b > \(q)/album/deep/b.jpg; printf c > \(q)/plain/c.jpg
        mkfifo \(q)/album/pipe \(q)/album/deep/fifo
        mknod \(q)/album/null c 1 3
        chmod 0750 \(q)/album/deep; chmod 0751 \(q)/album; chmod 0705 \(q)/plain
        touch -d '2016-01-01 00:00:00.25' \(q)/album/deep \(q)/album \(q)/plain \(q)
        """)
        let offline = T.pv(sb, ["import", src, "/off"])
        XCTAssertEqual(offline.status, 26, offline.stderr)
        let skips = ["/album/deep/fifo", "/album/null", "/album/pipe"]
        func lines(_ at: String) -> String {
            skips.map { "photovault: skipped \(at)/src\($0): not a regular file, directory or symlink\n" }.joined()
        }
        XCTAssertTrue(offline.stderr.hasPrefix(lines("/off")), offline.stderr)

        let mp = sb.mount()
        let live = T.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(live.status, 26, live.stderr)
        XCTAssertEqual(live.stderr, lines("/live") + "imported through the live mount at \(mp); 3 skipped (named above)\n")
        XCTAssertEqual(sb.ok("find \(Sandbox.quote(mp)) ! -type f ! -type d"), "")
        XCTAssertEqual(T.listing(sb, mp + "/live/src"), T.listing(sb, mp + "/off/src"))
        XCTAssertTrue(T.listing(sb, mp + "/live/src").contains("album/deep drwxr-x--- - 1451606400.2500000000"))
        // With --force the same entries are skipped again, the rest replaced.
        let forced = T.pv(sb, ["import", "--force", src, "/live"])
        XCTAssertEqual(forced.status, 26, forced.stderr)
        XCTAssertEqual(forced.stderr, lines("/live") + "imported through the live mount at \(mp); 3 skipped (named above)\n")
        XCTAssertEqual(sb.ok("find \(Sandbox.quote(mp)) ! -type f ! -type d"), "")

        sb.ok("mkfifo \(Sandbox.quote(mp))/live/src/album/made-on-mount")
        let exp = T.pv(sb, ["export", "/live/src/album", sb.plainDir("out")])
        XCTAssertEqual(exp.status, 26, exp.stderr)
        XCTAssertTrue(exp.stderr.hasPrefix("photovault: skipped /live/src/album/made-on-mount: not a regular file, directory or symlink in the store\n"),
                      exp.stderr)
        sb.unmount(mp)
        let fsck = T.pv(sb, ["fsck"])   // the FIFO made on the mount is a special file, not damage
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
        XCTAssertTrue(fsck.stdout.contains(" 1 special file, "), fsck.stdout)
        sb.assertNoPlaintext(["album", "deep", "plain"])
    }

    /// With --force a file is still never replaced by a directory, nor a directory by a file,
    /// through the mount as offline: exit 20 with one line naming it (it used to be cp's
    /// "cannot overwrite", exit 1), what comes before it copied, the entry in the way kept.
    func testForcedImportThroughTheMountRefusesAFileDirectoryClashAsOffline() {
        let sb = Sandbox("pv-live-clash")
        sb.initStore()
        let src = sb.plainDir("src"), q = Sandbox.quote(src)
        sb.ok("mkdir \(q)/a-dir && echo in > \(q)/a-dir/f && echo file > \(q)/b-file && echo z > \(q)/z")
        let mp = sb.mount()
        let qm = Sandbox.quote(mp)
        for (at, inTheWay) in [("/one", "a-dir"), ("/two", "b-file")] {
            sb.ok("cd \(qm) && mkdir -p .\(at)/src && "
                  + (inTheWay == "a-dir" ? "echo old > .\(at)/src/a-dir" : "mkdir .\(at)/src/b-file"))
            let r = T.pv(sb, ["import", "--force", src, at])
            assertFailure(r, 20, "already exists: \(at)/src/\(inTheWay)", at)
            // Offline order: a-dir, b-file, z; what precedes the clash is copied, nothing after.
            XCTAssertEqual(sb.ok("cd \(qm)\(at)/src && ls -A && stat -c %F \(inTheWay)"),
                           (inTheWay == "a-dir" ? "a-dir\nregular file\n" : "a-dir\nb-file\ndirectory\n"))
        }
        XCTAssertEqual(sb.ok("cat \(qm)/one/src/a-dir \(qm)/two/src/a-dir/f"), "old\nin\n")
        sb.unmount(mp)
        // Offline gives the same.
        let off = T.pv(sb, ["import", "--force", src, "/one"])
        assertFailure(off, 20, "already exists: /one/src/a-dir")
    }

    /// The same tree imported offline and through the mount gives the same entries: modes,
    /// mtimes and exactly the `user.*` extended attributes offline seals, on files and
    /// directories (the live route used to copy none). Neither copies other namespaces nor
    /// the attributes the mount answers itself: a source's `user.photovault.class` is not
    /// honoured (the class is --class or the directory's default) and was stored offline,
    /// where the mount then listed the attribute twice.
    func testImportThroughTheMountCopiesUserXattrsAsOffline() {
        let sb = Sandbox("pv-live-xattr")
        sb.initStore()
        let src = sb.plainDir("src"), q = Sandbox.quote(src)
        let tag = "LIX\(UUID().uuidString.prefix(8))"
        MountXattrCopyTests.makeTree(sb, at: src, tag: tag)
        sb.ok("""
        set -e
        cd \(q)
        mkdir ro-dir && echo r > ro-dir/f && setfattr -n user.ro-note -v "RO-\(tag)" ro-dir ro-dir/f
        chmod 0444 ro-dir/f && chmod 0555 ro-dir
        setfattr -n user.photovault.class -v none notes.txt
        setfattr -n user.xdg.robots.index -v true plain-dir
        setfattr -n trusted.secret -v "TRUSTED-\(tag)" notes.txt
        touch -d '2013-01-01 00:00:00.5' ro-dir ro-dir/f . plain-dir
        """)
        XCTAssertEqual(T.pv(sb, ["import", src, "/off"]).status, 0)
        let mp = sb.mount()
        let live = T.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(live.status, 0, live.stderr)
        XCTAssertEqual(live.stderr, "imported through the live mount at \(mp)\n")

        let expected = MountXattrCopyTests.xattrs(sb, src)
        XCTAssertTrue(expected.contains("./ro-dir/f user.ro-note="), expected)
        let off = MountXattrCopyTests.xattrs(sb, mp + "/off/src", includingVirtual: true)
        XCTAssertEqual(MountXattrCopyTests.xattrs(sb, mp + "/live/src", includingVirtual: true), off)
        // Exactly the source's user.* attributes besides the virtual ones, each once.
        let real = off.split(separator: "\n").filter { $0.range(of: MountXattrCopyTests.virtualPattern, options: .regularExpression) == nil }
        XCTAssertEqual(real.map(String.init), expected.split(separator: "\n").map(String.init)
            .filter { !$0.contains("user.photovault.class=") && !$0.contains("user.xdg.robots.") })
        // The source's class attribute is neither stored nor honoured: the file has the
        // directory's default class, read by name (the mount lists no virtual attribute).
        XCTAssertFalse(off.contains("user.photovault.class="), off)
        for dir in ["off", "live"] {
            XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(Sandbox.quote(mp))/\(dir)/src/notes.txt"), "complete", dir)
        }
        XCTAssertEqual(T.listing(sb, mp + "/live/src"), T.listing(sb, mp + "/off/src"))
        XCTAssertEqual(T.listing(sb, mp + "/live/src"), T.listing(sb, src))
        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
        sb.assertNoPlaintext([tag, "ro-note", "TRUSTED-"])
    }

    /// A directory the user already had keeps its mode through the mount, as offline: the
    /// one `cp -R` used to give a directory it merged into its source's mode and mtime.
    func testImportThroughTheMountKeepsTheModeOfAnExistingDirectoryAsOffline() {
        let (sb, src) = T.sandboxWithTree("pv-live-merge")   // src/2024 is 0755, 2016-01-01
        let mp = sb.mount()
        let qm = Sandbox.quote(mp)
        sb.ok("mkdir -p \(qm)/off/src/2024 \(qm)/live/src/2024 && chmod 0711 \(qm)/off/src/2024 \(qm)/live/src/2024")
        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["import", src, "/off"]).status, 0)
        _ = sb.mount()
        let live = T.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(live.status, 0, live.stderr)
        for at in ["off", "live"] {
            let line = sb.ok("stat -c '%a %Y' \(qm)/\(at)/src/2024")
            XCTAssertTrue(line.hasPrefix("711 "), "\(at): \(line)")
            XCTAssertNotEqual(line, "711 1451606400\n", at)   // not the source's mtime: entries were added
        }
        // Everything else as offline.
        XCTAssertEqual(T.listing(sb, mp + "/live/src").split(separator: "\n").filter { !$0.hasPrefix("2024 ") },
                       T.listing(sb, mp + "/off/src").split(separator: "\n").filter { !$0.hasPrefix("2024 ") })
        sb.unmount(mp)
    }

    /// A source tree nested 1,900 directories deep (as deep as its paths stay under
    /// PATH_MAX) is imported through the live mount whole, and so is one whose bottom holds a
    /// FIFO (skipped: every directory above it is then made and finished one by one): the
    /// walk that plans the copy, and the one that lists what it copied, recursed once per
    /// level and crashed (SIGSEGV, stack overflow) at some 1,650 levels.
    func testADeeplyNestedSourceIsImportedThroughTheLiveMount() {
        let sb = Sandbox("pv-live-deep")
        sb.initStore()
        let mp = sb.mount()
        let depth = 1900
        let chain = Array(repeating: "d", count: depth).joined(separator: "/")
        sb.ok("cd \(Sandbox.quote(sb.root)) && mkdir -p src/\(chain) fifo/\(chain) && printf deep > src/\(chain)/bottom.txt "
              + "&& printf deep > fifo/\(chain)/bottom.txt && mkfifo fifo/\(chain)/pipe && chmod 750 fifo/d")
        let imp = sb.run("cd \(Sandbox.quote(sb.root)) && " + T.pvLine(sb, ["import", "src", "/"]), timeout: 120)
        XCTAssertEqual(imp.status, 0, String(imp.stderr.prefix(2000)))
        XCTAssertEqual(imp.stderr, "imported through the live mount at \(mp)\n")
        let skipped = sb.run("cd \(Sandbox.quote(sb.root)) && " + T.pvLine(sb, ["import", "fifo", "/"]), timeout: 120)
        XCTAssertEqual(skipped.status, 26, String(skipped.stderr.prefix(2000)))
        XCTAssertTrue(skipped.stderr.contains("/fifo/\(chain)/pipe"), String(skipped.stderr.prefix(2000)))
        for top in ["src", "fifo"] {
            XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp))/\(top)/\(chain) && cat bottom.txt"), "deep", top)
            XCTAssertEqual(sb.ok("find \(Sandbox.quote(mp))/\(top) -type d | wc -l"), "\(depth + 1)\n", top)
        }
        // The directories made one by one got their source's mode after their entries.
        XCTAssertEqual(sb.ok("stat -c %a \(Sandbox.quote(mp))/fifo/d"), "750\n")
    }

    func testImportWithClassThroughTheLiveMount() {
        let (sb, src) = T.sandboxWithTree("pv-live-class")
        let mp = sb.mount()

        let imp = T.pv(sb, ["import", "--class", "complete-unless-open", src, "/v"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertEqual(imp.stderr, "imported through the live mount at \(mp)\n")
        // Every file gets the class; directories keep their parent's default (offline too).
        for f in ["notes.txt", "photo.jpg", "empty", "2024/big.bin", "2024/raw/IMG_0001.CR2"] {
            XCTAssertEqual(Self.classOnMount(sb, mp + "/v/src/" + f), "complete-unless-open", f)
        }
        XCTAssertEqual(Self.classOnMount(sb, mp + "/v/src/2024"), "complete")
        // `class get` reads the store beside the mount and sees the same.
        XCTAssertEqual(T.pv(sb, ["class", "get", "/v/src/2024/big.bin"]).stdout, "complete-unless-open\n")
        // Setting the class after the copy kept the bytes, modes and times.
        XCTAssertEqual(T.checksums(sb, mp + "/v/src"), T.checksums(sb, src))
        XCTAssertEqual(T.listing(sb, mp + "/v/src"), T.listing(sb, src))

        // From standard input, the class is set before the first byte.
        let stdin = sb.run("echo scan | " + T.pvLine(sb, ["import", "--class", "none", "-", "/v/scan.txt"]))
        XCTAssertEqual(stdin.status, 0, stdin.stderr)
        XCTAssertEqual(Self.classOnMount(sb, mp + "/v/scan.txt"), "none")
        XCTAssertEqual(T.pv(sb, ["class", "get", "/v/scan.txt"]).stdout, "none\n")

        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["class", "get", "/v/src/notes.txt"]).stdout, "complete-unless-open\n")
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
    }

    func testClassSetOnAVaultPathGoesThroughTheLiveMount() {
        let (sb, src) = T.importedTree("pv-live-classset", at: "/c")
        let mp = sb.mount()

        // A directory's default, as offline; existing files keep theirs.
        XCTAssertEqual(T.pv(sb, ["class", "set", "/c/src/2024", "until-first-auth"]).status, 0)
        XCTAssertEqual(Self.classOnMount(sb, mp + "/c/src/2024"), "until-first-auth")
        XCTAssertEqual(Self.classOnMount(sb, mp + "/c/src/2024/big.bin"), "complete")

        let before = T.listing(sb, mp + "/c/src")
        let set = T.pv(sb, ["class", "set", "/c/src/notes.txt", "none"])
        XCTAssertEqual(set.status, 0, set.stderr)
        XCTAssertEqual(set.stdout, "/c/src/notes.txt: none\n")
        XCTAssertEqual(Self.classOnMount(sb, mp + "/c/src/notes.txt"), "none")
        XCTAssertEqual(T.pv(sb, ["class", "get", "/c/src/notes.txt"]).stdout, "none\n")
        // A file's class change is not a content change: bytes, modes and times stay.
        XCTAssertEqual(T.listing(sb, mp + "/c/src"), before)
        XCTAssertEqual(T.checksums(sb, mp + "/c/src"), T.checksums(sb, src))

        let missing = T.pv(sb, ["class", "set", "/c/nope", "none"])
        XCTAssertEqual(missing.status, 24)
        XCTAssertEqual(missing.stderr, "photovault: not found: /c/nope\n")
        sb.ok("ln -s notes.txt \(Sandbox.quote(mp))/c/src/link")
        let link = T.pv(sb, ["class", "set", "/c/src/link", "none"])
        XCTAssertEqual(link.status, 2)
        XCTAssertEqual(link.stderr, "photovault: /c/src/link is neither a file nor a directory\n")

        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["class", "get", "/c/src/notes.txt"]).stdout, "none\n")
        XCTAssertEqual(T.pv(sb, ["class", "get", "/c/src/2024"]).stdout, "until-first-auth\n")
    }

    /// A mount locked with `--on-lock stay` refuses new `complete` files and class changes of
    /// `complete` ones, so what is routed through it is refused before anything is made, with
    /// exit 23 ("the vault is locked") and one line saying what to do. Import used to fail
    /// halfway with cp's "Permission denied" (exit 1) and leave the directories it had made;
    /// `import -` the same; `class set` with "Permission denied". After `unlock` all go through.
    func testWritesRoutedThroughALockedMountAreRefusedBeforeAnythingIsMade() throws {
        let (sb, src) = T.importedTree("pv-live-locked", at: "/c")
        let mp = sb.mount(extra: ["--on-lock", "stay"])
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        XCTAssertEqual(MountProbe.state(sb, mp), "locked")
        let line = "photovault: the vault of alice is mounted at \(mp) and locked: run 'photovault unlock \(mp)' "
            + "and then this command again (it goes through the mount; nothing was changed)\n"
        Self.assertRoutedWritersRefused(sb, src: src, status: 23, line: line)
        XCTAssertEqual(sb.pv(["unlock", mp, "--user", "alice", "--passfile", sb.passfile]).status, 0)
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))"), "c\n", "a refused import made something")
        XCTAssertEqual(Self.classOnMount(sb, mp + "/c/src/notes.txt"), "complete")
        let imp = T.pv(sb, ["import", src, "/new/deeper"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertEqual(T.checksums(sb, mp + "/new/deeper/src"), T.checksums(sb, src))
        XCTAssertEqual(T.pv(sb, ["class", "set", "/c/src/notes.txt", "none"]).status, 0)
        XCTAssertEqual(Self.classOnMount(sb, mp + "/c/src/notes.txt"), "none")
        sb.unmount(mp)
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
    }

    /// After a lock, a daemon whose files are still open detaches its mount. It used to wait
    /// for them, still registered, while its mountpoint was an ordinary directory again, and
    /// an import then said "imported through the live mount" and left the photos in plaintext
    /// in the bare mountpoint directory, outside the vault. The daemon now ends at once (its
    /// keys are gone, the open file is cut off: issue 35); an import that comes meanwhile
    /// waits for it, or is refused (exit 16), and never writes into the bare mountpoint.
    func testWritesWhileTheMountIsClosingAfterALockNeverLandOutsideTheVault() {
        let (sb, src) = T.importedTree("pv-live-closing", at: "/c")
        let mp = sb.mount()
        let holder = sb.ok("setsid sleep 60 3<\(Sandbox.quote(mp + "/c/src/notes.txt")) >/dev/null 2>&1 </dev/null & echo $!")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        defer { sb.run("kill \(holder)") }
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        let during = T.pv(sb, ["import", src, "/during"])
        XCTAssertTrue(during.status == 0 || during.status == 16, during.stderr)
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))"), "", "the import wrote into the bare mountpoint")
        XCTAssertTrue(Harness.waitUntil(10) { !sb.pv(["status"]).stdout.contains(mp) },
                      "the daemon must end although a file is still open")
        let offline = T.pv(sb, ["import", src, "/later"])
        XCTAssertEqual(offline.status, 0, offline.stderr)
        XCTAssertTrue(offline.stderr.hasPrefix("imported "), offline.stderr)
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))"), "")
        XCTAssertEqual(T.pv(sb, ["class", "get", "/c/src/notes.txt"]).stdout, "complete\n")
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
        sb.assertNoPlaintext(["private notes"])
    }

    /// Mounts alice's vault, keeps a `complete-unless-open` file open for writing there, locks
    /// it: the mount stays attached in its lock grace, "closing" for as long as the file is
    /// open (up to 60 s). (Without `grace`, a file open for reading: the daemon detaches its
    /// mount and ends at once, issue 35, so there is nothing to see.) Returns the mountpoint,
    /// the pid of the process holding the file (kill it to let the daemon go) and the line a
    /// command refused meanwhile prints.
    static func mountClosingAfterALock(_ sb: Sandbox, grace: Bool = false, file: StaticString = #filePath, line: UInt = #line)
        -> (String, String, String) {
        if grace { XCTAssertEqual(T.pv(sb, ["class", "set", "/c/src", "complete-unless-open"]).status, 0, file: file, line: line) }
        let mp = sb.mount(extra: grace ? ["--lock-grace", "60s"] : [])
        let open = grace ? "3>>\(Sandbox.quote(mp + "/c/src/being-written.txt"))" : "3<\(Sandbox.quote(mp + "/c/src/notes.txt"))"
        let holder = sb.ok("setsid sleep 60 \(open) >/dev/null 2>&1 </dev/null & echo $!")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0, file: file, line: line)
        if !grace {
            XCTAssertTrue(Harness.waitUntil(5) { !Harness.isMounted(mp) }, "the lock did not detach the mount", file: file, line: line)
        }
        XCTAssertEqual(MountProbe.state(sb, mp), grace ? "grace" : "closing", file: file, line: line)
        let pid = MountProbe.daemonPID(sb, mp) ?? 0
        return (mp, holder, "photovault: the vault at \(mp) is still closing after a lock (photovault process \(pid) waits "
                + "for the files open there to be closed): try again once 'photovault status' no longer lists it\n")
    }

    /// The same during a lock grace (files open for writing may finish, no new open succeeds,
    /// then the mount goes): the import failed halfway with cp's "Permission denied" (exit 1),
    /// leaving the directories it had made in the vault.
    func testWritesDuringALockGraceAreRefusedBeforeAnythingIsMade() {
        let (sb, src) = T.importedTree("pv-live-grace", at: "/c")
        let (mp, holder, line) = Self.mountClosingAfterALock(sb, grace: true)
        Self.assertRoutedWritersRefused(sb, src: src, status: 16, line: line)
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(mp))"), "c\n", "a refused import made something")
        sb.ok("kill \(holder)")
        XCTAssertTrue(Harness.waitUntil(10) { !sb.pv(["status"]).stdout.contains(mp + "\t") }, "the daemon did not go")
        XCTAssertEqual(T.pv(sb, ["fsck"]).status, 0)
    }

    /// `user remove` and `fsck --repair` met such a daemon's locks too: they said "the vault
    /// of alice is mounted at MP: unmount it before ...", which `unmount` then contradicted
    /// ("no vault is mounted at MP", exit 18), and later "still closing" for as long as a file
    /// stayed open there. The daemon now ends once its mount is detached (issue 35): they, and
    /// a mount from another session, work as soon as it has, the file still open.
    func testRemoveAndRepairAfterALockWithAFileStillOpenWork() {
        let (sb, _) = T.importedTree("pv-live-closing-remove", at: "/c")
        let mp = sb.mount()
        let holder = sb.ok("setsid sleep 60 3<\(Sandbox.quote(mp + "/c/src/notes.txt")) >/dev/null 2>&1 </dev/null & echo $!")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        defer { sb.run("kill \(holder)") }
        XCTAssertEqual(sb.pv(["lock", mp]).status, 0)
        XCTAssertTrue(Harness.waitUntil(10) { !sb.pv(["status"]).stdout.contains(mp) },
                      "the daemon must end although a file is still open")
        XCTAssertEqual(sb.run("kill -0 \(holder)").status, 0, "the file must still be open")
        let common = ["--store", sb.store, "--passfile", sb.passfile]
        let repair = sb.pv(["fsck", "--repair", "--user", "alice"] + common)
        XCTAssertEqual(repair.status, 0, repair.stderr)
        var other = sb.env
        other["XDG_RUNTIME_DIR"] = sb.root + "/other-session"
        XCTAssertEqual(mkdir(sb.root + "/other-session", 0o700), 0)
        let mp2 = sb.plainDir("mnt-elsewhere")
        let again = Harness.pv(["mount", mp2] + common + ["--user", "alice", "--no-dbus"], env: other)
        XCTAssertEqual(again.status, 0, again.stderr)
        sb.mounts.append(mp2)
        XCTAssertEqual(Harness.pv(["unmount", mp2], env: other).status, 0)
        let remove = sb.pv(["user", "remove", "alice", "--delete-photos"] + common)
        XCTAssertEqual(remove.status, 0, remove.stderr)
    }

    /// `class set/get/list` on a path under a mount made from another session (another
    /// runtime directory, as under cron or sudo) use the mount's xattr as for one of this
    /// session. Only this session's mounts were recognised: the path was taken for a vault
    /// path ("not found: /tmp", exit 24), and `class set` of the vault path was told "run this
    /// command on the mount", which then failed the same way.
    func testClassOnAPathOfAMountFromAnotherSession() {
        let (sb, _) = T.importedTree("pv-live-othersession", at: "/c")
        let mp = sb.mount()
        var other = sb.env
        other["XDG_RUNTIME_DIR"] = sb.root + "/other-session"
        XCTAssertEqual(mkdir(sb.root + "/other-session", 0o700), 0)
        let pv = { (args: [String]) in Harness.pv(args + ["--store", sb.store, "--user", "alice", "--passfile", sb.passfile], env: other) }
        let viaVaultPath = pv(["class", "set", "/c/src/notes.txt", "none"])
        XCTAssertEqual(viaVaultPath.status, 11, viaVaultPath.stderr)
        XCTAssertEqual(viaVaultPath.stderr, "photovault: the vault of alice is mounted at \(mp): run this command on the mount or unmount first\n")
        let set = pv(["class", "set", mp + "/c/src/notes.txt", "none"])
        XCTAssertEqual(set.status, 0, set.stderr)
        XCTAssertEqual(set.stdout, "\(mp)/c/src/notes.txt: none\n")
        XCTAssertEqual(Self.classOnMount(sb, mp + "/c/src/notes.txt"), "none")
        let get = pv(["class", "get", mp + "/c/src/notes.txt"])
        XCTAssertEqual(get.status, 0, get.stderr)
        XCTAssertEqual(get.stdout, "none\n")
        let list = pv(["class", "list", mp + "/c/src/2024"])
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertEqual(list.stdout, "complete\t/c/src/2024/big.bin\ncomplete\t/c/src/2024/raw\n")
        sb.unmount(mp)
    }

    /// `class get` and `class list` print the same through the mount as offline (which runs
    /// beside the mount): full vault paths, and `-` for a symlink, never its target's class.
    func testClassGetAndListPrintTheSameThroughTheMountAsOffline() {
        let sb = Sandbox("pv-live-classlist")
        sb.initStore()
        let mp = sb.mount()
        let l = Sandbox.quote(mp + "/l")
        sb.ok("""
        mkdir \(l) \(l)/sub && echo photo > \(l)/a.jpg && ln -s a.jpg \(l)/link
        setfattr -n user.photovault.class -v none \(l)/a.jpg
        setfattr -n user.photovault.class -v until-first-auth \(l)/sub
        """)
        let expected = "none\t/l/a.jpg\n-\t/l/link\nuntil-first-auth\t/l/sub\n"
        let onMount = T.pv(sb, ["class", "list", mp + "/l"])
        XCTAssertEqual(onMount.status, 0, onMount.stderr)
        XCTAssertEqual(onMount.stdout, expected)
        XCTAssertEqual(T.pv(sb, ["class", "list", "/l"]).stdout, expected)
        XCTAssertEqual(T.pv(sb, ["class", "list", mp]).stdout, "complete\t/l\n")
        XCTAssertEqual(T.pv(sb, ["class", "get", mp + "/l/link"]).stdout, "-\n")
        XCTAssertEqual(T.pv(sb, ["class", "get", "/l/link"]).stdout, "-\n")
        XCTAssertEqual(T.pv(sb, ["class", "get", mp + "/l/a.jpg"]).stdout, "none\n")
    }
}
