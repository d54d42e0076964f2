import Foundation
import XCTest

/// Bulk copies through the mount with `cp`, checked by sha256.
final class MountCopyTests: XCTestCase {
    /// 200 photo-sized files (3–6 MB of random bytes behind a distinctive text header) copied
    /// in and back out; every digest equal, also after a remount; no header or name underneath.
    func testTwoHundredPhotosInAndOut() {
        let sb = Sandbox("pv-copy")
        sb.initStore()
        let mp = sb.mount()
        let src = sb.plainDir("photos"), out = sb.plainDir("out")
        let tag = "PVCOPY-\(UUID().uuidString.prefix(8))"
        // Sizes vary per file and are not chunk multiples; each file starts with a
        // text header (a needle for the store scan) followed by random bytes.
        sb.ok("""
        set -e
        cd \(Sandbox.quote(src))
        for i in $(seq -w 1 200); do
          { printf '%s photo %s header\\n' \(tag) "$i"; head -c $(( 3000000 + (10#$i * 15013) % 3000000 )) /dev/urandom; } > "IMG_\(tag)_$i.jpg"
        done
        """)
        let start = Date()
        sb.ok("cp -r \(Sandbox.quote(src)) \(Sandbox.quote(mp))/Camera")
        sb.ok("cp -r \(Sandbox.quote(mp))/Camera \(Sandbox.quote(out))/Camera")
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertLessThan(elapsed, 120, "copying 200 photos in and out took \(elapsed) s")

        let digests = "sha256sum * | sort"
        let original = sb.ok("cd \(Sandbox.quote(src)) && \(digests)")
        XCTAssertEqual(original.split(separator: "\n").count, 200)
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp))/Camera && \(digests)"), original)
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(out))/Camera && \(digests)"), original)

        // Read from a fresh daemon (nothing cached in the kernel or the process).
        sb.remount(mp)
        XCTAssertEqual(sb.ok("cd \(Sandbox.quote(mp))/Camera && \(digests)"), original)
        sb.unmount(mp)
        sb.assertNoPlaintextByGrep([tag, "IMG_\(tag)", "Camera", "photo 001 header"])
    }
}
