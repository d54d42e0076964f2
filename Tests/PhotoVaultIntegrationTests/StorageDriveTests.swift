import Foundation
import XCTest

/// A store on the drives people keep photos on (issue 39, docs/STORAGE.md): exFAT through
/// exfat-fuse and NTFS through ntfs-3g, each on a small loop image (the kernel here has
/// neither exfat nor vfat). The whole photo workflow runs on each, and what the drive cannot
/// hold is refused at that operation with the errno a local file system of that kind gives,
/// while everything else in the folder goes on working.
final class StorageDriveTests: XCTestCase {
    func testTheWholeWorkflowRunsOnAnExfatDrive() throws {
        try StorageWorkflow.run(.exfat)
    }

    func testTheWholeWorkflowRunsOnAnNtfsDrive() throws {
        try StorageWorkflow.run(.ntfs)
    }

    /// exFAT: `init` used to fail with 'link photovault.conf: Operation not permitted' (no
    /// hard links), and a store copied there could not make a folder (mkdir EINVAL: no
    /// renameat2 RENAME_NOREPLACE). Two inits at once still make one store, as link(2) did.
    func testInitOnAnExfatDriveMakesOneStoreWhenTwoRaceAndRefusesASecond() throws {
        let sb = Sandbox("pv-exfat-init")
        let release = try sb.storeOnDrive(.exfat)
        defer { release() }
        let nested = sb.store + "/Photos/PhotoVault"
        let racers = (0..<4).map { _ in "\(Sandbox.quote(Harness.binary)) init --store \(Sandbox.quote(nested)) >/dev/null 2>&1 & " }
        let out = sb.ok("""
        \(racers.joined())
        ok=0; for p in $(jobs -p); do wait $p && ok=$((ok+1)); done; echo $ok
        """)
        XCTAssertEqual(out.trimmingCharacters(in: .whitespacesAndNewlines), "1", "exactly one of four inits at once succeeds")
        let again = sb.pv(["init", "--store", nested])
        XCTAssertEqual(again.status, 20, again.stderr)
        XCTAssertTrue(again.stderr.contains("already exists"), again.stderr)
        XCTAssertEqual(sb.run("ls -A \(Sandbox.quote(nested)) | grep -c pvtmp").stdout.trimmingCharacters(in: .whitespacesAndNewlines), "0",
                       "no temp file or probe directory is left")
        // What the vault will refuse there is said at init.
        let other = sb.pv(["init", "--store", sb.store + "/Other"])
        XCTAssertEqual(other.status, 0, other.stderr)
        XCTAssertTrue(other.stdout.contains("Note: this drive keeps no hard links, symlinks, extended attributes; the vault refuses them here"),
                      other.stdout)
        let add = sb.pv(["user", "add", "alice", "--store", nested, "--passfile", sb.passfile])
        XCTAssertEqual(add.status, 0, add.stderr)
    }

    /// A drive mounted elsewhere under a name that is not UTF-8 (an NTFS label in Latin-1,
    /// 'Fotos-\xdc'): every mount was invisible to photovault, so `status` did not list the
    /// vault and `unmount` said 'no vault is mounted' (exit 18) about a live one.
    func testADriveWithALatin1NameElsewhereHidesNoVault() throws {
        let sb = Sandbox("pv-latin1")
        sb.initStore()
        let mp = sb.mount()
        let other = Sandbox.quote(sb.root + "/media")
        sb.ok("mkdir -p \(other)/\"$(printf 'Fotos-\\xdc')\" && mount -t tmpfs -o size=1m tmpfs \(other)/Fotos-*")
        defer { _ = sb.run("umount \(other)/Fotos-*; rm -rf \(other)") }
        let status = sb.pv(["status"])
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains(mp), status.stdout)
        sb.unmount(mp)
    }
}

