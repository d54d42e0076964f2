import Foundation
import XCTest

/// An import stopped with Ctrl-C says what was kept and how to go on (issue 38, item 7); it
/// printed nothing (exit 130). The rerun it suggests then continues (item 5).
final class EverydayInterruptTests: XCTestCase {
    typealias T = OfflineCommandTests

    func testCtrlCDuringAnImportSaysWhatStaysAndTheRerunContinues() {
        let sb = Sandbox("pv-every-int")
        sb.initStore()
        let src = sb.plainDir("src")
        sb.ok("cd \(Sandbox.quote(src)) && printf a > a.jpg && printf b > b.jpg && head -c 8000000 /dev/urandom > c.bin")
        // Reads of c.bin are slowed (strace injects a delay), so the import is still copying
        // it when SIGINT comes; the signal goes to photovault itself (strace's tracee).
        // `set -m`: a background job of a script ignores SIGINT otherwise (POSIX), and the
        // import keeps an ignored signal ignored.
        let script = """
        set -m
        strace -f -o /dev/null -P \(Sandbox.quote(src))/c.bin -e trace=read -e inject=read:delay_exit=300000 \
            \(T.pvLine(sb, ["import", src, "/v"])) 2> \(Sandbox.quote(sb.root))/err &
        tracer=$!
        for i in $(seq 300); do
            pv=$(pgrep -P $tracer | head -1)   # the tracee: strace's only child
            [ -n "$pv" ] && [ -n "$(find \(Sandbox.quote(sb.store)) -name '.pvtmp-*' -size +0)" ] && break
            sleep 0.1
        done
        kill -INT "$pv"
        wait $tracer
        echo "status=$?"
        cat \(Sandbox.quote(sb.root))/err
        """
        let r = Harness.sh(script, env: sb.env, timeout: 60)
        XCTAssertTrue(r.stdout.hasPrefix("status=130\n"), r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("photovault: interrupted while copying /v/src/c.bin, which was not kept; 2 files imported "
                                        + "before it stay: run the same command again to continue (what is already in place "
                                        + "is skipped)\n"), r.stdout)

        let rerun = T.pv(sb, ["import", src, "/v"])
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertTrue(rerun.stderr.hasPrefix("imported 1 file, "), rerun.stderr)
        XCTAssertTrue(rerun.stderr.contains("; 2 already in place"), rerun.stderr)
        let out = sb.plainDir("out")
        XCTAssertEqual(T.pv(sb, ["export", "/v/src", out]).status, 0)
        XCTAssertEqual(T.checksums(sb, out + "/src"), T.checksums(sb, src))
    }
}
