import Foundation
import XCTest

/// Thumbnails of vault photos made by GNOME's thumbnail factory (what Nautilus uses: the
/// GnomeDesktop introspection bindings, which run gdk-pixbuf-thumbnailer in bubblewrap) on
/// a real mount. Needs python3-gi, gir1.2-gnomedesktop-3.0, libgdk-pixbuf2.0-bin and
/// shared-mime-info (scripts/deps.sh test). docs/THUMBNAILS.md has the measurements.
final class ThumbnailTests: XCTestCase {
    /// The measured leak, kept by the opt-out: with --no-private-thumbnails, a plaintext
    /// thumbnail of a vault photo stays in ~/.cache/thumbnails after the vault is unmounted.
    func testWithoutPrivateThumbnailsAVaultPhotoLeaksIntoTheCache() throws {
        let sb = Sandbox("pv-thumb-leak")
        sb.extraEnv = ["PHOTOVAULT_DESKTOP_PRIVACY": "on", "PHOTOVAULT_THUMBNAIL_QUARANTINE": "1"]
        sb.initStore()
        let mp = sb.mount(extra: ["--no-private-thumbnails"])
        let photo = mp + "/IMG_LEAKCHECK.png"
        try ThumbnailKit.writePNG(to: photo, seed: 1)
        let thumb = ThumbnailKit.thumbnail(photo, sb)
        sb.unmount(mp)

        let cache = sb.root + "/cache/thumbnails"
        XCTAssertTrue(thumb.hasPrefix(cache + "/normal/"), "the factory saved its thumbnail at \(thumb)")
        let leaked = ThumbnailKit.pngs(under: cache).filter { ThumbnailKit.uri(ofPNG: $0) == ThumbnailKit.fileURI(photo) }
        XCTAssertEqual(leaked, [thumb], "a thumbnail naming the vault photo stays in the plaintext cache")
        // It is a real picture of the photo (a downscaled image), readable without the vault.
        let size = ThumbnailKit.pngSize(thumb)
        XCTAssertEqual(size.map { max($0.0, $0.1) }, 128, "thumbnail size \(String(describing: size))")
    }