/// The photo workflow of issue 39, item 1, and the refusals of item 2, on a store on `drive`.
enum StorageWorkflow {
    static func run(_ drive: Sandbox.Drive, file: StaticString = #filePath, line: UInt = #line) throws {
        let sb = Sandbox("pv-\(drive.rawValue)")
        let release = try sb.storeOnDrive(drive)
        defer { release() }
        let plain = sb.plainDir("plain")
        let qp = Sandbox.quote(plain)
        sb.ok("""
        set -e
        cd \(qp)
        head -c 300000 /dev/urandom > beach.jpg; head -c 5000 /dev/urandom > dog.jpg
        printf 'secret holiday words' > notes.txt
        mkdir Roadtrip && head -c 70000 /dev/urandom > Roadtrip/sunset.jpg
        """)
        sb.initStore(users: ["alice", "bobsleigh"])
        let passwd = sb.pv(["user", "passwd", "alice", "--store", sb.store, "--passfile", sb.passfile, "--new-passfile", sb.passfile])
        XCTAssertEqual(passwd.status, 0, passwd.stderr, file: file, line: line)

        var mp = sb.mount()
        let qm = Sandbox.quote(mp)
        sb.ok("""
        set -e
        mkdir \(qm)/Holiday
        mkdir -p \(qm)/Holiday/Day1/Morning
        cp \(qp)/beach.jpg \(qp)/notes.txt \(qm)/Holiday/
        cp -r \(qp)/Roadtrip \(qm)/Holiday/Day1/
        mv \(qm)/Holiday/beach.jpg \(qm)/Holiday/beach-renamed.jpg
        mv \(qm)/Holiday/Day1 \(qm)/Holiday/First-day
        mkdir \(qm)/Empty
        mv -T \(qm)/Holiday/First-day/Morning \(qm)/Empty
        cp \(qp)/dog.jpg \(qm)/dog.jpg && rm \(qm)/dog.jpg
        cp \(qp)/dog.jpg \(qm)/Holiday/First-day/dog.jpg
        mv -n \(qm)/Holiday/notes.txt \(qm)/Holiday/First-day/dog.jpg
        cmp \(qp)/dog.jpg \(qm)/Holiday/First-day/dog.jpg
        rm \(qm)/Holiday/First-day/dog.jpg
        """, file: file, line: line)
        XCTAssertEqual(sb.ok("cd \(qm) && find . | sort", file: file, line: line).split(separator: "\n"),
                       [".", "./Empty", "./Holiday", "./Holiday/First-day", "./Holiday/First-day/Roadtrip",
                        "./Holiday/First-day/Roadtrip/sunset.jpg", "./Holiday/beach-renamed.jpg", "./Holiday/notes.txt"],
                       file: file, line: line)

        // What the drive cannot hold: refused at that operation with a local file system's
        // errno; the file and its folder are untouched.
        let refusals = sb.run("""
        cd \(qm)/Holiday || exit 1
        ln beach-renamed.jpg hard 2>&1; echo "link=$?"
        ln -s beach-renamed.jpg soft 2>&1; echo "symlink=$?"
        setfattr -n user.where -v beach beach-renamed.jpg 2>&1; echo "xattr=$?"
        """)
        let said = refusals.stdout
        if drive.refusesHardLinks {
            XCTAssertTrue(said.contains("hard link 'hard' => 'beach-renamed.jpg': Operation not permitted") && said.contains("link=1"),
                          said, file: file, line: line)
        } else {
            XCTAssertTrue(said.contains("link=0"), said, file: file, line: line)
            sb.ok("cd \(qm)/Holiday && cmp hard beach-renamed.jpg && rm hard", file: file, line: line)
        }
        if drive.refusesSymlinks {
            XCTAssertTrue(said.contains("symbolic link 'soft': Operation not permitted") && said.contains("symlink=1"),
                          said, file: file, line: line)
        } else {
            XCTAssertTrue(said.contains("symlink=0"), said, file: file, line: line)
            sb.ok("cd \(qm)/Holiday && [ \"$(readlink soft)\" = beach-renamed.jpg ] && rm soft", file: file, line: line)
        }
        if drive.refusesXattrs {
            XCTAssertTrue(said.contains("beach-renamed.jpg: Operation not supported") && said.contains("xattr=1"),
                          said, file: file, line: line)
        } else {
            XCTAssertTrue(said.contains("xattr=0"), said, file: file, line: line)
        }
        // A user's RENAME_EXCHANGE: EINVAL, as both drives answer it themselves.
        let exchange = sb.run("""
        python3 -c 'import ctypes,os,sys; l=ctypes.CDLL(None,use_errno=True); \
        r=l.renameat2(-100,sys.argv[1].encode(),-100,sys.argv[2].encode(),2); print(r, os.strerror(ctypes.get_errno()))' \
        \(qm)/Holiday/notes.txt \(qm)/Holiday/beach-renamed.jpg
        """)
        XCTAssertEqual(exchange.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "-1 Invalid argument", file: file, line: line)
        sb.ok("""
        set -e
        cmp \(qp)/beach.jpg \(qm)/Holiday/beach-renamed.jpg
        cmp \(qp)/notes.txt \(qm)/Holiday/notes.txt
        cmp \(qp)/Roadtrip/sunset.jpg \(qm)/Holiday/First-day/Roadtrip/sunset.jpg
        [ "$(ls -A \(qm)/Holiday | tr '\\n' ' ')" = "First-day beach-renamed.jpg notes.txt " ]
        """, file: file, line: line)

        let setClass = sb.pv(["class", "set", mp + "/Holiday/beach-renamed.jpg", "complete"])
        XCTAssertEqual(setClass.status, 0, setClass.stderr, file: file, line: line)
        XCTAssertEqual(sb.pv(["class", "get", mp + "/Holiday/beach-renamed.jpg"]).stdout, "complete\n", file: file, line: line)
        mp = sb.remount(mp)
        sb.ok("cmp \(qp)/beach.jpg \(qm)/Holiday/beach-renamed.jpg && rmdir \(qm)/Empty", file: file, line: line)
        sb.unmount(mp)
        sb.mounts.removeAll { $0 == mp }

        // Offline: import (a second time, the files are in place with their size and time: left
        // as they are, as the drive's mtimes allow), class set, export, fsck.
        let imp = OfflineCommandTests.pv(sb, ["import", plain + "/Roadtrip", "/Imported"])
        XCTAssertEqual(imp.status, 0, imp.stderr, file: file, line: line)
        let twice = OfflineCommandTests.pv(sb, ["import", plain + "/Roadtrip", "/Imported"])
        XCTAssertEqual(twice.status, 0, twice.stderr, file: file, line: line)
        XCTAssertTrue(twice.stderr.contains("already in place"), twice.stderr, file: file, line: line)
        let offClass = OfflineCommandTests.pv(sb, ["class", "set", "/Imported/Roadtrip/sunset.jpg", "none"])
        XCTAssertEqual(offClass.status, 0, offClass.stderr, file: file, line: line)
        let out = sb.plainDir("out")
        let exp = OfflineCommandTests.pv(sb, ["export", "/", out])
        XCTAssertEqual(exp.status, 0, exp.stderr, file: file, line: line)
        sb.ok("""
        set -e
        cmp \(qp)/beach.jpg \(Sandbox.quote(out))/Holiday/beach-renamed.jpg
        cmp \(qp)/Roadtrip/sunset.jpg \(Sandbox.quote(out))/Imported/Roadtrip/sunset.jpg
        cmp \(qp)/Roadtrip/sunset.jpg \(Sandbox.quote(out))/Holiday/First-day/Roadtrip/sunset.jpg
        """, file: file, line: line)
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stdout + fsck.stderr, file: file, line: line)
        XCTAssertTrue(fsck.stdout.contains(": 0 problems"), fsck.stdout, file: file, line: line)

