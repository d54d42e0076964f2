import Foundation
import XCTest

/// A library of thousands of photos: listings that cannot crash the daemon, and a daemon
/// whose descriptors stay bounded however many files the kernel remembers.
final class LargeLibraryTests: XCTestCase {
    /// A preload library that hands out every `readdir` record copied to the very end of a
    /// page followed by an inaccessible one: reading a single byte past the record's
    /// `d_reclen` (as copying all 256 bytes of `d_name` does) faults at once. glibc's own
    /// buffer ends at a page boundary only by chance (8 of 10 cold listings of 36 x 500
    /// short names crashed the daemon on one machine, none on another); this makes the
    /// chance a certainty. Written for this test, compiled with the system's cc.
    static let guardPageReaddir = #"""
    #define _GNU_SOURCE
    #include <dirent.h>
    #include <dlfcn.h>
    #include <string.h>
    #include <sys/mman.h>
    static __thread char *page;
    static struct dirent *at_page_end(struct dirent *e) {
        if (!e) return e;
        if (!page) {
            page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            mprotect(page + 4096, 4096, PROT_NONE);
        }
        char *dst = page + 4096 - e->d_reclen;
        memcpy(dst, e, e->d_reclen);
        return (struct dirent *)dst;
    }
    struct dirent *readdir(DIR *d) {
        static struct dirent *(*real)(DIR *);
        if (!real) real = (struct dirent *(*)(DIR *))dlsym(RTLD_NEXT, "readdir");
        return at_page_end(real(d));
    }
    struct dirent64 *readdir64(DIR *d) {
        static struct dirent64 *(*real)(DIR *);
        if (!real) real = (struct dirent64 *(*)(DIR *))dlsym(RTLD_NEXT, "readdir64");
        return (struct dirent64 *)at_page_end((struct dirent *)real(d));
    }
    """#

    /// Builds the preload library in the sandbox; returns its path.
    static func buildGuardPageReaddir(_ sb: Sandbox, file: StaticString = #filePath, line: UInt = #line) -> String {
        let src = sb.root + "/guard-readdir.c", lib = sb.root + "/guard-readdir.so"
        try! guardPageReaddir.write(toFile: src, atomically: true, encoding: .utf8)
        sb.ok("cc -shared -fPIC -O1 -o \(Sandbox.quote(lib)) \(Sandbox.quote(src)) -ldl", file: file, line: line)
        return lib
    }

    /// Every directory listing the daemon and the offline tools make reads each name within
    /// its record: a cold `ls -lR` of thousands of short names (`f0` ... `f499`, the records
    /// that end a few bytes after their name) through a daemon whose `readdir` records end
    /// at a page boundary, three times, leaves it alive; `fsck`, `export` and `status`
    /// (the store's own listings and the class census) list the same tree offline.
    func testListingShortNamesNeverReadsPastADirectoryRecord() throws {
        let sb = Sandbox("pv-dirent")
        sb.initStore()
        let lib = Self.buildGuardPageReaddir(sb)
        // The preloaded mount: the daemon inherits LD_PRELOAD from the command that starts it.
        let mp = sb.mountWrapped("env LD_PRELOAD=\(Sandbox.quote(lib))", at: "mnt")
        let q = Sandbox.quote(mp)
        guard let pid = MountProbe.daemonPID(sb, mp) else { return XCTFail("no daemon pid") }
        XCTAssertTrue(sb.ok("grep -c guard-readdir /proc/\(pid)/maps") != "0\n", "the daemon did not load the preload")
        sb.ok("for d in $(seq 0 5); do mkdir \(q)/d$d && (cd \(q)/d$d && touch $(seq -f 'f%g' 0 499)); done")
        for pass in 1...3 {
            sb.ok("echo 2 > /proc/sys/vm/drop_caches")
            let r = sb.run("ls -lR \(q) | grep -c ' f[0-9]*$'")
            XCTAssertEqual(r.stdout, "3000\n", "pass \(pass): \(r.stderr)")
            XCTAssertTrue(MountProbe.isAlive(pid), "the daemon died listing pass \(pass)")
        }
        // The status command's class census walks the store's tree.
        let status = Harness.run(["env", "LD_PRELOAD=\(lib)", Harness.binary, "status"], env: sb.env)
        XCTAssertEqual(status.status, 0, status.stderr)
        sb.unmount(mp)
        for args in [["fsck", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile],
                     ["export", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "/d3", sb.root + "/out"]] {
            let r = Harness.run(["env", "LD_PRELOAD=\(lib)", Harness.binary] + args, env: sb.env, timeout: 300)
            XCTAssertEqual(r.status, 0, "\(args[0]) under the guard page: \(r.status) \(r.stderr)")
        }
        XCTAssertEqual(sb.ok("find \(Sandbox.quote(sb.root))/out -type f | wc -l"), "500\n")
    }

    /// Descriptors per daemon, counted in /proc.
    static func descriptors(_ sb: Sandbox, _ pid: pid_t) -> Int {
        Int(sb.ok("ls /proc/\(pid)/fd | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// A library far larger than the daemon's descriptor limit (300, without
    /// CAP_SYS_RESOURCE to raise it): 4,000 files in 8 folders are created, listed cold
    /// (`ls -lR`, `find`, `du`), read back and checked, forgotten by the kernel (drop_caches)
    /// and looked up again, with the daemon's descriptors staying far below the limit
    /// throughout. (The daemon held one descriptor per remembered file and failed with
    /// EMFILE past the limit.) Renames, hard links and unlinking an open file keep working
    /// when the nodes involved have had their descriptors closed; numbers stay stable.
    func testALibraryLargerThanTheDescriptorLimitWorks() throws {
        let sb = Sandbox("pv-manyfds")
        sb.initStore()
        let mp = sb.mountWrapped("setpriv --bounding-set -sys_resource --inh-caps -sys_resource -- prlimit --nofile=300:300",
                                 at: "mnt")
        let q = Sandbox.quote(mp)
        guard let pid = MountProbe.daemonPID(sb, mp) else { return XCTFail("no daemon pid") }
        sb.ok("""
        set -e
        for d in $(seq 0 7); do
          mkdir \(q)/album$d
          cd \(q)/album$d
          for i in $(seq 0 499); do printf 'photo %s/%s' $d $i > IMG_$i.jpg; done
        done
        """, timeout: 600)
        var peak = Self.descriptors(sb, pid)
        let inoBefore = sb.ok("stat -c %i \(q)/album3/IMG_7.jpg")
        for pass in 1...2 {
            sb.ok("sync; echo 2 > /proc/sys/vm/drop_caches")
            XCTAssertEqual(sb.ok("ls -lR \(q) | grep -c 'IMG_[0-9]*\\.jpg$'"), "4000\n", "pass \(pass)")
            peak = max(peak, Self.descriptors(sb, pid))
            XCTAssertEqual(sb.ok("find \(q) -type f | wc -l"), "4000\n")
            XCTAssertEqual(sb.ok("du -a \(q) | wc -l"), "4009\n")
            // Every file read back (one process): its content names its place.
            let wrong = sb.ok("""
            cd \(q)
            for d in $(seq 0 7); do for i in $(seq 0 499); do printf '%s\\n' "album$d/IMG_$i.jpg photo $d/$i"; done; done | sort > /tmp/expected.$$
            python3 -c 'import sys
            for p in sys.stdin.read().split(): print(p, open(p).read())' <<< "$(ls -d album*/*)" | sort | diff - /tmp/expected.$$ | grep -c '^[<>]' || true
            rm -f /tmp/expected.$$
            """, timeout: 600)
            XCTAssertEqual(wrong, "0\n", "pass \(pass): files read back wrong")
            peak = max(peak, Self.descriptors(sb, pid))
        }
        XCTAssertLessThan(peak, 200, "the daemon's descriptors grew with the library")
        XCTAssertEqual(sb.ok("stat -c %i \(q)/album3/IMG_7.jpg"), inoBefore, "st_ino changed across forget and lookup")
        // Names made while most nodes' descriptors are closed: a rename within and across
        // folders, a hard link, and an open file unlinked and still read and written.
        sb.ok("""
        set -e
        cd \(q)
        mv album0/IMG_1.jpg album0/renamed.jpg
        mv album0 album0-moved
        mv album1/IMG_2.jpg album0-moved/from-1.jpg
        ln album2/IMG_3.jpg album5/link.jpg
        echo 2 > /proc/sys/vm/drop_caches
        [ "$(cat album0-moved/renamed.jpg)" = 'photo 0/1' ]
        [ "$(cat album0-moved/from-1.jpg)" = 'photo 1/2' ]
        [ "$(stat -c %h album5/link.jpg)" = 2 ]
        [ "$(stat -c %i album5/link.jpg)" = "$(stat -c %i album2/IMG_3.jpg)" ]
        exec 3<>album4/IMG_9.jpg
        rm album4/IMG_9.jpg
        for d in 6 7; do cat album$d/* > /dev/null; done
        echo 2 > /proc/sys/vm/drop_caches
        [ "$(cat <&3)" = 'photo 4/9' ]
        printf ' more' >&3
        [ "$(stat -L -c %s /proc/self/fd/3)" = 14 ]
        exec 3>&-
        [ ! -e album4/IMG_9.jpg ]
        """)
        XCTAssertTrue(MountProbe.isAlive(pid))
        sb.ok("rm -rf \(q)/album*")
        XCTAssertEqual(sb.ok("ls -A \(q) | wc -l"), "0\n")
        sb.unmount(mp)
    }
}