    /// With --private-thumbnails: an old leaked thumbnail is purged when mounting, new ones go
    /// into the vault (encrypted), the user's own thumbnails come back untouched after the
    /// unmount, and no thumbnail naming a vault file is left anywhere in the real cache.
    func testPrivateThumbnailsKeepVaultThumbnailsOutOfTheCache() throws {
        let sb = Sandbox("pv-thumb-guard")
        sb.extraEnv = ["PHOTOVAULT_DESKTOP_PRIVACY": "on", "PHOTOVAULT_THUMBNAIL_QUARANTINE": "2"]
        sb.initStore()
        let cacheRoot = sb.root + "/cache"
        let cache = cacheRoot + "/thumbnails"

        // A thumbnail of an ordinary (non-vault) photo: must survive everything below.
        let outside = sb.plainDir("Pictures") + "/holiday.png"
        try ThumbnailKit.writePNG(to: outside, seed: 2)
        let outsideThumb = ThumbnailKit.thumbnail(outside, sb)
        let outsideBytes = try Data(contentsOf: URL(fileURLWithPath: outsideThumb))

        // An earlier mount without the option leaked one (the measured behaviour).
        var mp = sb.mount(at: "PhotoVault", extra: ["--no-private-thumbnails"])
        let old = mp + "/IMG_OLDSECRET.png"
        try ThumbnailKit.writePNG(to: old, seed: 3)
        let oldThumb = ThumbnailKit.thumbnail(old, sb)
        XCTAssertTrue(FileManager.default.fileExists(atPath: oldThumb))

        // Now with the guard.
        mp = sb.remount(mp, extra: ["--private-thumbnails"])
        XCTAssertTrue(Harness.waitUntil(10) { ThumbnailKit.symlinkTarget(cache) == mp + "/.thumbnails" },
                      "the cache was not redirected: \(String(describing: ThumbnailKit.symlinkTarget(cache)))")
        let aside = cacheRoot + "/thumbnails.photovault-aside"
        XCTAssertFalse(FileManager.default.fileExists(atPath: aside + "/normal/" + (oldThumb as NSString).lastPathComponent),
                       "the thumbnail leaked by the earlier mount was not purged")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: aside + "/normal/" + (outsideThumb as NSString).lastPathComponent)),
                       outsideBytes, "the user's own thumbnail waits aside unchanged")

        let photo = mp + "/IMG_NEWSECRET.png"
        let photoBytes = try ThumbnailKit.writePNG(to: photo, seed: 4)
        let newThumb = ThumbnailKit.thumbnail(photo, sb)
        _ = ThumbnailKit.thumbnail(old, sb)
        // Saved through the redirect: the file is in the vault.
        let inVault = mp + "/.thumbnails/normal/" + (newThumb as NSString).lastPathComponent
        XCTAssertEqual(ThumbnailKit.uri(ofPNG: inVault), ThumbnailKit.fileURI(photo))
        let thumbBytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: inVault)))
        XCTAssertEqual(ThumbnailKit.vaultThumbnails(under: aside, mountpoint: mp), [])

        sb.unmount(mp)
        // Until the quarantine ends the cache points into the unmounted, empty mountpoint.
        XCTAssertEqual(ThumbnailKit.symlinkTarget(cache), mp + "/.thumbnails")
        // Then the user's directory is back in place, not a symlink, with their thumbnail intact.
        XCTAssertTrue(Harness.waitUntil(30) { ThumbnailKit.symlinkTarget(cache) == nil && !FileManager.default.fileExists(atPath: aside) },
                      "the thumbnail cache was not restored after the quarantine")
        XCTAssertNil(ThumbnailKit.symlinkTarget(cache))
        XCTAssertFalse(FileManager.default.fileExists(atPath: aside))
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: outsideThumb)), outsideBytes)
        XCTAssertEqual(ThumbnailKit.uri(ofPNG: outsideThumb), ThumbnailKit.fileURI(outside))
        // No thumbnail naming a vault file anywhere in the real cache (or ~/.thumbnails),
        // and something was looked at (the user's thumbnail).
        XCTAssertEqual(ThumbnailKit.vaultThumbnails(under: cacheRoot, mountpoint: mp), [])
        XCTAssertEqual(ThumbnailKit.vaultThumbnails(under: sb.root + "/.thumbnails", mountpoint: mp), [])
        XCTAssertTrue(ThumbnailKit.pngs(under: cacheRoot).contains(outsideThumb))
        // Nothing was written into the plain directory under the mountpoint.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mp), [])
        // The vault's ciphertext holds neither the photo, nor its thumbnail, nor its name.
        XCTAssertEqual(ThumbnailKit.storeHits(sb.store, slicesOf: [photoBytes, thumbBytes]), [])
        sb.assertNoPlaintext(["IMG_NEWSECRET", "IMG_OLDSECRET", "Thumb::URI"])
    }
}

/// Small tools for the thumbnail tests: a PNG writer, a tEXt reader, the real factory.
enum ThumbnailKit {
    /// The GNOME thumbnail factory, exactly as a file manager calls it: generate, then save
    /// into the cache named by XDG_CACHE_HOME. Prints where the thumbnail was saved.
    static let factoryScript = """
    import sys, gi
    gi.require_version('GnomeDesktop', '3.0')
    from gi.repository import GnomeDesktop, Gio
    f = Gio.File.new_for_path(sys.argv[1])
    uri = f.get_uri()
    info = f.query_info('standard::content-type,time::modified', 0, None)
    mime = info.get_content_type()
    mtime = info.get_attribute_uint64('time::modified')
    factory = GnomeDesktop.DesktopThumbnailFactory.new(GnomeDesktop.DesktopThumbnailSize.NORMAL)
    pixbuf = factory.generate_thumbnail(uri, mime, None)
    factory.save_thumbnail(pixbuf, uri, mtime, None)
    print(factory.lookup(uri, mtime))
    """