        // user remove --delete-photos takes bobsleigh's whole tree (its root used to stay on these
        // drives, holding the still open `.pvmount` as `.fuse_hiddenN`).
        let trees = { sb.ok("ls \(Sandbox.quote(sb.store))/users | wc -l").trimmingCharacters(in: .whitespacesAndNewlines) }
        XCTAssertEqual(trees(), "2", file: file, line: line)
        let remove = sb.pv(["user", "remove", "bobsleigh", "--store", sb.store, "--passfile", sb.passfile, "--delete-photos"])
        XCTAssertEqual(remove.status, 0, remove.stderr, file: file, line: line)
        XCTAssertEqual(trees(), "1", file: file, line: line)
        XCTAssertEqual(OfflineCommandTests.pv(sb, ["fsck"]).status, 0, file: file, line: line)
        // Underneath: the drive itself, the SSH server's directory, rclone's remote and its
        // cache (which holds what it has not uploaded yet).
        for dir in drive.underneath(sb) {
            XCTAssertEqual(Sandbox.scan(dir, ["Holiday", "beach", "sunset", "notes", "Roadtrip", "Imported", "secret holiday words",
                                              "alice", "bobsleigh"]), [], "plaintext found in \(dir)", file: file, line: line)
        }
    }
}

extension Sandbox {
    /// A drive formatted the way cameras and other computers leave it, through its FUSE driver,
    /// or a network or cloud folder (StorageNetworkTests).
    enum Drive: String {
        case exfat, ntfs, sshfs, rclone

