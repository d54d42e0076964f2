import Foundation
import XCTest
import PhotoVaultPrivacy

/// A real file manager over a default mount: Thunar with tumbler (the freedesktop thumbnailer
/// service), under Xvfb with a private D-Bus session bus, showing a folder of 300 photos.
/// Thumbnails appear (a screenshot counts their colour), are saved only inside the vault, and
/// after a lock (with Thunar still open) nothing naming a vault photo is left in the plaintext
/// thumbnail cache or the recent-files list. Bounded: about a minute.
final class FileManagerPrivacyTests: XCTestCase {
    static let photoCount = 300
    /// Pure magenta: no icon theme has it, so magenta pixels on screen are thumbnails.
    static let photoColor = "#FF00FF"

    func testThunarThumbnailsStayInTheVaultAndNothingIsLeftAfterALock() throws {
        let sb = DesktopPrivacyTests.sandbox("pv-thunar", quarantine: 8)
        let given = sb.root + "/PhotoVault"
        let mp = DesktopPrivacyTests.mount(sb, at: given)
        let cacheRoot = sb.root + "/cache", cache = cacheRoot + "/thumbnails"
        XCTAssertTrue(Harness.waitUntil(10) { ThumbnailKit.symlinkTarget(cache) == mp + "/.thumbnails" }, "not redirected")

        // 300 photos (640x480 JPEGs, so that thumbnails are made and saved).
        let base = sb.root + "/base.jpg"
        let c = Harness.run(["/usr/bin/convert", "-size", "640x480", "xc:\(Self.photoColor)", "-fill", "#00FFFF",
                             "-draw", "rectangle 40,40 240,240", "-quality", "85", base], timeout: 60)
        XCTAssertEqual(c.status, 0, c.stderr)
        let album = mp + "/Album"
        try FileManager.default.createDirectory(atPath: album, withIntermediateDirectories: true)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: base))
        var photos: [String] = []
        for i in 1...Self.photoCount {
            let p = album + String(format: "/IMG_%04d.jpg", i)
            try bytes.write(to: URL(fileURLWithPath: p))
            photos.append(p)
        }

        // Thunar on a private X server and session bus (tumbler is activated on that bus).
        let x = try XvfbDisplay(logDirectory: sb.root)
        defer { x.stop() }
        var env = sb.env
        env["DISPLAY"] = x.name
        env["NO_AT_BRIDGE"] = "1"
        env["XDG_CONFIG_HOME"] = sb.root + "/config"
        let pidFile = sb.root + "/thunar.pid"
        let thunar = try BackgroundProcess(["/usr/bin/dbus-run-session", "--", "/bin/sh", "-c",
                                            "thunar \"$0\" & echo $! > \"$1\"; wait", album, pidFile],
                                           env: env, output: sb.root + "/thunar.log")
        defer {
            if let s = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = pid_t(s.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(pid, SIGTERM)
            }
            thunar.stop()
            Self.stopStragglers(home: sb.root)
        }
        let inVault = mp + "/.thumbnails"
        XCTAssertTrue(Harness.waitUntil(60) { DesktopPrivacyTests.files(under: inVault).filter { $0.hasSuffix(".png") }.count >= 8 },
                      "Thunar saved no thumbnails into the vault: \(thunar.output)")
        // Let the visible ones finish (no new one for a second and a half), then look.
        var last = -1, since = Date()
        _ = Harness.waitUntil(20) {
            let n = DesktopPrivacyTests.files(under: inVault).count
            if n != last { last = n; since = Date() }
            return Date().timeIntervalSince(since) > 1.5
        }
        let shot = sb.root + "/thunar.png"
        XCTAssertEqual(x.screenshot(to: shot).status, 0)
        if let keep = ProcessInfo.processInfo.environment["PHOTOVAULT_KEEP_SCREENSHOT"] { _ = try? FileManager.default.copyItem(atPath: shot, toPath: keep) }
        let magenta = Self.countPixels(shot) { r, g, b in r > 220 && g < 40 && b > 220 }
        XCTAssertGreaterThan(magenta, 10_000, "the screenshot shows no thumbnails (\(magenta) magenta pixels)")

        // Saved in the vault, named after vault photos, readable there; none in the plaintext cache.
        let names = Set(photos.map { DesktopPrivacyTests.thumbnailName($0) })
        let saved = DesktopPrivacyTests.files(under: inVault).filter { names.contains(($0 as NSString).lastPathComponent) }
        XCTAssertGreaterThanOrEqual(saved.count, 8)
        XCTAssertEqual(saved.first.flatMap { ThumbnailKit.uri(ofPNG: $0) }.flatMap { ThumbnailPurge.localPath(ofURI: $0)?.hasPrefix(album + "/") }, true)
        func plaintextLeaks() -> [String] {
            (DesktopPrivacyTests.files(under: cacheRoot) + DesktopPrivacyTests.files(under: sb.root + "/.thumbnails")).filter {
                names.contains(($0 as NSString).lastPathComponent)
                    || (ThumbnailKit.uri(ofPNG: $0).flatMap { ThumbnailPurge.localPath(ofURI: $0) }?.hasPrefix(mp + "/") ?? false)
            }
        }
        XCTAssertEqual(plaintextLeaks(), [])

        // Lock with Thunar still open on the vault.
        let lock = sb.pv(["lock", given])
        XCTAssertEqual(lock.status, 0, lock.stderr)
        XCTAssertTrue(Harness.waitUntil(15) { !Harness.isMounted(mp) }, "the vault did not unmount at the lock")
        XCTAssertEqual(plaintextLeaks(), [])
        // After the quarantine the cache is the user's again, and still holds nothing of the vault.
        XCTAssertTrue(Harness.waitUntil(40) { ThumbnailKit.symlinkTarget(cache) == nil && !FileManager.default.fileExists(atPath: cache + ".photovault-aside") },
                      "the thumbnail cache was not restored")
        XCTAssertEqual(plaintextLeaks(), [])
        let recent = (try? String(contentsOfFile: sb.root + "/data/recently-used.xbel", encoding: .utf8)) ?? ""
        XCTAssertFalse(recent.contains(FileURI.uri(ofPath: mp)), recent)
        // Nothing of the vault under the plain mountpoint, nor the photos' names in the store.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mp), [])
        sb.assertNoPlaintext(["IMG_0001", "Album", "Thumb::URI"])
    }

    /// Pixels of a PNG (ImageMagick decodes it) for which `match` holds.
    static func countPixels(_ png: String, _ match: (UInt8, UInt8, UInt8) -> Bool) -> Int {
        let raw = png + ".rgb"
        guard Harness.run(["/usr/bin/convert", png, "-depth", "8", "rgb:" + raw], timeout: 60).status == 0,
              let d = FileManager.default.contents(atPath: raw) else { return -1 }
        let b = [UInt8](d)
        var n = 0, i = 0
        while i + 2 < b.count { if match(b[i], b[i + 1], b[i + 2]) { n += 1 }; i += 3 }
        return n
    }

    /// Processes of this test's desktop (their HOME is the sandbox) still running: tumblerd and
    /// the session bus outlive Thunar for a moment.
    static func stopStragglers(home: String) {
        _ = Harness.waitUntil(3) { pids(home: home).isEmpty }
        for p in pids(home: home) { kill(p, SIGTERM) }
        _ = Harness.waitUntil(3) { pids(home: home).isEmpty }
        for p in pids(home: home) { kill(p, SIGKILL) }
    }

    static func pids(home: String) -> [pid_t] {
        let me = getpid()
        return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }.filter { p in
            guard p != me, let env = FileManager.default.contents(atPath: "/proc/\(p)/environ"),
                  let cmd = try? String(contentsOfFile: "/proc/\(p)/comm", encoding: .utf8) else { return false }
            // Not the mount daemons or sweeps of this sandbox (they end by themselves).
            if cmd.hasPrefix("photovault") { return false }
            return env.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == "HOME=" + home }
        }
    }
}
