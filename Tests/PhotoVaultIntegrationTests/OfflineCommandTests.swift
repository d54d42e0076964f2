import Foundation
import XCTest

/// `photovault import`, `export`, `fsck` and `class` run as commands (the built binary, a
/// passfile, real files), without a mount and next to a live one. The store-level
/// behaviour is in PhotoVaultStoreTests (Offline*Tests); these check what a user sees:
/// exit codes, the lines printed, and the files that come out.
final class OfflineCommandTests: XCTestCase {
    /// Runs `photovault ARGS --store S --user alice --passfile P`.
    static func pv(_ sb: Sandbox, _ args: [String]) -> Harness.Result {
        sb.pv(args + ["--store", sb.store, "--user", "alice", "--passfile", sb.passfile])
    }

    /// The same command line for a bash script (for redirections).
    static func pvLine(_ sb: Sandbox, _ args: [String]) -> String {
        ([Harness.binary] + args + ["--store", sb.store, "--user", "alice", "--passfile", sb.passfile])
            .map(Sandbox.quote).joined(separator: " ")
    }

    /// About 430 KB in files, with a subdirectory, distinct modes and nanosecond mtimes.
    static func makeTree(_ sb: Sandbox, at dir: String) {
        sb.ok("""
        set -e
        cd \(Sandbox.quote(dir))
        mkdir -p 2024/raw empty-dir
        head -c 250000 /dev/urandom > 2024/big.bin
        head -c 120000 /dev/urandom > 2024/raw/IMG_0001.CR2
        head -c 60000 /dev/urandom > photo.jpg; chmod 0444 photo.jpg
        printf 'private notes\\n' > notes.txt; chmod 0600 notes.txt
        printf '#!/bin/sh\\necho hi\\n' > run.sh; chmod 0755 run.sh
        : > empty
        chmod 0750 2024/raw; chmod 0700 empty-dir
        touch -d '2015-05-06 07:08:09.123456789' 2024/big.bin notes.txt
        touch -d '1999-12-31 23:59:59.000000001' photo.jpg 2024/raw/IMG_0001.CR2
        touch -d '2016-01-01 00:00:00.25' 2024/raw 2024 empty-dir .
        """)
    }

    /// A fresh store with an empty account and the `makeTree` tree in a local `src`;
    /// returns the sandbox and `src`.
    static func sandboxWithTree(_ name: String) -> (Sandbox, String) {
        let sb = Sandbox(name)
        sb.initStore()
        let src = sb.plainDir("src")
        makeTree(sb, at: src)
        return (sb, src)
    }

    /// A fresh store whose account holds the `makeTree` tree imported as `vaultDir`/src;
    /// returns the sandbox and the local tree.
    static func importedTree(_ name: String, at vaultDir: String) -> (Sandbox, String) {
        let sb = Sandbox(name)
        sb.initStore()
        let src = sb.plainDir("src")
        makeTree(sb, at: src)
        let r = pv(sb, ["import", src, vaultDir])
        XCTAssertEqual(r.status, 0, r.stderr)
        return (sb, src)
    }

    /// `path mode size mtime(ns)` of every entry below `dir` (directories without a size), sorted.
    static func listing(_ sb: Sandbox, _ dir: String) -> String {
        sb.ok("cd \(Sandbox.quote(dir)) && find . -mindepth 1 \\( -type d -printf '%P %M - %T@\\n' \\) "
              + "-o -printf '%P %M %s %T@\\n' | LC_ALL=C sort")
    }

    static func checksums(_ sb: Sandbox, _ dir: String) -> String { MountXattrCopyTests.checksums(sb, dir) }

    /// A sandbox whose store is a 3 MB tmpfs (unmounted when `test` ends), with an empty
    /// account: an import of a few MB fills it. Needs root.
    static func sandboxWithSmallStore(_ name: String, _ test: XCTestCase) -> Sandbox {
        let sb = Sandbox(name)
        sb.ok("mkdir \(Sandbox.quote(sb.store)) && mount -t tmpfs -o size=3m,mode=0700 tmpfs \(Sandbox.quote(sb.store))")
        // The block captures the paths, not the sandbox: swift-corelibs-xctest keeps a test
        // case's teardown blocks for the whole run, so a sandbox they held was never
        // deinitialised and its directory stayed in /tmp after every run.
        let (root, store) = (sb.root, sb.store)
        test.addTeardownBlock {
            _ = Harness.run(["umount", "-l", store])
            _ = Harness.run(["rm", "-rf", root], timeout: 60)
        }
        sb.initStore()
        return sb
    }