    /// Thumbnails `path` with the real factory; returns the saved thumbnail's path.
    static func thumbnail(_ path: String, _ sb: Sandbox, file: StaticString = #filePath, line: UInt = #line) -> String {
        let script = sb.root + "/thumbnail.py"
        if !FileManager.default.fileExists(atPath: script) {
            try? factoryScript.write(toFile: script, atomically: true, encoding: .utf8)
        }
        // /usr/bin/python3: Debian's, which has the gi bindings (a PATH python may not).
        let r = Harness.run(["/usr/bin/python3", script, path], env: sb.env, timeout: 60)
        XCTAssertEqual(r.status, 0, "thumbnail factory failed: \(r.stderr)", file: file, line: line)
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Writes an RGB PNG of noise (seeded) and returns its bytes.
    @discardableResult
    static func writePNG(to path: String, seed: UInt64, width: Int = 320, height: Int = 240) throws -> [UInt8] {
        let out = path + ".tmp-\(seed).png"
        let py = """
        import struct, zlib, random, sys
        w, h, seed = \(width), \(height), \(seed)
        rnd = random.Random(seed)
        rows = b''.join(b'\\x00' + bytes(rnd.getrandbits(8) for _ in range(w * 3)) for _ in range(h))
        def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
        png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) \\
            + chunk(b'IDAT', zlib.compress(rows, 6)) + chunk(b'IEND', b'')
        open(sys.argv[1], 'wb').write(png)
        """
        let r = Harness.run(["/usr/bin/python3", "-c", py, out], timeout: 60)
        guard r.status == 0 else { throw NSError(domain: "png", code: Int(r.status), userInfo: [NSLocalizedDescriptionKey: r.stderr]) }
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: out)))
        unlink(out)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return bytes
    }

    static func fileURI(_ path: String) -> String { URL(fileURLWithPath: path).absoluteString }

    /// Text of the `Thumb::URI` tEXt chunk of a PNG, read independently of photovault's parser.
    static func uri(ofPNG path: String) -> String? {
        guard let d = FileManager.default.contents(atPath: path), d.count > 8 else { return nil }
        let b = [UInt8](d)
        guard b[0..<8] == [137, 80, 78, 71, 13, 10, 26, 10] else { return nil }
        var i = 8
        while i + 8 <= b.count {
            let len = Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3])
            let type = String(decoding: b[(i + 4)..<(i + 8)], as: UTF8.self)
            guard i + 12 + len <= b.count else { return nil }
            if type == "tEXt" {
                let body = Array(b[(i + 8)..<(i + 8 + len)])
                if let z = body.firstIndex(of: 0), String(decoding: body[..<z], as: UTF8.self) == "Thumb::URI" {
                    return String(decoding: body[(z + 1)...], as: UTF8.self)
                }
            }
            i += 12 + len
        }
        return nil
    }

    /// Width and height from the IHDR chunk.
    static func pngSize(_ path: String) -> (Int, Int)? {
        guard let d = FileManager.default.contents(atPath: path), d.count >= 24 else { return nil }
        let b = [UInt8](d)
        func be(_ o: Int) -> Int { Int(b[o]) << 24 | Int(b[o + 1]) << 16 | Int(b[o + 2]) << 8 | Int(b[o + 3]) }
        return (be(16), be(20))
    }

    /// Regular .png files under `dir`, never following a symlink.
    static func pngs(under dir: String) -> [String] {
        var out: [String] = []
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return [] }
        for n in names.sorted() {
            let p = dir + "/" + n
            var st = stat()
            guard lstat(p, &st) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR { out += pngs(under: p) }
            else if (st.st_mode & S_IFMT) == S_IFREG && n.hasSuffix(".png") { out.append(p) }
        }
        return out
    }

    /// Thumbnails under `dir` whose Thumb::URI names a file inside `mountpoint`.
    static func vaultThumbnails(under dir: String, mountpoint: String) -> [String] {
        let prefix = fileURI(mountpoint).hasSuffix("/") ? fileURI(mountpoint) : fileURI(mountpoint) + "/"
        return pngs(under: dir).filter { uri(ofPNG: $0)?.hasPrefix(prefix) == true }
    }

    static func symlinkTarget(_ path: String) -> String? { try? FileManager.default.destinationOfSymbolicLink(atPath: path) }

    /// Files under the store containing any 32-byte slice (taken every 997 bytes) of the
    /// given byte strings.
    static func storeHits(_ store: String, slicesOf sources: [[UInt8]]) -> [String] {
        var needles: [[UInt8]] = []
        for s in sources {
            var o = 16
            while o + 32 <= s.count { needles.append(Array(s[o..<(o + 32)])); o += 997 }
        }
        precondition(!needles.isEmpty)
        var hits: [String] = []
        guard let e = FileManager.default.enumerator(atPath: store) else { return ["cannot scan \(store)"] }
        while let rel = e.nextObject() as? String {
            guard let d = FileManager.default.contents(atPath: store + "/" + rel), !d.isEmpty else { continue }
            let hay = [UInt8](d)
            for n in needles where Sandbox.contains(hay, n) { hits.append(rel); break }
        }
        return hits
    }
}
