import Foundation
import XCTest

/// Mount and unmount refusals (exit codes and messages), and a store whose disk fills up.
final class MountFailureTests: XCTestCase {
    func testWrongPasswordExits5AndMountsNothing() {
        let sb = Sandbox("pv-badpw")
        sb.initStore()
        let wrong = sb.root + "/wrong-pass"
        try! Sandbox.writeSecret("not the password at all", to: wrong)
        let mp = sb.root + "/mnt"
        try! FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let r = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", wrong, "--no-dbus"])
        XCTAssertEqual(r.status, 5, r.stderr)
        XCTAssertTrue(r.stderr.lowercased().contains("password"), r.stderr)
        XCTAssertFalse(r.stderr.contains("not the password at all"))
        XCTAssertFalse(Harness.isMounted(mp))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mp), [])
        // The right password still works afterwards.
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// In a private mount namespace whose /dev is a fresh tmpfs: without /dev/fuse, and with
    /// one this process may not open (mode 000, CAP_DAC_OVERRIDE dropped), `mount` exits 14
    /// with one line that says which, and mounts nothing.
    func testMissingOrUnusableDevFuseExits14WithOneClearLine() {
        let sb = Sandbox("pv-nofuse")
        sb.initStore()
        let mp = sb.root + "/mnt"
        try! FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let mount = sb.mountArguments(mp)
        let dev = "mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3"
        let cases = [
            (dev, "", "photovault: /dev/fuse is missing: FUSE is not available on this system (modprobe fuse?)\n"),
            (dev + " && mknod -m 000 /dev/fuse c 10 229", "setpriv --bounding-set -dac_override,-dac_read_search ",
             "photovault: cannot use /dev/fuse: Permission denied (it is normally crw-rw-rw- root:root)\n"),
        ]
        for (setup, wrapper, message) in cases {
            let script = "unshare -m --propagation private sh -c \(Sandbox.quote(setup + " && exec " + wrapper + "\"$0\" " + mount))"
                + " \(Sandbox.quote(Harness.binary))"
            let r = sb.run(script)
            XCTAssertEqual(r.status, 14, r.stderr)
            XCTAssertEqual(r.stderr, message)
            XCTAssertFalse(Harness.isMounted(mp))
        }
        // The store is untouched: the same mount works with the real /dev.
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// /dev/fuse that exists but is not the FUSE device: a regular file bind-mounted over it,
    /// a directory, a character device with other numbers, a block device. Each used to pass
    /// the access() check and end in libfuse's own raw line ("fuse: mount failed: Invalid
    /// argument") and exit 1; now exit 14 (no usable /dev/fuse) with one line that says what
    /// is there. Each case runs in a private mount namespace, so the real /dev/fuse is never
    /// touched (checked at the end).
    func testDevFuseThatIsNotTheFUSEDeviceExits14WithOneClearLine() {
        let sb = Sandbox("pv-notfuse")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let file = sb.root + "/not-a-device"
        try! "x".write(toFile: file, atomically: true, encoding: .utf8)
        let mount = sb.mountArguments(mp)
        let dev = "mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3"
        let tail = ", not the FUSE device (character device 10,229, normally crw-rw-rw- root:root)\n"
        let cases = [
            ("mount --bind \(Sandbox.quote(file)) /dev/fuse", "photovault: /dev/fuse is a regular file" + tail),
            (dev + " && mkdir /dev/fuse", "photovault: /dev/fuse is a directory" + tail),
            (dev + " && mknod -m 666 /dev/fuse c 1 3", "photovault: /dev/fuse is character device 1,3" + tail),
            (dev + " && mknod -m 666 /dev/fuse b 10 229", "photovault: /dev/fuse is block device 10,229" + tail),
        ]
        for (setup, message) in cases {
            let script = "unshare -m --propagation private sh -c \(Sandbox.quote(setup + " && exec \"$0\" " + mount))"
                + " \(Sandbox.quote(Harness.binary))"
            let r = sb.run(script)
            XCTAssertEqual(r.status, 14, "\(setup): \(r.stderr)")
            XCTAssertEqual(r.stderr, message, setup)
            XCTAssertFalse(Harness.isMounted(mp))
        }
        var st = stat()
        XCTAssertEqual(stat("/dev/fuse", &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFCHR, "the real /dev/fuse must be untouched")
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// `--idle 0` silently meant "never": it is a usage error now, and nothing is mounted.
    /// A tree whose root `.pvdir` is of an unknown version, or missing, mounts nothing and
    /// says why in one line, with export's exit codes (10, 22). It used to print "Mounted"
    /// and exit 0, and then every listing of the mount failed with EIO.
    func testARootDirectoryInfoOfAnUnknownVersionOrMissingMountsNothing() throws {
        let sb = Sandbox("pv-rootinfo")
        sb.initStore()
        let tree = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: sb.store + "/users").first)
        let info = sb.store + "/users/" + tree + "/.pvdir"
        let mp = sb.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        sb.mounts.append(mp)
        let mount = ["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"]
        sb.ok("cp \(Sandbox.quote(info)) \(Sandbox.quote(sb.root))/pvdir && chmod 600 \(Sandbox.quote(info)) && "
              + "printf '\\002' | dd of=\(Sandbox.quote(info)) bs=1 seek=3 conv=notrunc status=none")
        assertFailure(sb.pv(mount), 10, "photovault: unknown format version 2 (this photovault reads version 1)")
        XCTAssertFalse(Harness.isMounted(mp))
        sb.ok("rm \(Sandbox.quote(info))")
        assertFailure(sb.pv(mount), 22, "photovault: integrity check failed for /: directory ID file is missing")
        XCTAssertFalse(Harness.isMounted(mp))
        // Put back, the vault mounts again (nothing was left locked or half-mounted).
        sb.ok("cp \(Sandbox.quote(sb.root))/pvdir \(Sandbox.quote(info))")
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// In a mount namespace without /proc (a chroot or container that lacks it), a command
    /// says that /proc is missing (exit 1). Swift reads argv from /proc/self/cmdline, so every
    /// command line used to be "no command given" (exit 2), whatever was typed.
    func testWithoutProcACommandSaysSo() {
        let sb = Sandbox("pv-noproc")
        sb.initStore()
        let r = sb.run("unshare -m sh -c 'umount -l /proc && exec \"$0\" user list --store \"$1\"' "
                       + "\(Sandbox.quote(Harness.binary)) \(Sandbox.quote(sb.store))")
        assertFailure(r, 1, "photovault: cannot read this command's arguments from /proc/self/cmdline (is /proc mounted? "
                      + "photovault needs it)")
    }

    func testIdleZeroIsAUsageError() {
        let sb = Sandbox("pv-idle0")
        sb.initStore()
        let mp = sb.root + "/mnt"
        try! FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let r = sb.pv(["mount", mp, "--idle", "0", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(r.status, 2, r.stderr)
        XCTAssertTrue(r.stderr.hasPrefix("photovault: --idle must be more than 0"), r.stderr)
        XCTAssertFalse(Harness.isMounted(mp))
    }

    func testMountpointNotEmptyExits15() {
        let sb = Sandbox("pv-notempty")
        sb.initStore()
        let mp = sb.root + "/mnt"
        try! FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: mp + "/already-here", contents: Data("x".utf8))
        let r = sb.pv(["mount", mp, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(r.status, 15, r.stderr)
        XCTAssertTrue(r.stderr.contains(mp), r.stderr)
        XCTAssertFalse(Harness.isMounted(mp))
        XCTAssertTrue(FileManager.default.fileExists(atPath: mp + "/already-here"))
        // A regular file as mountpoint is refused the same way.
        let r2 = sb.pv(["mount", mp + "/already-here", "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(r2.status, 15, r2.stderr)
        // Each says what is wrong with it (all used to say "is not an empty directory"):
        // a file, a missing directory, a symlink to nothing.
        try? FileManager.default.createSymbolicLink(atPath: sb.root + "/dangling", withDestinationPath: sb.root + "/nowhere")
        for (path, why) in [(mp + "/already-here", "is not a directory"), (sb.root + "/missing", "does not exist"),
                            (sb.root + "/dangling", "does not exist")] {
            let r = sb.pv(["mount", path, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
            assertFailure(r, 15, "the mountpoint \(path) \(why): an empty directory is needed", path)
        }
        assertFailure(r, 15, "the mountpoint \(mp) is not an empty directory")
    }

    func testSameUserMountedTwiceExits16() {
        let sb = Sandbox("pv-twice")
        sb.initStore(users: ["alice", "bob"])
        let first = sb.mount("alice", at: "first")
        let second = sb.root + "/second"
        try! FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: true)
        let r = sb.pv(["mount", second, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(r.status, 16, r.stderr)
        XCTAssertTrue(r.stderr.contains(first), "the message should name the existing mount: \(r.stderr)")
        XCTAssertFalse(Harness.isMounted(second))
        // Mounting onto the live mountpoint again is refused as well.
        let r2 = sb.pv(["mount", first, "--store", sb.store, "--user", "bob", "--passfile", sb.passfile, "--no-dbus"])
        XCTAssertEqual(r2.status, 16, r2.stderr)
        // Another user of the same store may mount beside it.
        let bob = sb.mount("bob", at: "second")
        sb.unmount(bob)
        sb.unmount(first)
    }

    func testUnmountOfANonMountExits18() {
        let sb = Sandbox("pv-nomount")
        let dir = sb.plainDir("plain")
        let r = sb.pv(["unmount", dir])
        XCTAssertEqual(r.status, 18, r.stderr)
        XCTAssertTrue(r.stderr.contains("no vault is mounted at \(dir)"), r.stderr)
        XCTAssertEqual(sb.pv(["unmount", sb.root + "/does-not-exist"]).status, 18)
    }

    /// `unmount` of a mountpoint holding another file system refuses, and unmounts nothing: as
    /// root it used to unmount a tmpfs (fusermount3 -u takes any mount from root) and said
    /// "busy" about /proc.
    func testUnmountOfAMountThatIsNotAPhotoVaultOneLeavesItAlone() {
        let sb = Sandbox("pv-foreign")
        let dir = sb.plainDir("tmpfs")
        sb.ok("mount -t tmpfs -o size=1m pvtest \(Sandbox.quote(dir)) && echo KEEP > \(Sandbox.quote(dir))/f")
        defer { _ = sb.run("umount -l \(Sandbox.quote(dir))") }
        let r = sb.pv(["unmount", dir])
        assertFailure(r, 18, "no vault is mounted at \(dir): it holds a tmpfs mount")
        XCTAssertTrue(Harness.isMounted(dir), "photovault unmount removed a tmpfs")
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(dir))/f"), "KEEP\n")
        assertFailure(sb.pv(["unmount", "/proc"]), 18, "no vault is mounted at /proc: it holds a proc mount")
    }

    /// A script that closes the mount's stdout and stderr: the mount comes up as usual. The
    /// launcher's pipes used to land on fds 1 and 2 and be crossed with the daemon's fds 3
    /// and 4: the key hand-over hit a closed pipe (SIGPIPE, exit 141) and nothing was mounted.
    func testMountWithStdoutAndStderrClosedMounts() {
        let sb = Sandbox("pv-closedfds")
        sb.initStore()
        let mp = sb.root + "/closed"
        try? FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let mount = Sandbox.quote(Harness.binary) + " " + sb.mountArguments(mp)
        sb.mounts.append(mp)
        XCTAssertEqual(sb.run("\(mount) >&- 2>&-; echo \"rc=$?\"").stdout, "rc=0\n")
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(mp) })
        sb.ok("echo CLOSED-FDS > \(Sandbox.quote(mp))/f")
        XCTAssertEqual(MountProbe.state(sb, mp), "unlocked")
        sb.unmount(mp)
    }

    /// A mountpoint inside the store is refused (a usage error, nothing mounted): it used to
    /// mount there, leaving a stray directory in the store (in a user tree, one its own daemon
    /// lists). A store inside the mountpoint likewise.
    func testMountpointInsideTheStoreIsRefused() {
        let sb = Sandbox("pv-inside")
        sb.initStore()
        let inner = sb.store + "/inner"
        try? FileManager.default.createDirectory(atPath: inner, withIntermediateDirectories: true)
        let r = sb.pv(["mount", inner, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        if r.status == 0 { sb.mounts.append(inner) }
        assertFailure(r, 2, "the mountpoint \(inner) is inside the store \(sb.store): choose a directory outside it")
        XCTAssertFalse(Harness.isMounted(inner))
        let outer = sb.plainDir("outer")
        let r2 = sb.pv(["mount", outer, "--store", outer + "/store", "--user", "alice", "--passfile", sb.passfile, "--no-dbus"])
        if r2.status == 0 { sb.mounts.append(outer) }
        assertFailure(r2, 2, "the store \(outer)/store is inside the mountpoint \(outer)")
        XCTAssertFalse(Harness.isMounted(outer))
    }

    /// `photovault mount` killed (Ctrl-C) while it waits for its daemon: the user was told of
    /// no mount, so none stays. The daemon, held until its parent is gone, used to die of
    /// SIGPIPE on its "ready" line, leaving a dead mount (and, with SIGPIPE ignored, would have
    /// left a live mount nobody knew of). It is held by strace, 3 s inside the bind(2) of its
    /// control socket (after the mount, before the ready line): the SIGSTOP it got once a
    /// pgrep loop had found it came too late when the machine was busy (the daemon had
    /// reported ready already, and the test failed about one run in five).
    func testMountInterruptedBeforeTheDaemonIsReadyLeavesNoMount() {
        let sb = Sandbox("pv-interrupt")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        sb.mounts.append(mp)
        let r = sb.run("""
        strace -f -qq -o /dev/null -e trace=bind -e inject=bind:delay_enter=3000000 \(Sandbox.quote(Harness.binary)) \(sb.mountArguments(mp)) &
        tracer=$!
        for i in $(seq 3000); do d=$(pgrep -f -- "[_]_mount-daemon store=.* mountpoint=\(mp) ") && break; sleep 0.01; done
        [ -n "$d" ] || { echo "no daemon seen"; exit 1; }
        for i in $(seq 3000); do read n rest < /proc/$d/syscall && [ "$n" = 49 ] && break; sleep 0.01; done
        [ "$n" = 49 ] || { echo "the daemon never reached bind"; exit 1; }
        kill -TERM $(pgrep -P $tracer); wait $tracer
        for i in $(seq 100); do kill -0 $d 2>/dev/null || break; sleep 0.1; done
        kill -0 $d 2>/dev/null && echo "daemon still running"
        exit 0
        """)
        XCTAssertEqual(r.stdout, "", r.stderr)
        XCTAssertFalse(Harness.isMounted(mp), "a mount nobody was told of (or a dead one) was left")
        XCTAssertFalse(sb.pv(["status"]).stdout.contains(mp + "\t"))   // other mounts of root may be up
        // And the vault mounts there at once.
        sb.mounts.removeAll { $0 == mp }
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// The daemon dies after it mounted but before it said "ready": `mount` runs under
    /// strace, which kills the daemon with SIGKILL at its first bind(2), that of its control
    /// socket (after the mount, before the ready line; nothing else in `mount --no-dbus`
    /// binds). The dead mount stays at the mountpoint; `mount` names it and the command that
    /// clears it (exit 25, the dead-mount code) instead of only "exited before the mount was
    /// ready" (exit 1). The named command then clears it and the vault mounts there again.
    func testADaemonThatDiesAfterMountingNamesTheDeadMountItLeaves() {
        let sb = Sandbox("pv-diedready")
        sb.initStore()
        let mp = sb.plainDir("mnt")
        let r = sb.mountUnderStrace(mp, fault: "bind:signal=SIGKILL")
        sb.mounts.append(mp)   // a dead mount left if the test fails is cleared at the end
        XCTAssertEqual(r.status, 25, r.stderr)
        XCTAssertEqual(r.stdout, "")
        XCTAssertEqual(r.stderr, "photovault: the mount daemon exited before the mount was ready; "
                       + "\(mp) holds a dead PhotoVault mount (its daemon is gone): run 'photovault unmount \(mp)' "
                       + "(or 'fusermount3 -u \(mp)'), then mount again\n")
        XCTAssertTrue(Harness.isMounted(mp), "the dead mount the message names")
        let u = sb.pv(["unmount", mp])
        XCTAssertEqual(u.status, 0, u.stderr)
        XCTAssertFalse(Harness.isMounted(mp))
        sb.mounts.removeAll { $0 == mp }
        sb.unmount(sb.mount(at: "mnt"))
    }

    /// `photovault mount` run from a directory on a removable file system (a tmpfs here): the
    /// background daemon does not keep it busy. Its working directory used to stay the
    /// caller's, so that file system could not be unmounted while the vault was mounted.
    func testTheDaemonDoesNotHoldTheCallersDirectory() throws {
        let sb = Sandbox("pv-cwd")
        sb.initStore()
        let stick = sb.plainDir("stick")
        sb.ok("mount -t tmpfs -o size=1m pvstick \(Sandbox.quote(stick))")
        defer { _ = sb.run("umount -l \(Sandbox.quote(stick)) 2>/dev/null") }
        let mp = sb.root + "/mnt"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        let mount = Sandbox.quote(Harness.binary) + " " + sb.mountArguments(mp)
        sb.ok("cd \(Sandbox.quote(stick)) && \(mount)")
        sb.mounts.append(mp)
        let pid = try XCTUnwrap(MountProbe.daemonPID(sb, mp))
        XCTAssertEqual(try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd"), "/")
        let r = sb.run("umount \(Sandbox.quote(stick))")
        XCTAssertEqual(r.status, 0, "the caller's file system stayed busy: \(r.stderr)")
        sb.unmount(mp)
    }

    func testBusyUnmountExits17WithAClearMessage() throws {
        let sb = Sandbox("pv-busy")
        sb.initStore()
        let mp = sb.mount()
        sb.ok("printf 'BUSY-CONTENT\\n' > \(Sandbox.quote(mp))/f.jpg")
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/bin/sleep")
        holder.arguments = ["60"]
        holder.currentDirectoryURL = URL(fileURLWithPath: mp)
        holder.standardInput = FileHandle.nullDevice
        holder.standardOutput = FileHandle.nullDevice
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer { if holder.isRunning { holder.terminate(); holder.waitUntilExit() } }
        XCTAssertTrue(Harness.waitUntil(5) {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(holder.processIdentifier)/cwd")) == mp
        })
        let r = sb.pv(["unmount", mp])
        XCTAssertEqual(r.status, 17, r.stderr)
        XCTAssertTrue(r.stderr.contains("busy"), r.stderr)
        XCTAssertTrue(r.stderr.contains(mp), r.stderr)
        XCTAssertTrue(Harness.isMounted(mp))
        XCTAssertEqual(sb.ok("cat \(Sandbox.quote(mp))/f.jpg"), "BUSY-CONTENT\n", "a refused unmount must leave the mount working")
        holder.terminate()
        holder.waitUntilExit()
        sb.unmount(mp)
    }

    /// A mount under a file-size limit (`ulimit -f`, limits.conf), which its daemon inherits:
    /// a write into the store beyond it fails with EFBIG ("File too large") and the mount
    /// stays. SIGXFSZ used to kill the daemon, leaving a dead mount and losing the writes it
    /// had not flushed.
    func testAFileSizeLimitFailsTheWriteAndKeepsTheMount() {
        let sb = Sandbox("pv-fsize")
        sb.initStore()
        let mp = sb.mountWrapped("prlimit --fsize=2000000 --", at: "mnt")
        let qm = Sandbox.quote(mp)
        let big = sb.run("head -c 3000000 /dev/urandom > \(qm)/big.jpg")
        XCTAssertNotEqual(big.status, 0)
        XCTAssertTrue(big.stderr.contains("File too large"), big.stderr)
        XCTAssertEqual(MountProbe.state(sb, mp), "unlocked", "the daemon must still serve the mount")
        XCTAssertEqual(sb.ok("printf kept > \(qm)/small.txt && cat \(qm)/small.txt"), "kept")
        sb.unmount(mp)
    }

    /// A store on a 20 MiB tmpfs: a 30 MB copy fails with ENOSPC, earlier files stay intact.
    func testFullDiskGivesENOSPCAndKeepsEarlierFiles() throws {
        let sb = Sandbox("pv-full")
        let release = sb.storeOnOwnFilesystem(size: "20m")
        defer { release() }
        sb.initStore()
        let mp = sb.mount()
        let plain = sb.plainDir("plain")
        let qp = Sandbox.quote(plain), qm = Sandbox.quote(mp)
        sb.ok("""
        set -e
        { printf 'FULLDISK-EARLY\\n'; head -c 4000000 /dev/urandom; } > \(qp)/early.jpg
        printf 'FULLDISK-SMALL\\n' > \(qp)/small.txt
        head -c 30000000 /dev/urandom > \(qp)/huge.raw
        head -c 10000 /dev/urandom > \(qp)/partial.bin
        mkdir \(qm)/Kept-Album && cp \(qp)/early.jpg \(qp)/small.txt \(qp)/partial.bin \(qm)/Kept-Album/
        """)
        let r = sb.run("cp \(qp)/huge.raw \(qm)/huge.raw")
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("No space left on device"), r.stderr)
        // `import --class` goes through the live mount (cp): a full store is exit 19 and one line.
        let imp = sb.run(OfflineCommandTests.pvLine(sb, ["import", "--class", "none", plain + "/huge.raw", "/imported"]))
        XCTAssertEqual(imp.status, 19, imp.stderr)
        XCTAssertEqual(imp.stderr.split(separator: "\n").filter { $0.hasPrefix("photovault: ") },
                       ["photovault: no space left on the device holding the store"], imp.stderr)
        sb.ok("rm -rf \(qm)/imported")
        let dd = sb.run("dd if=/dev/zero of=\(qm)/more.raw bs=1M count=30 conv=fsync")
        XCTAssertNotEqual(dd.status, 0)
        XCTAssertTrue(dd.stderr.contains("No space left on device"), dd.stderr)
        // Appending to a file whose last chunk is partial rewrites that chunk: on a full disk
        // the append fails and the chunk keeps its old bytes (no half-written chunk, no EIO).
        let app = sb.run("cat \(qp)/early.jpg >> \(qm)/Kept-Album/partial.bin")
        XCTAssertNotEqual(app.status, 0)
        XCTAssertTrue(app.stderr.contains("No space left on device"), app.stderr)
        sb.ok("cmp \(qp)/partial.bin \(qm)/Kept-Album/partial.bin")
        // Earlier files are intact, now and after freeing space and remounting.
        sb.ok("cmp \(qp)/early.jpg \(qm)/Kept-Album/early.jpg && cmp \(qp)/small.txt \(qm)/Kept-Album/small.txt")
        sb.ok("rm -f \(qm)/huge.raw \(qm)/more.raw")
        sb.remount(mp)
        sb.ok("cmp \(qp)/early.jpg \(qm)/Kept-Album/early.jpg && cmp \(qp)/small.txt \(qm)/Kept-Album/small.txt")
        sb.ok("cmp \(qp)/partial.bin \(qm)/Kept-Album/partial.bin")
        // With space back, writing works again.
        sb.ok("head -c 3000000 \(qp)/huge.raw > \(qm)/again.raw && cmp \(qm)/again.raw <(head -c 3000000 \(qp)/huge.raw)")
        sb.unmount(mp)
        sb.assertNoPlaintext(["FULLDISK-", "early.jpg", "small.txt", "Kept-Album"])
    }

    /// A store on ext2, which has no fallocate (EOPNOTSUPP), filled up: an append to a file
    /// whose last chunk is partial rewrites that chunk in place, and the pwrite stops short
    /// at the first block it cannot allocate. The writer gets ENOSPC and the old chunk is put
    /// back: every byte written before reads back, now and after a remount (it used to be
    /// EIO, the chunk's first pages holding the start of the new chunk).
    func testAppendOnAFullStoreWithoutFallocateKeepsTheLastChunk() throws {
        let sb = Sandbox("pv-full-ext2")
        let release = sb.storeOnOwnFilesystem(size: "16m", .ext2)
        defer { release() }
        let qs = Sandbox.quote(sb.store), qp = Sandbox.quote(sb.plainDir("plain"))
        XCTAssertNotEqual(sb.run("fallocate -n -l 4096 \(qs)/probe").status, 0, "ext2 must refuse fallocate for this test")
        sb.ok("rm -f \(qs)/probe")
        // Last chunks of 10000 % 4096 and 200000 % 4096 bytes.
        sb.ok("head -c 10000 /dev/urandom > \(qp)/partial.bin && head -c 200000 /dev/urandom > \(qp)/more.bin")
        sb.ok("head -c 200000 /dev/urandom > \(qp)/cover.bin")
        sb.ok("head -c 3000000 /dev/urandom > \(qp)/tail.bin")
        sb.initStore()
        let mp = sb.mount()
        let qm = Sandbox.quote(mp)
        sb.ok("cp \(qp)/partial.bin \(qp)/more.bin \(qp)/cover.bin \(qm)/")
        let fill = sb.run("dd if=/dev/zero of=\(qm)/fill.raw bs=4k")
        XCTAssertTrue(fill.stderr.contains("No space left on device"), fill.stderr)
        for name in ["partial.bin", "more.bin"] {
            let app = sb.run("cat \(qp)/tail.bin >> \(qm)/\(name)")
            XCTAssertNotEqual(app.status, 0, name)
            XCTAssertTrue(app.stderr.contains("No space left on device"), app.stderr)
            sb.ok("cmp \(qp)/\(name) \(qm)/\(name)")
        }
        // A write over the whole old last chunk that grows the file (256 KiB at 0, in two
        // requests: the first overwrites in place and succeeds, the second fails): the file
        // keeps its size and reads back without EIO, its last chunk (3392 bytes) the old one.
        let over = sb.run("dd if=\(qp)/tail.bin of=\(qm)/cover.bin bs=256k count=1 conv=notrunc")
        XCTAssertTrue(over.stderr.contains("No space left on device"), over.stderr)
        XCTAssertEqual(sb.ok("stat -c %s \(qm)/cover.bin"), "200000\n")
        sb.ok("cat \(qm)/cover.bin > /dev/null && cmp <(tail -c 3392 \(qp)/cover.bin) <(tail -c 3392 \(qm)/cover.bin)")
        sb.ok("cmp <(head -c 131072 \(qp)/tail.bin) <(head -c 131072 \(qm)/cover.bin)")
        sb.ok("rm -f \(qm)/fill.raw")
        sb.remount(mp)
        sb.ok("cmp \(qp)/partial.bin \(qm)/partial.bin && cmp \(qp)/more.bin \(qm)/more.bin")
        // With space back, the append works.
        sb.ok("cat \(qp)/tail.bin >> \(qm)/partial.bin && cat \(qp)/partial.bin \(qp)/tail.bin | cmp - \(qm)/partial.bin")
        sb.unmount(mp)
        let fsck = OfflineCommandTests.pv(sb, ["fsck"])
        XCTAssertEqual(fsck.status, 0, fsck.stderr)
    }
}

extension Sandbox {
    /// `photovault mount` of alice at `mp` under strace, which injects `fault` (strace's
    /// `-e inject=SYSCALL:...`) into it and its daemon. strace returns when both are gone.
    func mountUnderStrace(_ mp: String, fault: String) -> Harness.Result {
        let syscall = fault.prefix { $0 != ":" }
        return run("strace -f -qq -o /dev/null -e trace=\(syscall) -e inject=\(fault) \(Sandbox.quote(Harness.binary)) \(mountArguments(mp))")
    }

    /// `mount MP --store ... --user alice --passfile ... --no-dbus`, quoted for a shell.
    func mountArguments(_ mp: String) -> String {
        ["mount", mp, "--store", store, "--user", "alice", "--passfile", passfile, "--no-dbus"]
            .map(Sandbox.quote).joined(separator: " ")
    }
}