    func testImportThenExportKeepsBytesModesAndTimes() {
        let sb = Sandbox("pv-offline-rt")
        sb.initStore()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        Self.makeTree(sb, at: src)

        let imp = Self.pv(sb, ["import", src, "/albums"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertTrue(imp.stderr.hasPrefix("imported 6 files, 4 directories, 0 symlinks, "), imp.stderr)
        let exp = Self.pv(sb, ["export", "/albums/src", out])
        XCTAssertEqual(exp.status, 0, exp.stderr)
        XCTAssertTrue(exp.stderr.hasPrefix("exported 6 files, 4 directories, 0 symlinks, "), exp.stderr)

        let expected = Self.listing(sb, src)
        XCTAssertTrue(expected.contains("notes.txt -rw------- 14 1430896089.1234567890"), expected)
        XCTAssertTrue(expected.contains("2024/raw drwxr-x--- - 1451606400.2500000000"), expected)
        XCTAssertEqual(Self.listing(sb, out + "/src"), expected)
        let sums = Self.checksums(sb, src)
        XCTAssertEqual(sums.split(separator: "\n").count, 6, sums)
        XCTAssertEqual(Self.checksums(sb, out + "/src"), sums)
        sb.assertNoPlaintext(["private notes", "IMG_0001", "big.bin", "albums"])
    }

    /// Attribute names are bytes: `import` stopped at a file with a name that is not UTF-8
    /// (it asked for the name decoded, U+FFFD, which the file does not have: ENODATA), an
    /// import through the live mount skipped such attributes without a word, and `export`
    /// would have written them under the U+FFFD name, two of them as one.
    func testImportAndExportKeepXattrNamesThatAreNotUTF8() {
        let sb = Sandbox("pv-offline-xbytes")
        sb.initStore()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        MountXattrCopyTests.makePhotoWithNamesNotUTF8(sb, src + "/photo.jpg")
        let expected = MountXattrCopyTests.xattrs(sb, src)
        XCTAssertEqual(expected.split(separator: "\n").count, 3, expected)

        let imp = Self.pv(sb, ["import", src + "/photo.jpg", "/offline"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        let exp = Self.pv(sb, ["export", "/offline/photo.jpg", out])
        XCTAssertEqual(exp.status, 0, exp.stderr)
        XCTAssertEqual(MountXattrCopyTests.xattrs(sb, out), expected)
        XCTAssertEqual(sb.ok("getfattr --only-values -n $'user.\\xff' \(Sandbox.quote(out))/photo.jpg"), "first-value")

        // On the mount, and imported through it (import --class goes through a live mount).
        let mp = sb.mount()
        XCTAssertEqual(MountXattrCopyTests.xattrs(sb, mp + "/offline"), expected)
        let live = Self.pv(sb, ["import", "--class", "none", src + "/photo.jpg", "/live"])
        XCTAssertEqual(live.status, 0, live.stderr)
        XCTAssertTrue(live.stderr.contains("through the live mount"), live.stderr)
        XCTAssertEqual(MountXattrCopyTests.xattrs(sb, mp + "/live"), expected)
        sb.unmount(mp)
        sb.assertNoPlaintext(["first-value", "second-value", "latin1-name"])
    }

    /// Export onto a full device: exit 19 with one line naming the destination (not the
    /// store, which export never writes), no temp file left behind, earlier files intact.
    func testExportOntoAFullDeviceNamesTheDestination() throws {
        XCTAssertEqual(getuid(), 0, "mounting a tmpfs needs root")
        let sb = Sandbox("pv-offline-full")
        sb.initStore()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let qs = Sandbox.quote(src)
        sb.ok("printf 'FULLDEST-SMALL\\n' > \(qs)/a-small.txt && head -c 3000000 /dev/urandom > \(qs)/b-big.jpg")
        XCTAssertEqual(Self.pv(sb, ["import", src, "/"]).status, 0)
        sb.ok("mount -t tmpfs -o size=1m tmpfs \(Sandbox.quote(out))")
        defer { _ = Harness.run(["umount", "-l", out]) }

        let r = Self.pv(sb, ["export", "/src", out])
        assertFailure(r, 19, "photovault: no space left on the device holding \(out)")
        XCTAssertFalse(r.stderr.contains("store"), r.stderr)
        // Export stops at the error; entries are exported in the vault's listing order, so
        // the small file may or may not have come first. The big one left nothing behind.
        let left = sb.ok("cd \(Sandbox.quote(out)) && find . -mindepth 1 | LC_ALL=C sort")
        XCTAssertTrue(["./src\n", "./src\n./src/a-small.txt\n"].contains(left), left)
        if left.contains("a-small.txt") {
            XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/src/a-small.txt"), "FULLDEST-SMALL\n")
        }
        // --force over a local copy that stays: the line says so. It said "which was not
        // kept" about a file that was still there, as if the old copy were gone too.
        sb.ok("mkdir -p \(Sandbox.quote(out))/src && printf 'OLD\n' > \(Sandbox.quote(out))/src/b-big.jpg")
        let forced = Self.pv(sb, ["export", "--force", "/src/b-big.jpg", out + "/src"])
        assertFailure(forced, 19, "(stopped at \(out)/src/b-big.jpg, whose new copy was not kept (the one that was there "
                      + "stays as it was); 0 files exported before it stay)")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/src/b-big.jpg"), "OLD\n")
    }

    /// Export writes plaintext, so never into the store (also through a DEST that does not
    /// exist yet and climbs back with ..) nor into the vault's own mount, which it reads.
    func testExportRefusesADestinationInsideTheStoreOrTheVaultsMount() {
        let (sb, _) = Self.importedTree("pv-offline-export-inside", at: "/a")
        let storeName = (sb.store as NSString).lastPathComponent
        for dest in [sb.store + "/users/leak", sb.root + "/no-such-dir/../" + storeName + "/leak"] {
            let r = Self.pv(sb, ["export", "/a", dest])
            assertFailure(r, 2, "is inside the store", dest)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: sb.store + "/users/leak"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: sb.store + "/leak"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: sb.root + "/no-such-dir"))
        let mp = sb.mount()
        let r = Self.pv(sb, ["export", "/a", mp + "/backup"])
        assertFailure(r, 2, "is inside this vault's mount")
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/backup"))
        // Also when the mount was made from another session (another runtime directory, so
        // another registry): export copied the vault into itself, /backup/backup/backup/...,
        // until it ran out of descriptors.
        var other = sb.env
        other["XDG_RUNTIME_DIR"] = sb.root + "/other-session"
        XCTAssertEqual(mkdir(sb.root + "/other-session", 0o700), 0)
        let elsewhere = Harness.pv(["export", "/", mp + "/backup", "--store", sb.store, "--user", "alice",
                                    "--passfile", sb.passfile], env: other, timeout: 60)
        assertFailure(elsewhere, 2, "is inside this vault's mount")
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/backup"))
        // Anywhere else is fine, also while mounted.
        let out = sb.plainDir("out")
        XCTAssertEqual(Self.pv(sb, ["export", "/a", out]).status, 0)
        sb.unmount(mp)
        sb.assertNoPlaintext(["private notes", "IMG_0001"])
    }

    func testForceIsNeededToOverwrite() {
        let (sb, src) = Self.importedTree("pv-offline-force", at: "/a")
        let out = sb.plainDir("out")
        sb.ok("chmod u+w \(Sandbox.quote(src))/notes.txt && printf 'changed notes\\n' > \(Sandbox.quote(src))/notes.txt")

        // Without --force the vault keeps what it has: exit 20 and one line naming the file.
        let refused = Self.pv(sb, ["import", src, "/a"])
        XCTAssertEqual(refused.status, 20, refused.stderr)
        XCTAssertEqual(refused.stderr.split(separator: "\n").count, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.hasPrefix("photovault: already exists: /a/src/"), refused.stderr)
        XCTAssertTrue(refused.stderr.hasSuffix(" (use --force to overwrite)\n"), refused.stderr)
        XCTAssertEqual(Self.pv(sb, ["export", "/a/src/notes.txt", out]).status, 0)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/notes.txt"), "private notes\n")

        // Export refuses to replace a local file that differs the same way (one of the same
        // size and time is taken for an earlier run's copy and left alone: EverydayImportRerunTests).
        sb.ok("printf 'local edits\\n' > \(Sandbox.quote(out))/notes.txt")
        let kept = Self.pv(sb, ["export", "/a/src/notes.txt", out])
        XCTAssertEqual(kept.status, 20, kept.stderr)
        XCTAssertEqual(kept.stderr, "photovault: already exists: \(out)/notes.txt (use --force to overwrite)\n")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/notes.txt"), "local edits\n")

        // With --force both replace.
        let forced = Self.pv(sb, ["import", "--force", src, "/a"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        let replaced = Self.pv(sb, ["export", "--force", "/a/src/notes.txt", out])
        XCTAssertEqual(replaced.status, 0, replaced.stderr)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/notes.txt"), "changed notes\n")
        XCTAssertEqual(Self.pv(sb, ["export", "/a/src", sb.root + "/check"]).status, 0)
        XCTAssertEqual(Self.checksums(sb, sb.root + "/check/src"), Self.checksums(sb, src))
    }

    func testStandardInputAndOutputStreams() {
        let sb = Sandbox("pv-offline-stream")
        sb.initStore()
        let input = sb.root + "/in.bin", output = sb.root + "/out.bin"
        sb.ok("head -c 333333 /dev/urandom > \(Sandbox.quote(input))")

        // One file from stdin, its parent directories created.
        let imp = sb.run(Self.pvLine(sb, ["import", "-", "/streams/deep/in.bin"]) + " < \(Sandbox.quote(input))")
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertEqual(imp.stdout, "")
        XCTAssertTrue(imp.stderr.hasPrefix("imported 1 file, "), imp.stderr)
        // stdout carries the file's bytes and nothing else.
        let exp = sb.run(Self.pvLine(sb, ["export", "/streams/deep/in.bin", "-"]) + " > \(Sandbox.quote(output))")
        XCTAssertEqual(exp.status, 0, exp.stderr)
        sb.ok("cmp \(Sandbox.quote(input)) \(Sandbox.quote(output))")
        XCTAssertEqual(sb.ok("sha256sum < \(Sandbox.quote(output))"), sb.ok("sha256sum < \(Sandbox.quote(input))"))

        // Existing file: stdin too needs --force.
        let again = sb.run("echo other | " + Self.pvLine(sb, ["import", "-", "/streams/deep/in.bin"]))
        XCTAssertEqual(again.status, 20, again.stderr)
        XCTAssertEqual(again.stderr, "photovault: already exists: /streams/deep/in.bin (use --force to overwrite)\n")
        let forced = sb.run("echo other | " + Self.pvLine(sb, ["import", "--force", "-", "/streams/deep/in.bin"]))
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertEqual(sb.ok(Self.pvLine(sb, ["export", "/streams/deep/in.bin", "-"])), "other\n")
        // Only a file can go to stdout, and stdin cannot carry both the password and the file.
        let dir = Self.pv(sb, ["export", "/streams", "-"])
        XCTAssertEqual(dir.status, 2)
        XCTAssertEqual(dir.stdout, "")
        XCTAssertEqual(dir.stderr, "photovault: /streams is not a regular file; only a file can be written to standard output\n")
        let both = sb.pv(["import", "-", "/x", "--store", sb.store, "--user", "alice", "--password-stdin"], stdin: Sandbox.password)
        XCTAssertEqual(both.status, 2, both.stderr)
        sb.assertNoPlaintext(["streams", "in.bin", "other"])
    }

    /// A closed stdout or stdin is an error, as it is for cat: `export - >&-` used to "export"
    /// the photo into /dev/null (put on the closed descriptor so that no other file lands
    /// there) and `import - <&-` stored an empty file, both with exit 0.
    func testStreamingToAClosedStdoutOrFromAClosedStdinFails() {
        let sb = Sandbox("pv-offline-closed")
        sb.initStore()
        let input = sb.root + "/in.bin"
        sb.ok("head -c 70000 /dev/urandom > \(Sandbox.quote(input))")
        XCTAssertEqual(sb.run(Self.pvLine(sb, ["import", "-", "/in.bin"]) + " < \(Sandbox.quote(input))").status, 0)
        let exp = sb.run(Self.pvLine(sb, ["export", "/in.bin", "-"]) + " >&-")
        assertFailure(exp, 1, "photovault: write standard output: Bad file descriptor")
        let imp = sb.run(Self.pvLine(sb, ["import", "-", "/closed.bin"]) + " <&-")
        assertFailure(imp, 1, "photovault: cannot import standard input: read: Bad file descriptor")
        XCTAssertEqual(Self.pv(sb, ["export", "/closed.bin", "-"]).status, 24, "an empty /closed.bin was stored")
    }

    /// A file header or a directory's `.pvdir` of a version this build does not read (a newer
    /// photovault's) stops export and class with exit 10 and the entry's vault path: the line
    /// was only "unknown format version 2", as if the store config were of another version.
    func testAnEntryOfAnUnknownVersionIsNamed() throws {
        let sb = Sandbox("pv-offline-newer")
        sb.initStore()
        let src = sb.plainDir("src")
        sb.ok("mkdir \(Sandbox.quote(src))/d && head -c 54321 /dev/urandom > \(Sandbox.quote(src))/d/new.jpg")
        XCTAssertEqual(Self.pv(sb, ["import", src, "/a"]).status, 0)
        let users = Sandbox.quote(sb.store + "/users")
        // The file's ciphertext (by size): version byte 3 (2 is a file with holes); then the
        // deepest .pvdir (/a/src/d's): version byte 2.
        let header = sb.ok("find \(users) -type f -size +54321c -size -56000c").trimmingCharacters(in: .newlines)
        sb.ok("printf '\\003' | dd of=\(Sandbox.quote(header)) bs=1 seek=4 conv=notrunc status=none")
        let line = "photovault: /a/src/d/new.jpg: unknown format version 3 (this photovault reads versions 1 to 2)"
        assertFailure(Self.pv(sb, ["export", "/a", sb.root + "/out"]), 10, line)
        assertFailure(Self.pv(sb, ["class", "list", "/a/src/d"]), 10, line)
        sb.ok("printf '\\001' | dd of=\(Sandbox.quote(header)) bs=1 seek=4 conv=notrunc status=none")
        sb.ok("f=$(find \(users) -name .pvdir -printf '%d %p\\n' | sort -n | tail -1 | cut -d' ' -f2) && chmod 600 \"$f\" && "
              + "printf '\\002' | dd of=\"$f\" bs=1 seek=3 conv=notrunc status=none")
        assertFailure(Self.pv(sb, ["export", "/a/src/d", sb.root + "/out2"]), 10,
                      "photovault: /a/src/d: unknown format version 2 (this photovault reads version 1)")
    }

    func testFsckIsCleanThenNamesTheDamagedFile() throws {
        let (sb, _) = Self.importedTree("pv-offline-fsck", at: "/f")

        let clean = Self.pv(sb, ["fsck"])
        XCTAssertEqual(clean.status, 0, clean.stdout + clean.stderr)
        XCTAssertEqual(clean.stderr, "")
        // Directories: the root, /f, src, 2024, raw, empty-dir; chunks: 4 KiB each, per file.
        XCTAssertTrue(clean.stdout.hasPrefix("checked 6 files, 6 directories, 0 symlinks, 109 chunks"), clean.stdout)
        XCTAssertTrue(clean.stdout.hasSuffix(": 0 problems\n"), clean.stdout)

        // big.bin (250,000 bytes) has the largest ciphertext in the store: flip one byte of
        // its third 4 KiB chunk.
        let cipher = try XCTUnwrap(ClassAttributeTests.cipherFile(sb.store, plaintextSize: 250_000))
        let h = try XCTUnwrap(FileHandle(forUpdatingAtPath: cipher))
        try h.seek(toOffset: 128 + 2 * 4096 + 100)
        let byte = try XCTUnwrap(h.readData(ofLength: 1).first)
        try h.seek(toOffset: 128 + 2 * 4096 + 100)
        h.write(Data([byte ^ 0x01]))
        try h.close()

        let damaged = Self.pv(sb, ["fsck"])
        XCTAssertEqual(damaged.status, 21, damaged.stdout + damaged.stderr)
        XCTAssertEqual(damaged.stderr, "photovault: fsck found 1 problem\n")
        let lines = damaged.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 2, damaged.stdout)
        XCTAssertTrue(lines.first?.hasPrefix("/f/src/2024/big.bin: chunkDamaged: ") == true, damaged.stdout)
        XCTAssertTrue(lines.last?.hasSuffix(": 1 problem") == true, damaged.stdout)
        // The damaged file does not export, the others still do.
        let exp = Self.pv(sb, ["export", "/f/src/2024/big.bin", sb.plainDir("out")])
        XCTAssertEqual(exp.status, 22, exp.stderr)
        XCTAssertTrue(exp.stderr.contains("/f/src/2024/big.bin"), exp.stderr)
        XCTAssertEqual(Self.pv(sb, ["export", "/f/src/notes.txt", sb.root + "/out"]).status, 0)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(sb.root))/out/notes.txt"), "private notes\n")
    }

    /// Errors that are not damage give repair nothing to do. The store here lies on a live
    /// mount of another vault whose ciphertext under three of its entries was damaged, so
    /// reading a directory's .pvdir, a file's header and a chunk of another file fails with a
    /// real EIO while their own bytes are intact: fsck reports each as `unreadable` (exit 21),
    /// `--repair` moves nothing, and once the disk below is mended all is clean again.
    func testRepairNeverMovesWhatCouldNotBeRead() throws {
        let sb = Sandbox("pv-offline-eio")
        sb.initStore()
        let local = sb.root + "/inner", src = sb.plainDir("src")
        XCTAssertEqual(sb.pv(["init", "--store", local]).status, 0)
        XCTAssertEqual(sb.pv(["user", "add", "alice", "--store", local, "--passfile", sb.passfile]).status, 0)
        sb.ok("""
        set -e
        cd \(Sandbox.quote(src))
        mkdir d
        head -c 90000 /dev/urandom > d/a.bin; head -c 100000 /dev/urandom > b.bin
        head -c 200000 /dev/urandom > c.bin; head -c 50000 /dev/urandom > ok.bin
        """)
        XCTAssertEqual(sb.pv(["import", src, "/v", "--store", local, "--user", "alice", "--passfile", sb.passfile]).status, 0)
        let mp = sb.mount()
        let store = mp + "/store", q = Sandbox.quote(mp + "/store")
        sb.ok("cp -a \(Sandbox.quote(local)) \(q)")
        let args = ["--store", store, "--user", "alice", "--passfile", sb.passfile]
        XCTAssertEqual(sb.pv(["fsck"] + args).status, 0)

        // The inner ciphertext of /v/src/d/.pvdir (the deepest), b.bin and c.bin (by size),
        // marked by mtime to find the outer ciphertext that holds each.
        let targets = [("-name .pvdir -printf '%d %p\\n' | sort -n | tail -1 | cut -d' ' -f2", 1_000_000_001),
                       ("-size +100000c -size -110000c", 1_000_000_002), ("-size +200000c -size -210000c", 1_000_000_003)]
        var outer: [(String, UInt64)] = []
        for (select, mark) in targets {
            sb.ok("f=$(find \(q)/users -type f \(select)); test -f \"$f\" && touch -d @\(mark) \"$f\"")
            let path = sb.ok("find \(Sandbox.quote(sb.store))/users -type f -printf '%T@ %p\\n' | grep '^\(mark)\\.' | cut -d' ' -f2-")
                .trimmingCharacters(in: .newlines)
            XCTAssertFalse(path.isEmpty || path.contains("\n"), "\(mark): \(path)")
            let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64)
            // Past the outer header: its first chunk (.pvdir, b.bin's header) or a middle one.
            outer.append((path, mark == 1_000_000_003 ? size / 2 : 140))
        }
        func flipOuter() throws {
            for (path, offset) in outer {
                let h = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
                try h.seek(toOffset: offset)
                let byte = try XCTUnwrap(h.readData(ofLength: 1).first)
                try h.seek(toOffset: offset)
                h.write(Data([byte ^ 0x01]))
                try h.close()
            }
            sb.remount(mp)   // cold caches
        }
        try flipOuter()
        let listing = sb.ok("cd \(q) && find . | LC_ALL=C sort")

        for repair in [false, true] {
            let fsck = sb.pv(["fsck"] + (repair ? ["--repair"] : []) + args)
            XCTAssertEqual(fsck.status, 21, "repair \(repair): " + fsck.stdout + fsck.stderr)
            var lines = fsck.stdout.split(separator: "\n").map(String.init)
            XCTAssertTrue(lines.popLast()?.hasSuffix(": 3 problems") == true, fsck.stdout)
            lines.sort()   // in ciphertext name order
            XCTAssertEqual(lines.map { $0.components(separatedBy: ": ").prefix(2).joined(separator: ": ") },
                           ["/v/src/b.bin: unreadable", "/v/src/c.bin: unreadable", "/v/src/d: unreadable"], fsck.stdout)
            XCTAssertTrue(lines.allSatisfy { $0.hasSuffix("Input/output error") }, fsck.stdout)
            XCTAssertTrue(lines.count == 3 && lines[1].contains("chunks could not be read (chunk "), fsck.stdout)
            XCTAssertTrue(lines.count == 3 && lines[2].contains("cannot read .pvdir"), fsck.stdout)
            XCTAssertEqual(sb.ok("cd \(q) && find . | LC_ALL=C sort"), listing, "fsck --repair moved entries it could not read")
        }

        try flipOuter()   // the disk mended: the data was healthy all along
        let clean = sb.pv(["fsck"] + args)
        XCTAssertEqual(clean.status, 0, clean.stdout + clean.stderr)
        XCTAssertTrue(clean.stdout.hasPrefix("checked 4 files, 4 directories, "), clean.stdout)
        let out = sb.plainDir("out")
        XCTAssertEqual(sb.pv(["export", "/v", out] + args).status, 0)
        sb.ok("diff -r \(Sandbox.quote(src)) \(Sandbox.quote(out))/v/src")
    }

    /// The store's deepest directory (`.pvdir` by depth) and that `.pvdir`'s path.
    static func deepestPvdir(_ sb: Sandbox) -> String {
        sb.ok("find \(Sandbox.quote(sb.store))/users -name .pvdir -printf '%d %p\\n' | sort -n | tail -1 | cut -d' ' -f2-")
            .trimmingCharacters(in: .newlines)
    }

    /// A FIFO in place of a directory's `.pvdir` (an open for reading would wait for a writer
    /// that never comes) is damage: fsck names it at once, repair moves the directory to
    /// /lost+found, and the next fsck is clean. Run with a deadline: a hang fails the test.
    func testAFifoInPlaceOfADirectoryInfoIsDamageNotAHang() {
        let (sb, _) = Self.importedTree("pv-offline-fifo", at: "/v")
        let pvdir = Self.deepestPvdir(sb)   // /v/src/2024/raw
        sb.ok("rm \(Sandbox.quote(pvdir)) && mkfifo \(Sandbox.quote(pvdir))")
        Self.assertFsckFindsAndRepairs(sb, "/v/src/2024/raw: directoryInfoDamaged: directory ID file is not a regular file")
    }

    /// fsck (with a deadline: a hang fails) exits 21 and names `problem` first, `--repair`
    /// moves something to /lost+found, and the next fsck is clean.
    static func assertFsckFindsAndRepairs(_ sb: Sandbox, _ problem: String, file: StaticString = #filePath, line: UInt = #line) {
        let args = ["--store", sb.store, "--user", "alice", "--passfile", sb.passfile]
        let check = sb.pv(["fsck"] + args, timeout: 30)
        XCTAssertEqual(check.status, 21, check.stdout + check.stderr, file: file, line: line)
        XCTAssertTrue(check.stdout.hasPrefix(problem + "\n"), check.stdout, file: file, line: line)
        let repair = sb.pv(["fsck", "--repair"] + args, timeout: 30)
        XCTAssertEqual(repair.status, 32, repair.stdout + repair.stderr, file: file, line: line)
        XCTAssertTrue(repair.stdout.contains("\nrepair: moved "), repair.stdout, file: file, line: line)
        let after = sb.pv(["fsck"] + args, timeout: 30)
        XCTAssertEqual(after.status, 0, after.stdout + after.stderr, file: file, line: line)
    }

    /// A FIFO in place of the tree's mount lock `.pvmount` makes every mount fail (exit 9):
    /// fsck names it (it used to skip `.pvmount` and call the tree clean), `--repair` moves it
    /// to /lost+found, and the vault mounts again. Run with a deadline: a hang fails the test.
    func testAFifoInPlaceOfTheMountLockIsDamageAndRepairLetsTheVaultMount() throws {
        let (sb, _) = Self.importedTree("pv-offline-pvmount", at: "/v")
        let trees = try FileManager.default.contentsOfDirectory(atPath: sb.store + "/users")
        XCTAssertEqual(trees.count, 1)
        let lock = Sandbox.quote(sb.store + "/users/" + trees[0] + "/.pvmount")
        sb.ok("rm -f \(lock) && mkfifo \(lock)")
        Self.assertFsckFindsAndRepairs(sb, "/.pvmount: mountLockDamaged: the mount lock is a FIFO, not a regular file: the tree cannot be mounted")
        let mp = sb.mount()
        XCTAssertEqual(sb.ok("ls \(Sandbox.quote(mp))/lost+found"), "mount-lock .pvmount\n")
        sb.unmount(mp)
    }

    /// A long name's companion that cannot be read (EIO, injected with strace) says nothing
    /// about the name: export stops with the I/O error (exit 1, one line naming the
    /// companion). It used to skip the file as "the encrypted name does not decrypt (run
    /// fsck)" (exit 26), although fsck then found nothing wrong.
    func testAnUnreadableLongNameCompanionIsAnIOErrorNotADamagedName() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let sb = Sandbox("pv-offline-companion-eio")
        sb.initStore()
        let src = sb.plainDir("src")
        try Data("long".utf8).write(to: URL(fileURLWithPath: src + "/" + String(repeating: "long-", count: 40) + ".jpg"))
        XCTAssertEqual(Self.pv(sb, ["import", src, "/v"]).status, 0)
        let companion = sb.ok("find \(Sandbox.quote(sb.store))/users -name '~*.name'").trimmingCharacters(in: .newlines)
        XCTAssertFalse(companion.isEmpty || companion.contains("\n"), companion)
        let out = sb.plainDir("out")
        let r = Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", companion,
                             "-e", "trace=pread64", "-e", "inject=pread64:error=EIO", Harness.binary, "export", "/v", out,
                             "--store", sb.store, "--user", "alice", "--passfile", sb.passfile], env: sb.env, timeout: 60)
        assertFailure(r, 1, "long-name companion ")
        XCTAssertTrue(r.stderr.hasSuffix(": Input/output error\n"), r.stderr)
        XCTAssertEqual(Self.pv(sb, ["fsck"]).status, 0, "the store is whole")
        // `class list` of its directory fails the same way: it printed the listing without
        // the file (exit 0), as if it were gone.
        let list = Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", companion,
                                "-e", "trace=pread64", "-e", "inject=pread64:error=EIO", Harness.binary, "class", "list", "/v/src",
                                "--store", sb.store, "--user", "alice", "--passfile", sb.passfile], env: sb.env, timeout: 60)
        assertFailure(list, 1, "long-name companion ")
        XCTAssertEqual(list.stdout, "")
        XCTAssertEqual(Self.pv(sb, ["class", "list", "/v/src"]).stdout.split(separator: "\n").count, 1, "listed when readable")
    }

    /// `class set` on a file without a header yet (a 0-byte ciphertext file, as a crash right
    /// after a create leaves it) writes the header with the class and fsyncs it: a failed
    /// fsync (EIO, injected with strace on that file only) is an I/O error (exit 1, one line),
    /// not a success. It was ignored, so the command said `/f: none` although the new header
    /// was not known to be on disk. A header rewritten in place already reported it.
    func testClassSetOnAFileWithoutHeaderReportsAFailedFsync() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let sb = Sandbox("pv-offline-class-fsync")
        sb.initStore()
        let src = sb.plainDir("src")
        try Data("some photo".utf8).write(to: URL(fileURLWithPath: src + "/f.jpg"))
        XCTAssertEqual(Self.pv(sb, ["import", src + "/f.jpg", "/"]).status, 0)
        // The one ciphertext file of the tree.
        let trees = try FileManager.default.contentsOfDirectory(atPath: sb.store + "/users")
        XCTAssertEqual(trees.count, 1)
        let tree = sb.store + "/users/" + trees[0]
        let files = try FileManager.default.contentsOfDirectory(atPath: tree).filter { !$0.hasPrefix(".") }
        XCTAssertEqual(files.count, 1, "\(files)")
        let backing = tree + "/" + files[0]
        func classSetFailingFsync(_ cls: String) -> Harness.Result {
            Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", backing,
                         "-e", "trace=fsync", "-e", "inject=fsync:error=EIO", Harness.binary, "class", "set", "/f.jpg", cls,
                         "--store", sb.store, "--user", "alice", "--passfile", sb.passfile], env: sb.env, timeout: 60)
        }
        // A header rewritten in place: the failed fsync was already reported.
        assertFailure(classSetFailingFsync("none"), 1, "Input/output error")
        // The file loses its header, as when the daemon is killed right after creating it.
        XCTAssertEqual(truncate(backing, 0), 0)
        let r = classSetFailingFsync("until-first-auth")
        assertFailure(r, 1, "Input/output error")
        XCTAssertEqual(r.stdout, "", "a class change not known to be on disk was reported as done")
        // Without the fault it works: the empty file with that class, and a whole store.
        XCTAssertEqual(Self.pv(sb, ["class", "set", "/f.jpg", "none"]).status, 0)
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/f.jpg"]).stdout, "none\n")
        XCTAssertEqual(Self.pv(sb, ["fsck"]).status, 0)
    }

    /// What fsck cannot read is `unreadable` and the walk goes on: a directory whose listing
    /// fails (it used to end fsck) and an xattr whose read fails (it used to be reported as a
    /// failed authentication). The errors are injected with strace (EIO on getdents64 of one
    /// ciphertext directory and fgetxattr of one file).
    func testUnlistableDirectoryAndUnreadableXattrAreUnreadableAndTheWalkGoesOn() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let (sb, src) = Self.sandboxWithTree("pv-offline-eio")
        sb.ok("setfattr -n user.note -v hello \(Sandbox.quote(src))/notes.txt")
        XCTAssertEqual(Self.pv(sb, ["import", src, "/v"]).status, 0)
        let users = Sandbox.quote(sb.store + "/users")
        // /v/src/2024 holds the deepest directory (/v/src/2024/raw).
        let dir = ((Self.deepestPvdir(sb) as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
        let file = sb.ok("for f in $(find \(users) -type f ! -name '.pv*'); do "
                         + "getfattr --absolute-names -m '^user[.]pv[.]' \"$f\" 2>/dev/null | grep -q user.pv && echo \"$f\"; done; true")
            .trimmingCharacters(in: .newlines)
        XCTAssertFalse(file.isEmpty || file.contains("\n"), file)
        let r = Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", dir, "-P", file,
                             "-e", "trace=getdents64,fgetxattr", "-e", "inject=getdents64,fgetxattr:error=EIO",
                             Harness.binary, "fsck", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile],
                            env: sb.env, timeout: 60)
        XCTAssertEqual(r.status, 21, r.stdout + r.stderr)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, r.stdout)
        XCTAssertTrue(lines.contains("/v/src/2024: unreadable: cannot list the directory: readdir: Input/output error"), r.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("/v/src/notes.txt: unreadable: extended attribute user.pv.")
                                       && $0.hasSuffix("cannot be read: getxattr: Input/output error") }, r.stdout)
        // Everything outside /v/src/2024 was still checked.
        XCTAssertTrue(lines.last?.hasPrefix("checked 4 files, ") == true, r.stdout)
    }

    /// `fsck --repair` when every lookup in the tree root fails (EIO injected with strace on
    /// each `newfstatat` there from the one of `lost+found` on): it tried `lost+found.1`,
    /// `lost+found.2`, … forever, passing over each name it could not stat, and hung. Now the
    /// first such failure ends the search: one line names it, nothing is moved (the foreign
    /// file stays where it is) and fsck ends with "problems found".
    func testRepairEndsWhenLostAndFoundCannotBeStatted() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let sb = Sandbox("pv-offline-lf-eio")
        sb.initStore()
        let root = sb.ok("ls -d \(Sandbox.quote(sb.store))/users/*").trimmingCharacters(in: .newlines)
        XCTAssertFalse(root.isEmpty || root.contains("\n"), root)
        try Data("foreign".utf8).write(to: URL(fileURLWithPath: root + "/foreign.txt"))
        // Matched in the root: the stat of the root itself (1), then that of lost+found (2) and
        // every later one (its .pvdir is opened O_PATH and stat'ed by that descriptor, which
        // -P does not match). `timeout -s KILL` ends a hung fsck (strace, sent SIGTERM by the
        // harness, would detach and leave it looping).
        let r = Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", root,
                             "-e", "trace=newfstatat", "-e", "inject=newfstatat:error=EIO:when=2+",
                             "/usr/bin/timeout", "-s", "KILL", "20", Harness.binary, "fsck", "--repair",
                             "--store", sb.store, "--user", "alice", "--passfile", sb.passfile], env: sb.env, timeout: 60)
        // The injected EIO hits the root's listing too: no damaged entry is even seen.
        XCTAssertEqual(r.status, 21, r.stdout + r.stderr)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, "/lost+found: unreadable: cannot be looked at (stat: Input/output error): "
                       + "repair moved nothing into /lost+found, damaged entries are left in place", r.stdout)
        XCTAssertFalse(r.stdout.contains("repair: "), r.stdout)
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/foreign.txt"), "left in place")
        // Without the fault the same repair deals with it.
        let again = Self.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(again.status, 32, again.stdout + again.stderr)
        // Nothing in it reads (no PhotoVault header): set aside out of view, not into /lost+found.
        XCTAssertTrue(again.stdout.contains("repair: set aside /foreign.txt, which holds nothing readable"), again.stdout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/foreign.txt"))
    }

    /// `fsck --repair` that cannot move a damaged entry (here /lost+found cannot be made: the
    /// tree root is immutable, which stops root too) names it in one escaped line, goes on
    /// with the rest, and exits 29, "the repair is incomplete", not 32 as a finished repair
    /// does. It used to stop at the first such entry with the mkdir's error (exit 1).
    func testARepairThatCannotMoveAnEntryGoesOnAndExits29() throws {
        let (sb, _) = Self.importedTree("pv-offline-repair-incomplete", at: "/v")
        let root = sb.ok("ls -d \(Sandbox.quote(sb.store))/users/*").trimmingCharacters(in: .newlines)
        let v = sb.ok("find \(Sandbox.quote(root)) -mindepth 1 -maxdepth 1 -type d").trimmingCharacters(in: .newlines)
        XCTAssertFalse(v.isEmpty || v.contains("\n"), v)
        // A copy of a ciphertext file under a foreign name: its header opens, so it goes to
        // /lost+found (a file with nothing readable is set aside in .pvdebris instead).
        let cipher = sb.ok("find \(Sandbox.quote(v)) -type f -size +1k | head -1").trimmingCharacters(in: .newlines)
        XCTAssertEqual(Harness.run(["cp", cipher, v + "/foreign\nname.txt"]).status, 0, cipher)
        XCTAssertEqual(Harness.run(["chattr", "+i", root]).status, 0, "chattr +i needs root on ext4/xfs/btrfs")
        defer { _ = Harness.run(["chattr", "-i", root]) }
        let r = Self.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(r.status, 29, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").dropLast().map(String.init), [
            "/v/foreign\\nname.txt: foreignEntry: not a PhotoVault name (a sync tool's conflict copy or a foreign file?)",
            "/v/foreign\\nname.txt: repairFailed: not moved into /lost+found, left in place: "
                + "cannot create or open /lost+found: mkdir: Operation not permitted",
        ], r.stdout)
        XCTAssertEqual(r.stderr, "photovault: fsck found 2 problems; repair left 1 damaged entry in place\n")
        XCTAssertTrue(FileManager.default.fileExists(atPath: v + "/foreign\nname.txt"), "left in place")

        XCTAssertEqual(Harness.run(["chattr", "-i", root]).status, 0)
        let again = Self.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(again.status, 32, again.stdout + again.stderr)
        XCTAssertTrue(again.stdout.contains("repair: moved /v/foreign\\nname.txt into /lost+found as "), again.stdout)
        XCTAssertEqual(Self.pv(sb, ["fsck"]).status, 0)
    }

    /// A file whose `fstat` fails once it is open (EIO injected with strace on the second
    /// `newfstatat` of its descriptor: the first is the open's own check that it is a regular
    /// file) is `unreadable`, as other unreadable entries are. It was skipped without a word,
    /// and fsck called the tree clean (exit 0, "0 problems").
    func testAFileWhoseFstatFailsIsUnreadableNotSkipped() throws {
        // scripts/deps.sh installs strace for the tests: its absence is a failure, not a skip.
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "strace is missing: run scripts/deps.sh test")
        let sb = Sandbox("pv-offline-fstat-eio")
        sb.initStore()
        let src = sb.plainDir("src")
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: src + "/a.jpg"))
        XCTAssertEqual(Self.pv(sb, ["import", src, "/v"]).status, 0)
        let file = sb.ok("find \(Sandbox.quote(sb.store))/users -type f ! -name '.pv*'").trimmingCharacters(in: .newlines)
        XCTAssertFalse(file.isEmpty || file.contains("\n"), file)
        let r = Harness.run(["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", file,
                             "-e", "trace=newfstatat", "-e", "inject=newfstatat:error=EIO:when=2",
                             Harness.binary, "fsck", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile],
                            env: sb.env, timeout: 60)
        XCTAssertEqual(r.status, 21, r.stdout + r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init),
                       ["/v/src/a.jpg: unreadable: fstat: Input/output error",
                        "checked 1 file, 3 directories, 0 symlinks, 0 chunks: 1 problem"], r.stdout)
        XCTAssertEqual(Self.pv(sb, ["fsck"]).status, 0, "the store is whole")
    }

    /// A file of many damaged chunks (a real ciphertext file of 8 whole chunks, extended by
    /// `truncate` with 65,536 chunks of zeros, none of which authenticates): the exact count
    /// is reported, with the first 64 chunk indexes and "and N more". fsck kept every index in
    /// memory (a sparse file of many GiB made the list unbounded) and printed ten and "…",
    /// not saying how many were left out.
    func testManyDamagedChunksAreCountedExactlyAndListedBounded() throws {
        let sb = Sandbox("pv-offline-many-chunks")
        sb.initStore()
        let src = sb.plainDir("src")
        try Data(repeating: 7, count: 8 * 4096).write(to: URL(fileURLWithPath: src + "/a.jpg"))
        XCTAssertEqual(Self.pv(sb, ["import", src, "/v"]).status, 0)
        let file = sb.ok("find \(Sandbox.quote(sb.store))/users -type f ! -name '.pv*'").trimmingCharacters(in: .newlines)
        XCTAssertFalse(file.isEmpty || file.contains("\n"), file)
        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
        XCTAssertEqual((size - 128) % 8, 0, "8 whole chunks after the 128-byte header: \(size)")
        let sealed = (size - 128) / 8
        XCTAssertEqual(truncate(file, off_t(size + 65536 * sealed)), 0)
        let start = Date()
        let r = Self.pv(sb, ["fsck"])
        XCTAssertLessThan(Date().timeIntervalSince(start), 30)
        XCTAssertEqual(r.status, 21, r.stdout + r.stderr)
        let listed = (8..<72).map(String.init).joined(separator: ", ")
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init),
                       ["/v/src/a.jpg: chunkDamaged: 65536 of 65544 chunks failed authentication (chunk \(listed) and 65472 more)",
                        "checked 1 file, 3 directories, 0 symlinks, 8 chunks: 1 problem"], r.stdout)
    }

    /// Holes in a ciphertext file are damage fsck counts without reading them (SEEK_DATA):
    /// a.jpg is 8 real chunks, then a terabyte-sized hole (2^28 chunks' worth) and one chunk
    /// of garbage written at the end, which is data and read; b.jpg has a hole punched in its
    /// middle, with real chunks after it: exactly the chunks the hole touches are named. fsck
    /// used to read the hole, 1.1 TB of zeros, chunk by chunk (hours; here it ran into the
    /// two-minute timeout).
    func testHolesInACiphertextAreCountedExactlyWithoutBeingRead() throws {
        let sb = Sandbox("pv-offline-holes")
        sb.initStore()
        let src = sb.plainDir("src")
        try Data(repeating: 7, count: 8 * 4096).write(to: URL(fileURLWithPath: src + "/a.jpg"))
        XCTAssertEqual(Self.pv(sb, ["import", src + "/a.jpg", "/v"]).status, 0)
        try Data((0..<(1000 * 4096)).map { UInt8(truncatingIfNeeded: $0 * 7) }).write(to: URL(fileURLWithPath: src + "/b.jpg"))
        XCTAssertEqual(Self.pv(sb, ["import", src + "/b.jpg", "/v"]).status, 0)
        let files = sb.ok("find \(Sandbox.quote(sb.store))/users -type f ! -name '.pv*' -printf '%s %p\\n' | sort -n")
            .split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).map(String.init) }
        XCTAssertEqual(files.count, 2, "\(files)")
        let (a, b) = (files[0][1], files[1][1])
        let aSize = try XCTUnwrap(Int(files[0][0])), sealed = (aSize - 128) / 8
        XCTAssertEqual(aSize, 128 + 8 * sealed)
        let holeChunks = 1 << 28
        let tail = 128 + (8 + holeChunks - 1) * sealed
        sb.ok("head -c \(sealed) /dev/zero | tr '\\0' '\\377' | dd of=\(Sandbox.quote(a)) bs=\(sealed) seek=\(tail) oflag=seek_bytes conv=notrunc status=none")
        XCTAssertEqual(try XCTUnwrap(FileManager.default.attributesOfItem(atPath: a)[.size] as? Int), 128 + (8 + holeChunks) * sealed)
        // b.jpg: a 1 MiB hole from byte 1 MiB of its ciphertext, and the chunks it touches.
        sb.ok("fallocate -p -o 1048576 -l 1048576 \(Sandbox.quote(b))")
        let touched = (0..<1000).filter { i in 128 + (i + 1) * sealed > 1 << 20 && 128 + i * sealed < 2 << 20 }
        XCTAssertEqual(touched.count, 1 + (1 << 20) / sealed, "\(touched)")

        let r = Self.pv(sb, ["fsck"])
        XCTAssertEqual(r.status, 21, r.stdout + r.stderr)
        let listedA = (8..<72).map(String.init).joined(separator: ", ")
        let listedB = touched.prefix(64).map(String.init).joined(separator: ", ")
        XCTAssertEqual(Set(r.stdout.split(separator: "\n").map(String.init)),
                       ["/v/a.jpg: chunkDamaged: \(holeChunks) of \(holeChunks + 8) chunks failed authentication (chunk \(listedA) and \(holeChunks - 64) more)",
                        "/v/b.jpg: chunkDamaged: \(touched.count) of 1000 chunks failed authentication (chunk \(listedB) and \(touched.count - 64) more)",
                        "checked 2 files, 2 directories, 0 symlinks, \(8 + 1000 - touched.count) chunks: 2 problems"], r.stdout)
    }

    /// A source ending in '/' names what it points to, as `cp -r P/ dest/`: a symlink to a
    /// directory is followed and the directory lands under the link's name (without the
    /// slash the symlink itself is copied); `F/` for anything but a directory is "Not a
    /// directory", as cp says. Offline and through a live mount alike.
    func testATrailingSlashFollowsASymlinkedSourceAsCpDoes() {
        let sb = Sandbox("pv-offline-slash")
        sb.initStore()
        let src = sb.plainDir("src"), q = Sandbox.quote(src)
        sb.ok("""
        set -e
        cd \(q)
        mkdir -p pics/sub; printf a > pics/a.jpg; printf b > pics/sub/b.jpg
        ln -s "$PWD/pics" P; ln -s "$PWD/pics/a.jpg" F
        """)
        let ref = sb.plainDir("ref"), out = sb.plainDir("out")
        sb.ok("cp -r \(q)/P/ \(Sandbox.quote(ref))/ && test -d \(Sandbox.quote(ref))/P && ! test -L \(Sandbox.quote(ref))/P")

        XCTAssertEqual(Self.pv(sb, ["import", src + "/P/", "/x"]).status, 0)
        XCTAssertEqual(Self.pv(sb, ["import", src + "/P", "/z"]).status, 0)
        XCTAssertEqual(Self.pv(sb, ["export", "/x", "/z", out]).status, 0)
        let qo = Sandbox.quote(out)
        sb.ok("diff -r \(Sandbox.quote(ref))/P \(qo)/x/P && ! test -L \(qo)/x/P")
        XCTAssertEqual(sb.ok("readlink \(qo)/z/P"), src + "/pics\n")   // without the slash: the link itself
        for bad in [src + "/F/", src + "/pics/a.jpg/"] {
            assertFailure(Self.pv(sb, ["import", bad, "/y"]), 1, "Not a directory", bad)
        }

        let mp = sb.mount()
        let live = Self.pv(sb, ["import", src + "/P/", "/m"])
        XCTAssertEqual(live.status, 0, live.stderr)
        XCTAssertEqual(live.stderr, "imported through the live mount at \(mp)\n")
        sb.ok("diff -r \(Sandbox.quote(ref))/P \(Sandbox.quote(mp))/m/P && ! test -L \(Sandbox.quote(mp))/m/P")
        assertFailure(Self.pv(sb, ["import", src + "/F/", "/m"]), 1, "Not a directory", "through the mount")
    }

    /// An import whose source is missing or is `file/` (not a directory) copies nothing and
    /// leaves no destination directory behind, offline and through a live mount: it used to
    /// make DEST (and its parents) first, then fail.
    func testAnImportThatCopiesNothingMakesNoDestination() {
        let sb = Sandbox("pv-offline-nodest")
        sb.initStore()
        let src = sb.plainDir("src")
        sb.ok("printf a > \(Sandbox.quote(src))/a.jpg")
        let out = sb.plainDir("out")
        let bad = [(src + "/a.jpg/", 1, "Not a directory"), (src + "/missing", 24, "not found"), (src + "/missing/", 24, "not found")]
        for (source, code, message) in bad {
            assertFailure(Self.pv(sb, ["import", source, "/new/deep"]), Int32(code), message, source)
            assertFailure(Self.pv(sb, ["export", "/new", out]), 24, "not found: /new", source)
        }
        // With a good source next to a bad one, nothing is made either (the bad one is first
        // found, before anything is copied).
        assertFailure(Self.pv(sb, ["import", src + "/a.jpg", src + "/a.jpg/", "/new"]), 1, "Not a directory")
        assertFailure(Self.pv(sb, ["export", "/new", out]), 24, "not found: /new")

        let mp = sb.mount()
        for (source, code, message) in bad {
            assertFailure(Self.pv(sb, ["import", source, "/live/deep"]), Int32(code), message, "through the mount: \(source)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/live"), "through the mount: \(source)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mp), [])
        // A good import still makes its destination.
        let ok = Self.pv(sb, ["import", src + "/a.jpg", "/live/deep"])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(mp))/live/deep/a.jpg"), "a")
    }

    /// An import that fails partway, on a source file that cannot be read (a bind mount of
    /// /proc/PID/mem: a regular file whose read fails with EIO) and on a full store: one line
    /// naming the file (its local path for a read error) and where the run stopped, the exit
    /// status of the cause (1, 19); the files before it stay complete, and no partial
    /// ciphertext (`.pvtmp-*`) is left in the vault. The line named neither the file nor
    /// what stayed ("photovault: read: Input/output error").
    func testAnImportThatFailsPartwayNamesTheFileAndLeavesNoPartialCiphertext() throws {
        XCTAssertEqual(getuid(), 0, "bind and tmpfs mounts need root")
        let sb = Self.sandboxWithSmallStore("pv-offline-partway", self)
        let store = Sandbox.quote(sb.store)
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let qs = Sandbox.quote(src)
        sb.ok("mkdir \(qs)/al \(qs)/big && printf one > \(qs)/al/1.txt && : > \(qs)/al/2-bad.bin && printf three > \(qs)/al/3.txt "
              + "&& head -c 1500000 /dev/urandom > \(qs)/big/b1.bin && head -c 3000000 /dev/urandom > \(qs)/big/b2.bin")
        sb.ok("mount --bind /proc/\(getpid())/mem \(qs)/al/2-bad.bin")
        defer { _ = Harness.run(["umount", "-l", src + "/al/2-bad.bin"]) }
        func partials() -> String { sb.ok("find \(store) -name '.pvtmp-*'") }

        let unreadable = Self.pv(sb, ["import", src + "/al", "/z"])
        assertFailure(unreadable, 1, "photovault: cannot import \(src)/al/2-bad.bin: read: Input/output error "
                      + "(stopped at /z/al/2-bad.bin, which was not kept; 1 file imported before it stays)")
        XCTAssertEqual(partials(), "")
        XCTAssertEqual(Self.pv(sb, ["export", "/z/al", out]).status, 0)
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(out)) && find . -type f && cat al/1.txt"), "./al/1.txt\none")

        let full = Self.pv(sb, ["import", src + "/big", "/p"])
        assertFailure(full, 19, "photovault: no space left on the device holding the store "
                      + "(stopped at /p/big/b2.bin, which was not kept; 1 file imported before it stays)")
        XCTAssertEqual(partials(), "")
        XCTAssertEqual(Self.pv(sb, ["export", "/p/big", out]).status, 0)
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(out)) && find big -type f && cmp big/b1.bin \(qs)/big/b1.bin && echo same"),
                       "big/b1.bin\nsame\n")
        // --force over /p/big/b1.bin with the big file: the one in the vault stays, and the line says so.
        let bigger = sb.plainDir("bigger")
        sb.ok("cp \(qs)/big/b2.bin \(Sandbox.quote(bigger))/b1.bin")
        let forced = Self.pv(sb, ["import", "--force", bigger + "/b1.bin", "/p/big"])
        assertFailure(forced, 19, "(stopped at /p/big/b1.bin, whose new copy was not kept (the one that was there stays as "
                      + "it was); 0 files imported before it stay)")
        XCTAssertEqual(partials(), "")
        XCTAssertEqual(Self.pv(sb, ["export", "--force", "/p/big/b1.bin", out + "/big"]).status, 0)
        sb.ok("cmp \(Sandbox.quote(out))/big/b1.bin \(qs)/big/b1.bin")
    }

    /// A Ctrl-C (SIGINT) or a SIGTERM while import writes a file (here from a pipe that
    /// delivered 2.5 MB and then waits) leaves no half-written ciphertext (`.pvtmp-*`) in the
    /// vault, and one while export writes a file (held in its fsync by strace) no partial
    /// plaintext (`.pvexport-*`) beside its destination; the signal still ends the command
    /// (status 128 + signal). Both temp files were left behind.
    func testASignalWhileAFileIsWrittenLeavesNoPartialFile() {
        let sb = Sandbox("pv-offline-signal")
        sb.initStore()
        let work = sb.plainDir("work"), out = sb.plainDir("out")
        let q = Sandbox.quote(work), store = Sandbox.quote(sb.store), qo = Sandbox.quote(out)
        for sig in ["INT", "TERM"] {
            let imported = sb.run("""
            set -m   # job control: a background job keeps SIGINT (a script's would ignore it)
            cd \(q) && rm -f in && mkfifo in
            (head -c 2500000 /dev/urandom; sleep 60) > in &
            writer=$!
            \(Self.pvLine(sb, ["import", "-", "/big-\(sig).bin"])) < in 2>/dev/null &
            pv=$!
            for i in $(seq 200); do [ -n "$(find \(store) -name '.pvtmp-*' -size +1000k)" ] && break; sleep 0.05; done
            find \(store) -name '.pvtmp-*' -size +1000k | wc -l
            kill -\(sig) $pv; wait $pv; echo "status $?"
            kill -- -$writer
            find \(store) -name '.pvtmp-*' | wc -l
            """, timeout: 60)
            XCTAssertEqual(imported.stdout, "1\nstatus \(sig == "INT" ? 130 : 143)\n0\n", "SIG\(sig): \(imported.stderr)")
        }

        sb.ok("head -c 300000 /dev/urandom > \(q)/photo.jpg")
        XCTAssertEqual(Self.pv(sb, ["import", work + "/photo.jpg", "/"]).status, 0)
        let exported = sb.run("""
        set -m
        strace -f -qq -o /dev/null -e trace=fsync -e inject=fsync:delay_enter=2000000 \
          \(Self.pvLine(sb, ["export", "/photo.jpg", out])) 2>/dev/null &
        for i in $(seq 200); do [ -n "$(find \(qo) -name '.pvexport-*' -size +200k)" ] && break; sleep 0.05; done
        find \(qo) -name '.pvexport-*' -size +200k | wc -l
        kill -INT $(ps -o pid= --ppid $!); wait $!
        find \(qo) -mindepth 1 | wc -l
        """, timeout: 60)
        XCTAssertEqual(exported.stdout, "1\n0\n", exported.stderr)
    }

    func testClassSetGetAndList() {
        let (sb, src) = Self.importedTree("pv-offline-class", at: "/c")

        let set = Self.pv(sb, ["class", "set", "/c/src/photo.jpg", "none"])
        XCTAssertEqual(set.status, 0, set.stderr)
        XCTAssertEqual(set.stdout, "/c/src/photo.jpg: none\n")
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/c/src/photo.jpg"]).stdout, "none\n")
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/c/src/notes.txt"]).stdout, "complete\n")
        // A directory's class is the default for files created in it later.
        XCTAssertEqual(Self.pv(sb, ["class", "set", "/c/src/2024", "until-first-auth"]).stdout,
                       "/c/src/2024: until-first-auth\n")
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/c/src/2024"]).stdout, "until-first-auth\n")
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/c/src/2024/big.bin"]).stdout, "complete\n")
        let newFile = sb.run("echo new | " + Self.pvLine(sb, ["import", "-", "/c/src/2024/new.txt"]))
        XCTAssertEqual(newFile.status, 0, newFile.stderr)
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/c/src/2024/new.txt"]).stdout, "until-first-auth\n")
        // A symlink has no class: '-'.
        let links = sb.plainDir("links")
        sb.ok("ln -s notes.txt \(Sandbox.quote(links))/link")
        XCTAssertEqual(Self.pv(sb, ["import", links + "/link", "/c/src"]).status, 0)
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/c/src/link"]).stdout, "-\n")

        let list = Self.pv(sb, ["class", "list", "/c/src"])
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertEqual(list.stdout, """
        until-first-auth\t/c/src/2024
        complete\t/c/src/empty
        complete\t/c/src/empty-dir
        -\t/c/src/link
        complete\t/c/src/notes.txt
        none\t/c/src/photo.jpg
        complete\t/c/src/run.sh

        """)
        // The contents did not change with the class.
        let out = sb.plainDir("out")
        XCTAssertEqual(Self.pv(sb, ["export", "/c/src/photo.jpg", out]).status, 0)
        sb.ok("cmp \(Sandbox.quote(src))/photo.jpg \(Sandbox.quote(out))/photo.jpg")

        let bad = Self.pv(sb, ["class", "set", "/c/src/photo.jpg", "secret"])
        XCTAssertEqual(bad.status, 2)
        XCTAssertEqual(bad.stderr.split(separator: "\n").count, 1, bad.stderr)
        let missing = Self.pv(sb, ["class", "get", "/c/nope"])
        XCTAssertEqual(missing.status, 24)
        XCTAssertEqual(missing.stderr, "photovault: not found: /c/nope\n")
    }

    func testImportNextToALiveMountGoesThroughItAndLosesNothing() {
        let (sb, src) = Self.sandboxWithTree("pv-offline-live")
        let mp = sb.mount()
        sb.ok("mkdir \(Sandbox.quote(mp))/live && printf 'written through the mount\\n' > \(Sandbox.quote(mp))/live/mounted.txt")

        let imp = Self.pv(sb, ["import", src, "/live"])
        XCTAssertEqual(imp.status, 0, imp.stderr)
        XCTAssertEqual(imp.stderr, "imported through the live mount at \(mp)\n")
        // The files appear in the mount at once, next to the file written there.
        XCTAssertEqual(Self.checksums(sb, mp + "/live/src"), Self.checksums(sb, src))
        XCTAssertEqual(Self.listing(sb, mp + "/live/src"), Self.listing(sb, src))
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(mp))/live/mounted.txt"), "written through the mount\n")
        XCTAssertEqual(sb.ok("ls \(Sandbox.quote(mp))/live"), "mounted.txt\nsrc\n")

        // After unmounting, everything is in the store, intact.
        sb.unmount(mp)
        let fsck = Self.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr)
        XCTAssertTrue(fsck.stdout.hasPrefix("checked 7 files, "), fsck.stdout)
        let out = sb.plainDir("out")
        XCTAssertEqual(Self.pv(sb, ["export", "/live", out]).status, 0)
        XCTAssertEqual(Self.checksums(sb, out + "/live/src"), Self.checksums(sb, src))
        XCTAssertEqual(Self.listing(sb, out + "/live/src"), Self.listing(sb, src))
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/live/mounted.txt"), "written through the mount\n")
    }

    /// The mount daemon holds a shared flock on the tree root (docs/OFFLINE.md): offline
    /// writers that do not go through the mount fail with 'store busy' (11), naming the
    /// mount, and change nothing; offline readers still run, and a mount waits for an
    /// offline writer.
    func testALiveMountKeepsOfflineWritersOutButNotReaders() throws {
        let (sb, src) = Self.importedTree("pv-offline-lock", at: "/v")
        let trees = try FileManager.default.contentsOfDirectory(atPath: sb.store + "/users")
        XCTAssertEqual(trees.count, 1, "\(trees)")
        let tree = Sandbox.quote(sb.store + "/users/" + (trees.first ?? ""))
        let busy = "photovault: the store is locked by another photovault command; try again\n"

        let mp = sb.mount()
        XCTAssertEqual(sb.run("flock -n -x \(tree) true").status, 1, "the daemon holds no lock on the tree")
        sb.ok("flock -n -s \(tree) true")
        // Writers that do not see the mount in their runtime directory (another session's
        // XDG_RUNTIME_DIR) cannot route through it: the daemon's lock keeps them out, and
        // the error says where the vault is mounted (found through /proc/locks).
        let elsewhere = "XDG_RUNTIME_DIR=\(Sandbox.quote(sb.plainDir("other-runtime"))) "
        let mounted = "photovault: the vault of alice is mounted at \(mp): run this command on the mount or unmount first\n"
        let fromStdin = sb.run("echo x | " + elsewhere + Self.pvLine(sb, ["import", "-", "/v/new.txt"]))
        XCTAssertEqual(fromStdin.status, 11, fromStdin.stderr)
        XCTAssertEqual(fromStdin.stderr, mounted)
        let withClass = sb.run(elsewhere + Self.pvLine(sb, ["import", "--class", "none", src, "/v2"]))
        XCTAssertEqual(withClass.status, 11, withClass.stderr)
        XCTAssertEqual(withClass.stderr, mounted)
        let classSet = sb.run(elsewhere + Self.pvLine(sb, ["class", "set", "/v/src/notes.txt", "none"]))
        XCTAssertEqual(classSet.status, 11, classSet.stderr)
        XCTAssertEqual(classSet.stderr, mounted)
        // fsck --repair cannot go through the mount: one line and exit 11 whether the mount
        // is in this session's registry or known only by its lock.
        let repairRefused = "photovault: the vault of alice is mounted at \(mp): unmount it before 'fsck --repair' "
            + "(the mount must be its only writer)\n"
        let repair = sb.run(elsewhere + Self.pvLine(sb, ["fsck", "--repair"]))
        XCTAssertEqual(repair.status, 11, repair.stdout + repair.stderr)
        XCTAssertEqual(repair.stderr, repairRefused)
        let repairHere = Self.pv(sb, ["fsck", "--repair"])
        XCTAssertEqual(repairHere.status, 11, repairHere.stdout + repairHere.stderr)
        XCTAssertEqual(repairHere.stderr, repairRefused)
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/v/new.txt"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/v2"))
        XCTAssertEqual(sb.ok("getfattr --only-values -n user.photovault.class \(Sandbox.quote(mp))/v/src/notes.txt"), "complete")
        // Readers run beside the mount.
        XCTAssertEqual(sb.ok(Self.pvLine(sb, ["export", "/v/src/notes.txt", "-"])), "private notes\n")
        XCTAssertEqual(Self.pv(sb, ["fsck"]).status, 0)

        // Unmounting releases the lock.
        sb.unmount(mp)
        sb.ok("flock -n -x \(tree) true")
        let after = sb.run("echo x | " + Self.pvLine(sb, ["import", "-", "/v/new.txt"]))
        XCTAssertEqual(after.status, 0, after.stderr)

        // A mount started while an offline writer holds the tree gives up after 2 s.
        // In its own process group, so that flock and its sleep end together.
        let holder = sb.ok("setsid flock -x \(tree) sleep 30 </dev/null >/dev/null 2>&1 & echo $!")
        let holderPid = try XCTUnwrap(pid_t(holder.trimmingCharacters(in: .whitespacesAndNewlines)))
        defer { kill(-holderPid, SIGTERM) }
        XCTAssertTrue(Harness.waitUntil(5) { getpgid(holderPid) == holderPid })
        XCTAssertTrue(Harness.waitUntil(5) { sb.run("flock -n -s \(tree) true").status != 0 })
        let late = sb.root + "/mnt-late"
        try FileManager.default.createDirectory(atPath: late, withIntermediateDirectories: true)
        let refused = sb.pv(["mount", late, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(refused.status, 11, refused.stderr)
        XCTAssertEqual(refused.stderr, busy)
        XCTAssertFalse(Harness.isMounted(late))
    }

    /// What import and export cannot copy (a FIFO: offline import takes files, directories
    /// and symlinks only; a FIFO made on the mount is not exported) is named on stderr, the
    /// summary counts it, and the exit status is 26, not 0. Names that are not UTF-8 keep
    /// their exact bytes both ways, so two names never become one.
    func testSkippedEntriesAreNamedWithStatusTwentySixAndNamesKeepTheirBytes() {
        let sb = Sandbox("pv-offline-skip")
        sb.initStore()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let qs = Sandbox.quote(src + "/album")
        // caf\xe9.jpg (Latin-1) would decode to the same String as caf\u{FFFD}.jpg.
        sb.ok("""
        set -e
        mkdir \(qs)
        mkfifo \(qs)/pipe
        printf 'LATIN1-NAME' > \(qs)/caf$'\\xe9'.jpg
        printf 'REPLACEMENT-NAME' > \(qs)/caf$'\\xef\\xbf\\xbd'.jpg
        """)
        let imp = Self.pv(sb, ["import", src + "/album", "/"])
        XCTAssertEqual(imp.status, 26, imp.stderr)
        XCTAssertTrue(imp.stderr.hasPrefix("photovault: skipped /album/pipe: not a regular file, directory or symlink\n"), imp.stderr)
        XCTAssertTrue(imp.stderr.contains("imported 2 files, 1 directory, 0 symlinks, "), imp.stderr)
        XCTAssertTrue(imp.stderr.hasSuffix("; 1 skipped (named above)\n"), imp.stderr)

        let mp = sb.mount()
        sb.ok("mkfifo \(Sandbox.quote(mp))/album/made-on-mount && test -p \(Sandbox.quote(mp))/album/made-on-mount")
        XCTAssertEqual(sb.ok("ls \(Sandbox.quote(mp))/album | wc -l"), "3\n")
        sb.unmount(mp)

        let exp = Self.pv(sb, ["export", "/album", out])
        XCTAssertEqual(exp.status, 26, exp.stderr)
        XCTAssertTrue(exp.stderr.hasPrefix("photovault: skipped /album/made-on-mount: not a regular file, directory or symlink in the store\n"),
                      exp.stderr)
        XCTAssertTrue(exp.stderr.contains("exported 2 files, 1 directory, 0 symlinks, "), exp.stderr)
        XCTAssertTrue(exp.stderr.hasSuffix("; 1 skipped (named above)\n"), exp.stderr)
        let qo = Sandbox.quote(out + "/album")
        XCTAssertEqual(sb.ok("cat \(qo)/caf$'\\xe9'.jpg; echo; cat \(qo)/caf$'\\xef\\xbf\\xbd'.jpg; echo; ls -A \(qo) | wc -l"),
                       "LATIN1-NAME\nREPLACEMENT-NAME\n2\n")
        sb.assertNoPlaintext(["LATIN1-NAME", "REPLACEMENT-NAME", "album", "made-on-mount"])
    }

    /// An export that fails partway (its destination, a 1 MiB tmpfs, fills up on the second
    /// file) says where it stopped and what stays, as import does: the line was only the
    /// error's. The file before it stays complete; no partial file is left.
    func testAnExportThatFailsPartwayNamesTheFileItWasWriting() throws {
        XCTAssertEqual(getuid(), 0, "tmpfs mounts need root")
        let sb = Sandbox("pv-offline-export-partway")
        sb.initStore()
        let src = sb.plainDir("src"), out = sb.plainDir("out")
        let qs = Sandbox.quote(src), qo = Sandbox.quote(out)
        sb.ok("mkdir \(qs)/big && head -c 300000 /dev/urandom > \(qs)/big/a1.bin && head -c 3000000 /dev/urandom > \(qs)/big/b2.bin")
        XCTAssertEqual(Self.pv(sb, ["import", src + "/big", "/"]).status, 0)
        sb.ok("mount -t tmpfs -o size=1m tmpfs \(qo)")
        defer { _ = Harness.run(["umount", "-l", out]) }
        let r = Self.pv(sb, ["export", "/big/a1.bin", "/big/b2.bin", out])   // in this order (a listing has none)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
        XCTAssertTrue(r.stderr.hasSuffix("(stopped at \(out)/b2.bin, which was not kept; 1 file exported before it stays)\n"),
                      r.stderr)
        XCTAssertEqual(sb.ok("cd \(qo) && find . -type f && cmp a1.bin \(qs)/big/a1.bin && echo same"), "./a1.bin\nsame\n")
    }

    /// A source file replaced between import's lstat and its open (strace delays the open of
    /// f.jpg by 3 s, and the script swaps the file meanwhile) is skipped, exit 26, and the run
    /// goes on. A FIFO in its place made the blocking open wait for a writer: import hung.
    /// Another regular file in its place is not imported as the one that was looked at.
    func testASourceReplacedBetweenLstatAndOpenIsSkippedNotWaitedOn() throws {
        let sb = Sandbox("pv-offline-swap")
        sb.initStore()
        let src = sb.plainDir("src")
        func swapped(_ swap: String) -> (status: String, stderr: String) {
            let q = Sandbox.quote(src)
            let r = Harness.sh("""
            cd \(q) && rm -f f.jpg log err && printf 'PHOTO' > f.jpg
            timeout 20 /usr/bin/strace -f -qq -o log -P \(q) -e trace=openat -e inject=openat:delay_enter=3000000 \
              \(Sandbox.quote(Harness.binary)) import \(q)/f.jpg / --force --store \(Sandbox.quote(sb.store)) --user alice \
              --passfile \(Sandbox.quote(sb.passfile)) 2>err &
            pid=$!
            for i in $(seq 1 200); do grep -q '"f.jpg", O_RDONLY' log 2>/dev/null && break; sleep 0.05; done
            \(swap)
            wait $pid; rc=$?
            # Frees an import stuck in its open (the old code); O_RDWR never waits for a reader.
            if [ -p f.jpg ]; then exec 3<>f.jpg; echo x >&3; exec 3>&-; sleep 0.5; fi
            echo $rc; cat err
            """, env: sb.env, timeout: 60)
            XCTAssertEqual(r.status, 0, r.stderr)
            let lines = r.stdout.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            return (String(lines[0]), lines.count > 1 ? String(lines[1]) : "")
        }
        let fifo = swapped("rm f.jpg && mkfifo f.jpg")
        XCTAssertEqual(fifo.status, "26", "a FIFO in the file's place: \(fifo.stderr)")
        XCTAssertTrue(fifo.stderr.hasPrefix("photovault: skipped /f.jpg: not a regular file, directory or symlink\n"), fifo.stderr)
        let other = swapped("mv f.jpg old.jpg && printf 'OTHER' > f.jpg")   // old.jpg keeps its inode number in use
        XCTAssertEqual(other.status, "26", "another file in its place: \(other.stderr)")
        XCTAssertTrue(other.stderr.hasPrefix("photovault: skipped /f.jpg: replaced by another file while it was imported\n"),
                      other.stderr)
        XCTAssertEqual(Self.pv(sb, ["class", "get", "/f.jpg"]).status, 24, "nothing was imported as /f.jpg (not found)")
        // Left alone, the same import works.
        XCTAssertEqual(Self.pv(sb, ["import", src + "/f.jpg", "/", "--force"]).status, 0)
        let out = sb.plainDir("out")
        XCTAssertEqual(Self.pv(sb, ["export", "/f.jpg", out]).status, 0)
        XCTAssertEqual(try String(contentsOfFile: out + "/f.jpg", encoding: .utf8), "OTHER")
    }

    /// A source that holds the store (importing a home directory with the store inside)
    /// skips the vault's own encrypted tree, which would grow while it is read; a source
    /// inside that tree is refused.
    func testImportNeverReadsTheVaultsOwnTree() throws {
        let sb = Sandbox("pv-offline-self")
        let src = sb.plainDir("home")
        let inner = src + "/store"
        XCTAssertEqual(sb.pv(["init", "--store", inner]).status, 0)
        XCTAssertEqual(sb.pv(["user", "add", "alice", "--store", inner, "--passfile", sb.passfile]).status, 0)
        sb.ok("printf 'SELF-photo' > \(Sandbox.quote(src))/photo.jpg")
        let trees = try FileManager.default.contentsOfDirectory(atPath: inner + "/users")
        XCTAssertEqual(trees.count, 1)
        let args = ["--store", inner, "--user", "alice", "--passfile", sb.passfile]
        let imp = sb.pv(["import", src, "/backup"] + args, timeout: 60)
        XCTAssertEqual(imp.status, 26, imp.stderr)
        XCTAssertTrue(imp.stderr.hasPrefix("photovault: skipped /backup/home/store/users/\(trees[0]): this vault's own encrypted tree\n"),
                      imp.stderr)
        let out = sb.plainDir("out")
        XCTAssertEqual(sb.pv(["export", "/backup/home", out] + args).status, 0)
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(out))/home/photo.jpg"), "SELF-photo")
        XCTAssertEqual(sb.ok("ls -A \(Sandbox.quote(out))/home/store/users"), "")
        let refused = sb.pv(["import", inner + "/users/" + trees[0], "/x"] + args)
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("is inside this vault's encrypted tree"), refused.stderr)

        // While the vault is mounted, import goes through the mount with cp, which cannot
        // skip the tree: a source that holds it is refused, and nothing is copied.
        let mp = sb.root + "/mnt-inner"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        XCTAssertEqual(sb.pv(["mount", mp, "--no-dbus"] + args).status, 0)
        sb.mounts.append(mp)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) })
        let live = sb.pv(["import", src, "/again"] + args)
        XCTAssertEqual(live.status, 2, live.stderr)
        XCTAssertTrue(live.stderr.contains("holds or is inside this vault"), live.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: mp + "/again"))
        sb.unmount(mp)
    }
}
