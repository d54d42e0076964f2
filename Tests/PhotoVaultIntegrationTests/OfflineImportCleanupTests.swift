import Foundation
import XCTest

/// What an offline `photovault import` leaves when it fails or a signal ends it: the files it
/// completed, and no debris: no directory it made that holds nothing, no temp entry
/// (`.pvtmp-*`). Checked through the built binary, `fsck`, the store's own listing and the
/// mounted view.
final class OfflineImportCleanupTests: XCTestCase {
    static func pv(_ sb: Sandbox, _ args: [String]) -> Harness.Result { OfflineCommandTests.pv(sb, args) }

    /// Every entry of the mounted view (`find -printf %P`, sorted; directories end in `/`).
    static func view(_ sb: Sandbox) -> String {
        let mp = sb.mount()
        defer { sb.unmount(mp) }
        return sb.ok("cd \(Sandbox.quote(mp)) && find . -mindepth 1 \\( -type d -printf '%P/\\n' \\) -o -printf '%P\\n' "
                     + "| LC_ALL=C sort")
    }

    /// The store holds no temp entry, each of its ciphertext directories is one of the view
    /// (`viewDirectories` and the root), and fsck finds nothing.
    static func assertStoreClean(_ sb: Sandbox, viewDirectories: Int, _ context: String,
                                 file: StaticString = #filePath, line: UInt = #line) {
        let store = Sandbox.quote(sb.store)
        XCTAssertEqual(sb.ok("find \(store) -name '.pvtmp-*'"), "", "temp entries left: \(context)", file: file, line: line)
        XCTAssertEqual(sb.ok("find \(store) -name .pvdir | wc -l"), "\(viewDirectories + 1)\n",
                       "ciphertext directories not in the view: \(context)", file: file, line: line)
        let fsck = pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, "\(context): \(fsck.stdout)\(fsck.stderr)", file: file, line: line)
        XCTAssertTrue(fsck.stdout.hasSuffix(": 0 problems\n"), "\(context): \(fsck.stdout)", file: file, line: line)
    }

    /// An import that fails partway (here: the store is full) removes, deepest first, the
    /// directories it made that hold nothing, DEST's missing parents included; what it
    /// completed stays (a file, and an empty source directory copied completely), with the
    /// directories holding it; a directory that was there before (`/mine`, left empty) stays.
    /// The same for standard input, and for a long name (with its companion). The empty directories used to stay behind.
    func testAFailedImportRemovesTheEmptyDirectoriesItMade() throws {
        XCTAssertEqual(getuid(), 0, "a tmpfs mount needs root")
        let sb = OfflineCommandTests.sandboxWithSmallStore("pv-import-debris", self)
        let src = sb.plainDir("src"), qs = Sandbox.quote(src)
        sb.ok("mkdir -p \(qs)/mine \(qs)/tree/a/e \(qs)/tree/b/c/d && printf one > \(qs)/tree/a/1.txt "
              + "&& head -c 4000000 /dev/urandom > \(qs)/tree/b/c/d/big.bin")
        XCTAssertEqual(Self.pv(sb, ["import", src + "/mine", "/"]).status, 0)

        assertFailure(Self.pv(sb, ["import", src + "/tree", "/mine/new/deep"]), 19,
                      "(stopped at /mine/new/deep/tree/b/c/d/big.bin, which was not kept; 1 file imported before it stays)")
        // A long name: its companion goes with it (fsck would report an orphan).
        let long = String(repeating: "n", count: 200)
        assertFailure(Self.pv(sb, ["import", src + "/tree/b", "/mine/x/\(long)"]), 19,
                      "(stopped at /mine/x/\(long)/b/c/d/big.bin, which was not kept; 0 files imported before it stay)")
        let stdin = sb.run("head -c 4000000 /dev/urandom | " + OfflineCommandTests.pvLine(sb, ["import", "-", "/mine/s/t/u.bin"]))
        XCTAssertEqual(stdin.status, 19, stdin.stderr)

        XCTAssertEqual(Self.view(sb), """
        mine/
        mine/new/
        mine/new/deep/
        mine/new/deep/tree/
        mine/new/deep/tree/a/
        mine/new/deep/tree/a/1.txt
        mine/new/deep/tree/a/e/

        """)
        Self.assertStoreClean(sb, viewDirectories: 6, "after the failed imports")
    }

    /// Every removal of a directory a failed import made is synced, as its mkdir was: after
    /// each `unlinkat(PARENT, NAME, AT_REMOVEDIR)` comes an `fsync` of PARENT (traced with
    /// `strace -y`, which names each descriptor's path), so a crash cannot bring back the
    /// empty directory. Here all six (DEST's parents `/new`, `/new/deep`, and `tree`, `b`,
    /// `c`, `d`) go: the only file fills the store. They used to be removed unsynced.
    func testEveryRemovalOfAnEmptyDirectoryIsSynced() throws {
        XCTAssertEqual(getuid(), 0, "a tmpfs mount needs root")
        let sb = OfflineCommandTests.sandboxWithSmallStore("pv-import-rmsync", self)
        let src = sb.plainDir("src"), qs = Sandbox.quote(src), trace = sb.root + "/trace"
        sb.ok("mkdir -p \(qs)/tree/b/c/d && head -c 4000000 /dev/urandom > \(qs)/tree/b/c/d/big.bin")
        let r = sb.run("strace -f -qq -y -o \(Sandbox.quote(trace)) -e trace=unlinkat,fsync "
                       + OfflineCommandTests.pvLine(sb, ["import", src + "/tree", "/new/deep"]))
        XCTAssertEqual(r.status, 19, r.stderr)
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
        var removed: [String] = []
        // The probe of the store's drive (docs/STORAGE.md) removes its scratch directory too,
        // synced the same way; it is not one the import made.
        for (i, line) in lines.enumerated() where line.hasSuffix("AT_REMOVEDIR) = 0") && !line.contains(".pvtmp-probe-") {
            // "PID unlinkat(5</tmp/.../store/...>, "NAME", AT_REMOVEDIR) = 0"
            guard let open = line.range(of: "unlinkat("), let comma = line.range(of: ", \"", range: open.upperBound..<line.endIndex)
            else { XCTFail("unexpected trace line: \(line)"); continue }
            let parent = String(line[open.upperBound..<comma.lowerBound])
            removed.append(parent)
            XCTAssertTrue(lines[(i + 1)...].contains { $0.contains("fsync(\(parent)) = 0") },
                          "no fsync of \(parent) after the removal: \(line)")
        }
        XCTAssertEqual(removed.count, 6, "directories removed: \(removed)")
        XCTAssertEqual(Self.view(sb), "")
        Self.assertStoreClean(sb, viewDirectories: 0, "after the failed import")
    }

    /// A Ctrl-C or a SIGTERM while import writes a file removes, besides that file's temp
    /// file, the directories the import made that hold nothing, deepest first: DEST's parents
    /// (stdin from a pipe that delivered 2.5 MB and then waits), and the directory the
    /// interrupted file was going into (a tree whose big file is held in its fsync by
    /// strace), not the one holding the file completed before it. The signal still ends the
    /// command (128 + signal). The empty directories used to stay behind.
    func testASignalRemovesTheEmptyDirectoriesTheImportMade() {
        let sb = Sandbox("pv-import-signal-debris")
        sb.initStore()
        let work = sb.plainDir("work"), q = Sandbox.quote(work), store = Sandbox.quote(sb.store)
        sb.ok("mkdir -p \(q)/mine \(q)/tree/a \(q)/tree/b && printf one > \(q)/tree/a/1.txt "
              + "&& head -c 2000000 /dev/urandom > \(q)/tree/b/big.bin")
        XCTAssertEqual(Self.pv(sb, ["import", work + "/mine", "/"]).status, 0)
        let waitForBigTemp = "for i in $(seq 400); do [ -n \"$(find \(store) -name '.pvtmp-*' -type f -size +1000k)\" ] "
            + "&& break; sleep 0.05; done; find \(store) -name '.pvtmp-*' -type f -size +1000k | wc -l"

        let stdin = sb.run("""
        set -m   # job control: a background job keeps SIGINT (a script's would ignore it)
        cd \(q) && mkfifo in
        (head -c 2500000 /dev/urandom; sleep 60) > in &
        writer=$!
        \(OfflineCommandTests.pvLine(sb, ["import", "-", "/mine/s/t/u.bin"])) < in 2>/dev/null &
        pv=$!
        \(waitForBigTemp)
        kill -INT $pv; wait $pv; echo "status $?"
        kill -- -$writer
        """, timeout: 60)
        XCTAssertEqual(stdin.stdout, "1\nstatus 130\n", stdin.stderr)

        let tree = sb.run("""
        set -m
        strace -f -qq -o /dev/null -e trace=fsync -e inject=fsync:delay_enter=500000 \
          \(OfflineCommandTests.pvLine(sb, ["import", work + "/tree", "/mine/new"])) 2>/dev/null &
        \(waitForBigTemp)
        kill -TERM $(ps -o pid= --ppid $!); wait $!
        """, timeout: 120)
        XCTAssertEqual(tree.stdout, "1\n", tree.stderr)

        XCTAssertEqual(Self.view(sb), """
        mine/
        mine/new/
        mine/new/tree/
        mine/new/tree/a/
        mine/new/tree/a/1.txt

        """)
        Self.assertStoreClean(sb, viewDirectories: 4, "after the interrupted imports")
    }

    /// A Ctrl-C or a SIGTERM while import makes a directory (held by strace right after the
    /// mkdir of its temp directory: DEST's missing parent, with a long name and so a
    /// companion, and a source directory) or a symlink (right after the symlink under its
    /// temp name) leaves no `.pvtmp-*` entry and no orphan companion: the step ends first
    /// (a directory then holding nothing is removed as above; the symlink stays, complete),
    /// and then the signal ends the command. The temp directory or symlink used to stay
    /// (fsck: leftoverTemp; the long name's companion: orphanCompanion).
    func testASignalWhileADirectoryOrASymlinkIsMadeLeavesNoTempEntry() {
        let sb = Sandbox("pv-import-signal-temp")
        sb.initStore()
        let work = sb.plainDir("work"), q = Sandbox.quote(work), store = Sandbox.quote(sb.store)
        sb.ok("mkdir -p \(q)/mine \(q)/t && printf aaa > \(q)/t/a.txt && ln -s a.txt \(q)/t/link")
        XCTAssertEqual(Self.pv(sb, ["import", work + "/mine", "/"]).status, 0)
        let long = "/mine/" + String(repeating: "n", count: 200)
        let cases = [("mkdirat", "d", long, "INT"), ("mkdirat", "d", "/", "TERM"), ("symlinkat", "l", "/mine", "INT")]
        // Not the scratch directory in which the command first probes the store's drive
        // (docs/STORAGE.md): it is gone before the import begins.
        let notProbe = "-not -path '*/.pvtmp-probe-*'"
        for (call, type, dest, sig) in cases {
            let r = sb.run("""
            set -m
            strace -f -qq -o /dev/null -e trace=\(call) -e inject=\(call):delay_exit=2000000 \\
              \(OfflineCommandTests.pvLine(sb, ["import", work + "/t", dest])) 2>/dev/null &
            for i in $(seq 200); do [ -n "$(find \(store) -name '.pvtmp-*' -type \(type) \(notProbe))" ] && break; sleep 0.05; done
            find \(store) -name '.pvtmp-*' -type \(type) \(notProbe) | wc -l
            kill -\(sig) $(ps -o pid= --ppid $!); wait $!; echo "status $?"
            """, timeout: 60)
            // strace ends as its tracee did: by the signal.
            XCTAssertEqual(r.stdout, "1\nstatus \(sig == "INT" ? 130 : 143)\n", "\(call) into \(dest): \(r.stderr)")
            XCTAssertEqual(sb.ok("find \(store) -name '.pvtmp-*'"), "", "\(call) into \(dest), SIG\(sig)")
        }

        XCTAssertEqual(Self.view(sb), """
        mine/
        mine/t/
        mine/t/a.txt
        mine/t/link

        """)
        Self.assertStoreClean(sb, viewDirectories: 2, "after the interrupted imports")
    }
}
