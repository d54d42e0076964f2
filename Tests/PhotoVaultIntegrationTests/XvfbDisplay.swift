import Foundation
import XCTest

/// A private X server (Xvfb) for the desktop tests: GTK applications and file managers run
/// on it. A display number nobody uses, ready once its socket exists; stopped by `stop()`.
final class XvfbDisplay {
    let number: Int
    let process: BackgroundProcess
    var name: String { ":\(number)" }

    init(logDirectory: String) throws {
        var n = 0
        for _ in 0..<50 {
            let c = Int.random(in: 200..<900)
            if !FileManager.default.fileExists(atPath: "/tmp/.X11-unix/X\(c)") && !FileManager.default.fileExists(atPath: "/tmp/.X\(c)-lock") { n = c; break }
        }
        guard n != 0 else { throw RigError.spawn("no free X display number") }
        number = n
        process = try BackgroundProcess(["/usr/bin/Xvfb", ":\(n)", "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                                        output: logDirectory + "/xvfb.log")
        guard Harness.waitUntil(15, { FileManager.default.fileExists(atPath: "/tmp/.X11-unix/X\(n)") }) else {
            process.stop()
            throw RigError.spawn("Xvfb :\(n) did not start: \(process.output)")
        }
    }

    /// A PNG screenshot of the whole screen (ImageMagick's import).
    func screenshot(to path: String) -> Harness.Result {
        Harness.run(["/usr/bin/import", "-display", name, "-window", "root", path], timeout: 30)
    }

    func stop() { process.stop() }
    deinit { stop() }
}
