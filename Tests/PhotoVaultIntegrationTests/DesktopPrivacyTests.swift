import Foundation
import XCTest
import PhotoVaultPrivacy

/// What a default `photovault mount` does about the traces a desktop keeps (docs/PRIVACY.md),
/// with simulated writers for what a real file manager does only by chance: thumbnails without
/// `Thumb::URI` (pcmanfm's), failure markers written after the lock, a GTK application's
/// recent-files writes before and after it.
final class DesktopPrivacyTests: XCTestCase {
    /// A sandbox with the desktop privacy of a default mount and a short quarantine.
    static func sandbox(_ name: String, quarantine: Int = 4) -> Sandbox {
        let sb = Sandbox(name)
        sb.extraEnv = ["PHOTOVAULT_DESKTOP_PRIVACY": "on", "PHOTOVAULT_THUMBNAIL_QUARANTINE": String(quarantine)]
        sb.initStore()
        return sb
    }

    /// Mounts at `given` (which may lead through a symlink); returns the resolved mountpoint.
    static func mount(_ sb: Sandbox, at given: String, extra: [String] = [], file: StaticString = #filePath, line: UInt = #line) -> String {
        try? FileManager.default.createDirectory(atPath: given, withIntermediateDirectories: true)
        let real = URL(fileURLWithPath: given).resolvingSymlinksInPath().path
        let r = sb.pv(["mount", given, "--store", sb.store, "--user", "alice", "--passfile", sb.passfile, "--no-dbus"] + extra)
        XCTAssertEqual(r.status, 0, "mount: \(r.stderr)", file: file, line: line)
        XCTAssertTrue(Harness.waitUntil(5) { Harness.isMounted(real) }, "mount did not appear", file: file, line: line)
        sb.mounts.append(real)
        return real
    }

    static func thumbnailName(_ path: String) -> String { FileURI.thumbnailName(ofURI: FileURI.uri(ofPath: path)) + ".png" }

    /// A PNG as pcmanfm writes it: a picture, no `Thumb::URI`.
    static func writeBarePNG(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try ThumbnailKit.writePNG(to: path, seed: 9, width: 16, height: 12)
    }

