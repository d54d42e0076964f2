import Foundation
import XCTest

/// Progress of an import or export on a terminal (issue 38, item 6): bytes as they go, the
/// rate, the share done and the time left, as rsync's --info=progress2 shows them. It counted
/// whole files only, so during a large file it stood still ("0 files, 0.0 MiB"); it is never
/// drawn where stderr is not a terminal.
final class EverydayProgressTests: XCTestCase {
    typealias T = OfflineCommandTests

    func testProgressCountsBytesWithRateAndTimeLeftOnATerminalOnly() {
        let sb = Sandbox("pv-every-progress")
        sb.initStore()
        let src = sb.plainDir("src")
        sb.ok("head -c 8388608 /dev/urandom > \(Sandbox.quote(src))/big.bin")
        // Reads of big.bin are slowed (0.25 s a MiB block), so the import takes about 2 s,
        // on a pseudo-terminal: the line must move during the one file.
        let argv = ["/usr/bin/strace", "-f", "-o", "/dev/null", "-P", src + "/big.bin", "-e", "trace=read",
                    "-e", "inject=read:delay_exit=250000", Harness.binary, "import", src, "/v",
                    "--store", sb.store, "--user", "alice", "--passfile", sb.passfile]
        let r = Harness.run(["python3", "-c", EverydayFirstUseTests.driver, "[]"] + argv, env: sb.env, timeout: 90)
        XCTAssertTrue(r.stdout.contains("DRIVER steps=0 status=0\n"), r.stdout)
        let updates = r.stdout.components(separatedBy: "\r").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        // Before the file is complete: part of its bytes, the share, a rate, the time left.
        let partial = updates.filter { $0.contains(" of 8.0 MiB (") && $0.hasSuffix(" left, 0 files") }
        XCTAssertGreaterThanOrEqual(partial.count, 2, r.stdout)
        XCTAssertTrue(partial.contains { !$0.hasPrefix("0 B") && !$0.contains("(100%)") && $0.contains(" MiB/s, ") }, r.stdout)
        XCTAssertTrue(updates.contains { $0.hasPrefix("8.0 MiB of 8.0 MiB (100%), ") && $0.contains(", 1 file") }, r.stdout)
        XCTAssertTrue(r.stdout.contains("imported 1 file, 1 directory, 0 symlinks, 8.0 MiB in "), r.stdout)

        // Export on a terminal too, knowing its total from the ciphertext sizes.
        let out = sb.plainDir("out")
        let exp = Harness.run(["python3", "-c", EverydayFirstUseTests.driver, "[]", Harness.binary, "export", "/v", out,
                               "--store", sb.store, "--user", "alice", "--passfile", sb.passfile], env: sb.env, timeout: 90)
        XCTAssertTrue(exp.stdout.contains("\r8.0 MiB of 8.0 MiB (100%), "), exp.stdout)

        // Not on a pipe: the summary line alone.
        sb.ok("rm -r \(Sandbox.quote(out))/v")
        let piped = T.pv(sb, ["export", "/v", out])
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertFalse(piped.stderr.contains("\r"), piped.stderr)
        XCTAssertTrue(piped.stderr.hasPrefix("exported 1 file, "), piped.stderr)
    }
}
