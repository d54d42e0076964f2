import Foundation
import XCTest

/// Protection classes on a live mount through the virtual xattr `user.photovault.class`
/// (setfattr/getfattr), and what a class change does underneath.
final class ClassAttributeTests: XCTestCase {
    static let attr = "user.photovault.class"

    static func getClass(_ path: String) -> String? {
        let r = Harness.run(["getfattr", "--only-values", "-n", attr, path], timeout: 10)
        return r.status == 0 ? r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) : nil
    }

    @discardableResult
    static func setClass(_ path: String, _ cls: String) -> Harness.Result {
        Harness.run(["setfattr", "-n", attr, "-v", cls, path], timeout: 10)
    }

    /// The ciphertext file underneath holding a plaintext of `plaintextSize` bytes: the
    /// smallest regular file at least that size plus the 128-byte header (the test writes
    /// no other file that large).
    static func cipherFile(_ store: String, plaintextSize: Int) -> String? {
        var best: (String, Int)?
        guard let e = FileManager.default.enumerator(atPath: store + "/users") else { return nil }
        while let rel = e.nextObject() as? String {
            let p = store + "/users/" + rel
            var st = stat()
            guard lstat(p, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            let size = Int(st.st_size)
            if size >= plaintextSize + 128, best == nil || size < best!.1 { best = (p, size) }
        }
        return best?.0
    }

    func testClassThroughXattrsAndDirectoryDefaults() throws {
        let s = Sandbox("class-xattr")
        s.initStore()
        let mp = s.mount()
        try Data("default".utf8).write(to: URL(fileURLWithPath: mp + "/a.jpg"))
        // A new file in the root gets the root's default, which is complete.
        XCTAssertEqual(Self.getClass(mp), "complete")
        XCTAssertEqual(Self.getClass(mp + "/a.jpg"), "complete")

        for cls in ["none", "until-first-auth", "complete-unless-open", "complete"] {
            let r = Self.setClass(mp + "/a.jpg", cls)
            XCTAssertEqual(r.status, 0, "setfattr \(cls): \(r.stderr)")
            XCTAssertEqual(Self.getClass(mp + "/a.jpg"), cls)
            XCTAssertEqual(try String(contentsOfFile: mp + "/a.jpg", encoding: .utf8), "default")
        }
        // A name that is not a class is refused, and nothing changes.
        let bad = Self.setClass(mp + "/a.jpg", "secret")
        XCTAssertNotEqual(bad.status, 0)
        XCTAssertTrue(bad.stderr.contains("Invalid argument"), bad.stderr)
        XCTAssertEqual(Self.getClass(mp + "/a.jpg"), "complete")
        // It is read by name only: a listing shows what the user set (nothing here).
        let dump = Harness.run(["getfattr", "-d", "-m", "-", mp + "/a.jpg"], timeout: 10)
        XCTAssertEqual(dump.status, 0, dump.stderr)
        XCTAssertFalse(dump.stdout.contains(Self.attr), dump.stdout)

        // A directory's class is the default for new files in it (and only new ones).
        try FileManager.default.createDirectory(atPath: mp + "/open", withIntermediateDirectories: false)
        try Data("before".utf8).write(to: URL(fileURLWithPath: mp + "/open/before.jpg"))
        XCTAssertEqual(Self.setClass(mp + "/open", "complete-unless-open").status, 0)
        XCTAssertEqual(Self.getClass(mp + "/open"), "complete-unless-open")
        try Data("after".utf8).write(to: URL(fileURLWithPath: mp + "/open/after.jpg"))
        XCTAssertEqual(Self.getClass(mp + "/open/after.jpg"), "complete-unless-open")
        XCTAssertEqual(Self.getClass(mp + "/open/before.jpg"), "complete", "an existing file must keep its class")
        // cp, touch and a shell redirection all create files with the directory's class.
        XCTAssertEqual(Harness.sh("cp \(mp)/a.jpg \(mp)/open/copy.jpg && touch \(mp)/open/t.jpg && echo x > \(mp)/open/r.jpg").status, 0)
        for f in ["copy.jpg", "t.jpg", "r.jpg"] {
            XCTAssertEqual(Self.getClass(mp + "/open/\(f)"), "complete-unless-open", f)
        }
        // A subdirectory made later starts from its own default, not the parent's.
        try FileManager.default.createDirectory(atPath: mp + "/open/sub", withIntermediateDirectories: false)
        XCTAssertNotNil(Self.getClass(mp + "/open/sub"))

        // Survives a remount: the class lives in the header and in .pvdir.
        s.unmount(mp)
        let mp2 = s.mount(at: "again")
        XCTAssertEqual(Self.getClass(mp2 + "/open"), "complete-unless-open")
        XCTAssertEqual(Self.getClass(mp2 + "/open/after.jpg"), "complete-unless-open")
        XCTAssertEqual(Self.getClass(mp2 + "/a.jpg"), "complete")
        s.unmount(mp2)
    }

    /// A 0-byte ciphertext file (a crash between create and header write, or an offline
    /// tool) gets its directory's default class on its first write, as a new file does; it
    /// got `complete` whatever the directory said.
    func testHeaderlessFileGetsTheDirectoryDefaultOnFirstWrite() throws {
        let s = Sandbox("class-headerless")
        s.initStore()
        var mp = s.mount()
        let size = 50_000
        try FileManager.default.createDirectory(atPath: mp + "/d", withIntermediateDirectories: false)
        XCTAssertEqual(Self.setClass(mp + "/d", "none").status, 0)
        try Data(AccountFixtures.randomBytes(size)).write(to: URL(fileURLWithPath: mp + "/d/x"))
        XCTAssertEqual(Self.getClass(mp + "/d/x"), "none")
        s.unmount(mp)
        let path = try XCTUnwrap(Self.cipherFile(s.store, plaintextSize: size), "ciphertext of d/x not found")
        XCTAssertEqual(truncate(path, 0), 0)

        mp = s.mount(at: "again")
        XCTAssertEqual(s.ok("stat -c %s \(mp)/d/x"), "0\n")
        // Before its first write the class attribute reads as the class it will get; a copy
        // that preserves xattrs (rsync -X) copies none, the mount listing none of its own.
        XCTAssertEqual(Self.getClass(mp + "/d/x"), "none")
        let copy = s.plainDir("copy")
        s.ok("rsync -aX \(mp)/d/ \(copy)/")
        XCTAssertEqual(s.ok("getfattr -d -m - \(copy)/x"), "")
        s.ok("echo hi > \(mp)/d/x")
        XCTAssertEqual(Self.getClass(mp + "/d/x"), "none")
        XCTAssertEqual([UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))[6], 4, "none is class 4 in the header")
        XCTAssertEqual(try String(contentsOfFile: mp + "/d/x", encoding: .utf8), "hi\n")
        s.unmount(mp)
    }

    /// A header-less file with hard links in two directories whose defaults differ: its class
    /// belongs to the file, not to the name it is reached by. With several links it is the
    /// strictest class (`complete`) under either name, through the mount and offline, and its
    /// first write gives it that class. It used to take the default of whichever directory it
    /// was last looked up in (`none` through /n, `complete` through /c). With one link left
    /// it is its directory's default again.
    func testHardLinkedHeaderlessFileHasOneClassWhicheverNameIsUsed() throws {
        let s = Sandbox("class-headerless-links")
        s.initStore()
        var mp = s.mount()
        let q = Sandbox.quote(mp)
        s.ok("mkdir \(q)/c \(q)/n && echo x > \(q)/n/x && ln \(q)/n/x \(q)/c/x")
        XCTAssertEqual(Self.setClass(mp + "/n", "none").status, 0)
        s.unmount(mp)
        let paths = s.ok("find \(Sandbox.quote(s.store))/users -type f -links 2").split(separator: "\n").map(String.init)
        XCTAssertEqual(paths.count, 2, "\(paths)")
        let path = try XCTUnwrap(paths.first)
        XCTAssertEqual(truncate(path, 0), 0)
        let args = ["--store", s.store, "--user", "alice", "--passfile", s.passfile]
        for name in ["/n/x", "/c/x"] {
            XCTAssertEqual(s.pv(["class", "get", name] + args).stdout, "complete\n", "offline \(name)")
        }

        mp = s.mount(at: "again")
        // Looked up through /c, then through /n (the last lookup used to decide).
        XCTAssertEqual(Self.getClass(mp + "/c/x"), "complete")
        XCTAssertEqual(Self.getClass(mp + "/n/x"), "complete")
        XCTAssertEqual(Self.getClass(mp + "/c/x"), "complete")
        s.ok("printf hi >> \(Sandbox.quote(mp))/n/x")
        XCTAssertEqual([UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))[6], 1, "complete is class 1 in the header")
        XCTAssertEqual(try String(contentsOfFile: mp + "/c/x", encoding: .utf8), "hi")
        XCTAssertEqual(Self.getClass(mp + "/n/x"), "complete")

        // One link left: a header-less file takes its directory's default.
        s.ok("rm \(Sandbox.quote(mp))/c/x")
        s.unmount(mp)
        let left = try XCTUnwrap(paths.first { FileManager.default.fileExists(atPath: $0) })
        XCTAssertEqual(truncate(left, 0), 0)
        XCTAssertEqual(s.pv(["class", "get", "/n/x"] + args).stdout, "none\n")
        mp = s.mount(at: "third")
        XCTAssertEqual(Self.getClass(mp + "/n/x"), "none")
        s.unmount(mp)
    }

    /// Changing a class rewrites the 128-byte header only: the chunks after it are unchanged,
    /// byte for byte, and byte 6 of the header is the class number (FORMAT.md section 4).
    func testClassChangeRewritesOnlyTheHeader() throws {
        let s = Sandbox("class-header")
        s.initStore()
        let mp = s.mount()
        let size = 200_000 + 123
        let plain = AccountFixtures.randomBytes(size)
        try Data(plain).write(to: URL(fileURLWithPath: mp + "/big.jpg"))
        let path = try XCTUnwrap(Self.cipherFile(s.store, plaintextSize: size), "ciphertext of big.jpg not found")
        var before = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        XCTAssertEqual(Array(before[0..<4]), [0x50, 0x56, 0x46, 0x00])
        XCTAssertEqual(before[6], 1, "complete is class 1")
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        let inode = st.st_ino
        let mtime = st.st_mtim

        let numbers = ["none": 4, "until-first-auth": 3, "complete-unless-open": 2, "complete": 1]
        for cls in ["none", "complete-unless-open", "until-first-auth", "complete"] {
            XCTAssertEqual(Self.setClass(mp + "/big.jpg", cls).status, 0)
            let after = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            XCTAssertEqual(after.count, before.count)
            XCTAssertEqual(after[6], UInt8(numbers[cls]!), cls)
            XCTAssertEqual(Array(after[128...]), Array(before[128...]), "\(cls): content after the header changed")
            XCTAssertEqual(Array(after[8..<24]), Array(before[8..<24]), "\(cls): file ID changed")
            XCTAssertNotEqual(Array(after[24..<128]), Array(before[24..<128]), "\(cls): key slot not rewrapped")
            XCTAssertEqual(stat(path, &st), 0)
            XCTAssertEqual(st.st_ino, inode, "the header is rewritten in place")
            // A class change is not a content change: the mtime (carried by the ciphertext) stays.
            XCTAssertEqual([st.st_mtim.tv_sec, st.st_mtim.tv_nsec], [mtime.tv_sec, mtime.tv_nsec], cls)
            before = after
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: mp + "/big.jpg")), Data(plain))
        }
        s.unmount(mp)
        let mp2 = s.mount(at: "again")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: mp2 + "/big.jpg")), Data(plain))
        s.unmount(mp2)
    }

    /// Byte 6 of a header changed underneath (a `complete` file made to say `none`): the
    /// class attribute on the mount and `photovault class get` offline used to print `none`
    /// (exit 0) for a file that fails authentication. Now: EIO, and exit 22 naming the file.
    func testAClassByteChangedUnderneathIsNotShownAsTheClass() throws {
        let s = Sandbox("class-forged")
        s.initStore()
        var mp = s.mount()
        let size = 50_000 + 7
        try Data(AccountFixtures.randomBytes(size)).write(to: URL(fileURLWithPath: mp + "/big.jpg"))
        try Data("ok".utf8).write(to: URL(fileURLWithPath: mp + "/small.jpg"))
        XCTAssertEqual(Self.getClass(mp + "/big.jpg"), "complete")
        s.unmount(mp)
        let path = try XCTUnwrap(Self.cipherFile(s.store, plaintextSize: size), "ciphertext of big.jpg not found")
        let fd = open(path, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var b: UInt8 = 4   // none
        XCTAssertEqual(pwrite(fd, &b, 1, 6), 1)
        close(fd)

        let off = s.pv(["class", "get", "/big.jpg", "--store", s.store, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(off.status, 22, "stdout: \(off.stdout) stderr: \(off.stderr)")
        XCTAssertFalse(off.stdout.contains("none"), off.stdout)
        XCTAssertTrue(off.stderr.contains("/big.jpg"), off.stderr)

        mp = s.mount(at: "again")
        let r = Harness.run(["getfattr", "--only-values", "-n", Self.attr, mp + "/big.jpg"], timeout: 10)
        XCTAssertNotEqual(r.status, 0, "class shown: \(r.stdout)")
        XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        XCTAssertEqual(Self.getClass(mp + "/small.jpg"), "complete")
        s.unmount(mp)
    }
    /// A class change whose header fsync fails (EIO injected on the ciphertext file) is
    /// reported as EIO, but the new header was written: the daemon kept the old header and
    /// class in memory, so while the file stayed open the mount showed `complete` where the
    /// file (and `photovault class get` after unmounting) said `none`. Now the mount shows
    /// what the file holds, and the file reads back the same through the mount and after.
    func testAClassChangeWhoseFsyncFailsShowsWhatTheFileHolds() throws {
        let s = Sandbox("class-fsync-eio")
        s.initStore()
        let fg = try ForegroundMount(sandbox: s, at: "mnt", extra: [])
        var mounted = true
        defer { if mounted { fg.stop(s) } }
        XCTAssertTrue(fg.waitMounted(), fg.log)
        let mp = fg.mountpoint
        let size = 30_000 + 11
        let plain = Data(AccountFixtures.randomBytes(size))
        try plain.write(to: URL(fileURLWithPath: mp + "/p.jpg"))
        XCTAssertEqual(Self.getClass(mp + "/p.jpg"), "complete")
        // Held open so the daemon keeps the file's content (and header) in memory.
        let held = try XCTUnwrap(FileHandle(forReadingAtPath: mp + "/p.jpg"))
        let path = try XCTUnwrap(Self.cipherFile(s.store, plaintextSize: size), "ciphertext of p.jpg not found")
        let fault = try fg.injectFault(on: path, syscall: "fsync", error: "EIO")
        let r = Self.setClass(mp + "/p.jpg", "none")
        fault.terminate()
        fault.waitUntilExit()
        XCTAssertNotEqual(r.status, 0, "the failed fsync must be reported")
        XCTAssertTrue(r.stderr.contains("Input/output error"), r.stderr)
        let shown = Self.getClass(mp + "/p.jpg")
        XCTAssertEqual(try held.readToEnd(), plain)
        try held.close()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: mp + "/p.jpg")), plain)
        fg.stop(s)
        mounted = false
        let off = s.pv(["class", "get", "/p.jpg", "--store", s.store, "--user", "alice", "--passfile", s.passfile])
        XCTAssertEqual(off.status, 0, off.stderr)
        XCTAssertEqual(off.stdout, "none\n", "the header was written")
        XCTAssertEqual(shown.map { $0 + "\n" }, off.stdout, "the mount must show the class the file holds")
        let mp2 = s.mount(at: "again")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: mp2 + "/p.jpg")), plain)
        XCTAssertEqual(Self.getClass(mp2 + "/p.jpg"), "none")
        s.unmount(mp2)
    }
}