    /// Regular files under `dir` (symlinks not followed).
    static func files(under dir: String) -> [String] {
        var out: [String] = []
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return [] }
        for n in names {
            let p = dir + "/" + n
            var st = stat()
            guard lstat(p, &st) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR { out += files(under: p) } else if (st.st_mode & S_IFMT) == S_IFREG { out.append(p) }
        }
        return out
    }

    /// Thumbnails without `Thumb::URI`, named after a vault photo's URI through the
    /// mountpoint as given (a symlinked path) or as resolved, in every place the standard and
    /// the legacy cache have, are purged by name when the vault is mounted by default; a
    /// thumbnail of another file stays. After a lock the cache points where nothing can be
    /// saved: a failure marker written then fails and nothing lands in plaintext; after the
    /// quarantine the user's directory is back, with nothing naming a vault photo.
    func testThumbnailsAreFoundByNameAndNothingWrittenAfterTheLockSurvives() throws {
        let sb = Self.sandbox("pv-desk-names")
        XCTAssertEqual(symlink(sb.root, sb.root + "/link"), 0)
        let given = sb.root + "/link/PhotoVault"
        let cache = sb.root + "/cache/thumbnails", aside = cache + ".photovault-aside", legacy = sb.root + "/.thumbnails"

        // An earlier session without private thumbnails: a photo, and pcmanfm-style leftovers.
        var real = Self.mount(sb, at: given, extra: ["--no-private-thumbnails"])
        XCTAssertEqual(real, sb.root + "/PhotoVault")
        try FileManager.default.createDirectory(atPath: given + "/Album", withIntermediateDirectories: true)
        try ThumbnailKit.writePNG(to: given + "/Album/IMG_0042.png", seed: 1)
        // Many more photos: the names are computed from the ciphertext tree, so the daemon
        // does not hold a descriptor for each (a walk through the mount would make it).
        for i in 0..<400 { XCTAssertTrue(FileManager.default.createFile(atPath: given + "/Album/more-\(i).jpg", contents: Data([1]))) }
        let photoGiven = given + "/Album/IMG_0042.png", photoReal = real + "/Album/IMG_0042.png"
        let leftovers = ["normal/" + Self.thumbnailName(photoGiven), "large/" + Self.thumbnailName(photoReal),
                         "x-large/" + Self.thumbnailName(photoGiven), "xx-large/" + Self.thumbnailName(photoReal),
                         "fail/pcmanfm/" + Self.thumbnailName(photoGiven)]
        for l in leftovers { try Self.writeBarePNG(cache + "/" + l) }
        try Self.writeBarePNG(legacy + "/normal/" + Self.thumbnailName(photoReal))
        let other = "normal/" + Self.thumbnailName(sb.root + "/Pictures/beach.png")
        try Self.writeBarePNG(cache + "/" + other)
        let r0 = sb.pv(["unmount", given])
        XCTAssertEqual(r0.status, 0, r0.stderr)

        // A default mount: redirected, and the leftovers purged by name (the PNGs carry no URI).
        real = Self.mount(sb, at: given)
        XCTAssertTrue(Harness.waitUntil(20) {
            ThumbnailKit.symlinkTarget(cache) == real + "/.thumbnails"
                && leftovers.allSatisfy { !FileManager.default.fileExists(atPath: aside + "/" + $0) }
                && !FileManager.default.fileExists(atPath: legacy + "/normal/" + Self.thumbnailName(photoReal))
        }, "leftovers still there: \(Self.files(under: aside) + Self.files(under: legacy))")
        XCTAssertTrue(FileManager.default.fileExists(atPath: aside + "/" + other), "a thumbnail of another file was removed")
        let pid = try XCTUnwrap(MountProbe.daemonPID(sb, real))
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
        XCTAssertLessThan(fds, 200, "the daemon holds \(fds) descriptors after naming 400 entries")

        // Lock: the daemon unmounts and exits; the cache keeps pointing into the empty mountpoint.
        let lock = sb.pv(["lock", given])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertTrue(Harness.waitUntil(10) { !Harness.isMounted(real) })
        XCTAssertEqual(ThumbnailKit.symlinkTarget(cache), real + "/.thumbnails")
        // A thumbnailer still busy writes a failure marker and a thumbnail now, as GLib does.
        let late = """
        import sys
        from gi.repository import GLib
        cache, name = sys.argv[1], sys.argv[2]
        d = cache + '/fail/gnome-thumbnail-factory'
        ok_dir = GLib.mkdir_with_parents(d, 0o700) == 0
        try:
            GLib.file_set_contents(d + '/' + name, b'marker'); ok_file = True
        except GLib.Error:
            ok_file = False
        try:
            GLib.file_set_contents(cache + '/normal/' + name, b'thumb'); ok_thumb = True
        except GLib.Error:
            ok_thumb = False
        print(ok_dir, ok_file, ok_thumb)
        """
        let w = Harness.run(["/usr/bin/python3", "-c", late, cache, Self.thumbnailName(photoGiven)], env: sb.env, timeout: 30)
        XCTAssertEqual(w.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "False False False", w.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: real), [], "something was written under the plain mountpoint")

        // After the quarantine: the user's directory is back, with their thumbnail, and nothing
        // anywhere in the plaintext caches is named after a vault photo.
        XCTAssertTrue(Harness.waitUntil(30) { ThumbnailKit.symlinkTarget(cache) == nil && !FileManager.default.fileExists(atPath: aside) },
                      "the cache was not restored after the quarantine")
        XCTAssertTrue(FileManager.default.fileExists(atPath: cache + "/" + other))
        let vaultNames = Set([photoGiven, photoReal, given + "/Album", real + "/Album"].map(Self.thumbnailName))
        let found = (Self.files(under: sb.root + "/cache") + Self.files(under: legacy)).filter {
            vaultNames.contains(($0 as NSString).lastPathComponent)
        }
        XCTAssertEqual(found, [])
    }

    /// Another mount, anywhere, at a path that is not UTF-8: the cache is still redirected and
    /// `photovault unmount` still finds the vault. A strict decode of /proc/self/mountinfo
    /// made every mount look absent: no redirect (thumbnails went to the plaintext cache), and
    /// "no vault is mounted" (exit 18) from unmount.
    func testAMountElsewhereWhosePathIsNotUTF8HidesNothing() throws {
        let sb = Self.sandbox("pv-desk-latin1", quarantine: 1)
        let odd = sb.root + "/caf\\xe9"
        sb.ok("d=\"$(printf '\(odd)')\" && mkdir \"$d\" && mount -t tmpfs -o size=1m pvlatin1 \"$d\"")
        defer { _ = Harness.sh("umount \"$(printf '\(odd)')\"", timeout: 30) }
        let given = sb.root + "/PhotoVault"
        let real = Self.mount(sb, at: given)
        let cache = sb.root + "/cache/thumbnails"
        XCTAssertTrue(Harness.waitUntil(10) { ThumbnailKit.symlinkTarget(cache) == real + "/.thumbnails" }, "not redirected")
        let r = sb.pv(["unmount", given])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(Harness.isMounted(real))
    }

    /// A GTK application records a vault photo (and another file) in recently-used.xbel: the
    /// vault entry is gone at the lock (the vault staying mounted, --on-lock stay), one written
    /// again by an application with an old copy is gone at the unmount, and one written after
    /// the unmount is gone after the quarantine. The other file's entry stays throughout.
    func testRecentFilesLoseVaultEntriesAtTheLockTheUnmountAndAfterLateWrites() throws {
        let sb = Self.sandbox("pv-desk-recent")
        let given = sb.root + "/PhotoVault"
        let real = Self.mount(sb, at: given, extra: ["--on-lock", "stay"])
        try ThumbnailKit.writePNG(to: real + "/IMG_RECENT.png", seed: 2)
        let keep = sb.plainDir("Pictures") + "/keep.png"
        try ThumbnailKit.writePNG(to: keep, seed: 3)
        let xbel = sb.root + "/data/recently-used.xbel"
        // GtkRecentManager, as eog or a file chooser uses it (GTK wants a display for its settings).
        let x = try XvfbDisplay(logDirectory: sb.root)
        defer { x.stop() }
        let gtk = """
        import sys, time, gi
        gi.require_version('Gtk', '3.0')
        from gi.repository import Gtk, GLib
        m = Gtk.RecentManager.get_default()
        for p in sys.argv[1:]:
            d = Gtk.RecentData()
            d.mime_type = 'image/png'; d.app_name = 'eog'; d.app_exec = 'eog %u'
            assert m.add_full(GLib.filename_to_uri(p, None), d)
        ctx = GLib.MainContext.default()
        end = time.time() + 1.0
        while time.time() < end:
            while ctx.iteration(False): pass
            time.sleep(0.01)
        """
        func record(_ paths: [String]) {
            let r = Harness.run(["/usr/bin/python3", "-c", gtk] + paths, env: sb.env.merging(["DISPLAY": x.name]) { $1 }, timeout: 60)
            XCTAssertEqual(r.status, 0, r.stderr)
        }
        func entries() -> String { (try? String(contentsOfFile: xbel, encoding: .utf8)) ?? "" }
        let vaultURI = FileURI.uri(ofPath: real + "/IMG_RECENT.png"), keepURI = FileURI.uri(ofPath: keep)

        record([real + "/IMG_RECENT.png", keep])
        XCTAssertTrue(entries().contains(vaultURI) && entries().contains(keepURI), entries())
        let lock = sb.pv(["lock", given])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertTrue(Harness.waitUntil(10) { !entries().contains(vaultURI) }, "the vault entry survived the lock: \(entries())")
        XCTAssertTrue(entries().contains(keepURI))
        XCTAssertTrue(Harness.isMounted(real), "--on-lock stay unmounted")

        // An application writing from the copy it had: the entry is back until the unmount.
        record([real + "/IMG_RECENT.png"])
        XCTAssertTrue(entries().contains(vaultURI))
        let un = sb.pv(["unmount", given])
        XCTAssertEqual(un.status, 0, un.stderr)
        XCTAssertFalse(entries().contains(vaultURI), "the vault entry survived the unmount")

        // And after the unmount (an application still showing the photo): gone after the quarantine.
        record([real + "/IMG_RECENT.png"])
        XCTAssertTrue(entries().contains(vaultURI))
        XCTAssertTrue(Harness.waitUntil(30) { !entries().contains(vaultURI) }, "a late vault entry survived the quarantine")
        XCTAssertTrue(entries().contains(keepURI))
    }
}