        /// What the mount refuses there (docs/STORAGE.md): EPERM, EPERM, EOPNOTSUPP.
        var refusesHardLinks: Bool { self != .ntfs }
        var refusesSymlinks: Bool { self == .exfat || self == .rclone }
        var refusesXattrs: Bool { self != .ntfs }

        /// Where the store's bytes end up (`storeOnDrive`).
        func underneath(_ sb: Sandbox) -> [String] {
            switch self {
            case .exfat, .ntfs: return [sb.store]
            case .sshfs: return [sb.root + "/ssh/remote"]
            case .rclone: return [sb.root + "/rclone/remote", sb.root + "/rclone/cache"]
            }
        }
    }

    /// Puts the store's directory on a fresh 64 MiB loop image of `drive`, mounted at the
    /// store path; returns its teardown (unmount, detach the loop device).
    func storeOnDrive(_ drive: Drive, size: String = "64m", file: StaticString = #filePath, line: UInt = #line) throws -> () -> Void {
        if drive == .sshfs { return storeOverSSH(file: file, line: line) }
        if drive == .rclone { return storeOnRcloneMount(file: file, line: line) }
        XCTAssertEqual(getuid(), 0, "mounting a drive image needs root", file: file, line: line)
        let img = Sandbox.quote(root + "/\(drive.rawValue).img"), qs = Sandbox.quote(store)
        // exfat-fuse needs a block device (a plain image file: 'Block device required').
        // umask=077, as the refusal of a store others can write says (exit 33): without it
        // both drivers show every file as 0777.
        let made = run(drive == .exfat ? """
            set -e
            truncate -s \(size) \(img) && mkfs.exfat \(img) >/dev/null
            dev=$(losetup -f --show \(img)); echo "$dev"
            mkdir \(qs) && mount.exfat-fuse -o umask=077 "$dev" \(qs) >/dev/null
            """ : """
            set -e
            truncate -s \(size) \(img) && mkntfs -F -q -f \(img) >/dev/null 2>&1
            mkdir \(qs) && ntfs-3g -o umask=077 \(img) \(qs)
            """, timeout: 60)
        XCTAssertEqual(made.status, 0, "could not make the \(drive.rawValue) drive: \(made.stderr)", file: file, line: line)
        XCTAssertTrue(Harness.waitUntil(10) { Harness.isMounted(store) }, "the drive did not appear", file: file, line: line)
        let loop = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        return { [store] in
            _ = Harness.run(["umount", store], timeout: 30)
            if Harness.isMounted(store) { _ = Harness.run(["umount", "-l", store], timeout: 30) }
            if !loop.isEmpty { _ = Harness.run(["losetup", "-d", loop], timeout: 30) }
        }
    }
}
