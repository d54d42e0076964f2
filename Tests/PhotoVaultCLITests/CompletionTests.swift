import XCTest
@testable import PhotoVaultCLI

/// Runs the generated completion function in a real bash with COMP_WORDS/COMP_CWORD set.
final class CompletionTests: XCTestCase {
    static var scriptPath = ""
    var workDir = ""

    override class func setUp() {
        super.setUp()
        scriptPath = "/tmp/photovault-completion-\(getpid()).bash"
        try? Completion.bash().write(toFile: scriptPath, atomically: true, encoding: .utf8)
    }

    override class func tearDown() {
        try? FileManager.default.removeItem(atPath: scriptPath)
        super.tearDown()
    }

    override func setUpWithError() throws {
        workDir = "/tmp/pv-compl-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: workDir + "/photos dir", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: workDir + "/photo1.jpg", contents: Data())
        FileManager.default.createFile(atPath: workDir + "/photo2.jpg", contents: Data())
        FileManager.default.createFile(atPath: workDir + "/notes.txt", contents: Data())
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: workDir)
    }

    /// COMPREPLY for the words, the cursor on the last word.
    func complete(_ words: [String]) throws -> [String] {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = ["--norc", "--noprofile", "-c",
                       "source \"$1\"; shift; COMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 )); _photovault; "
                           + "printf '%s\\n' \"${COMPREPLY[@]}\"",
                       "bash", Self.scriptPath] + words
        p.currentDirectoryURL = URL(fileURLWithPath: workDir)
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        p.waitUntilExit()
        let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(errors, "", "bash wrote to stderr")
        XCTAssertEqual(p.terminationStatus, 0)
        return String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").map(String.init)
    }

    func testCommandWords() throws {
        XCTAssertEqual(try complete(["photovault", "us"]), ["user"])
        XCTAssertEqual(try complete(["photovault", "un"]), ["unmount", "unlock"])
        XCTAssertEqual(try complete(["photovault", "user", ""]),
                       ["add", "passwd", "reset-password", "remove", "list", "check", "add-login", "remove-login"])
        XCTAssertEqual(try complete(["photovault", "class", "l"]), ["list"])
        XCTAssertEqual(try complete(["photovault", "help", "cl"]), ["class"])
        XCTAssertEqual(try complete(["photovault", "help", "user", "re"]), ["reset-password", "remove", "remove-login"])
        // A global option and its value before the command are skipped.
        XCTAssertEqual(try complete(["photovault", "--store", "/tmp", "us"]), ["user"])
    }

    func testOptionNames() throws {
        XCTAssertEqual(try complete(["photovault", "init", "--ci"]), ["--cipher"])
        XCTAssertEqual(try complete(["photovault", "user", "add", "--pass"]), ["--passfile", "--password-stdin"])
        XCTAssertEqual(try complete(["photovault", "--v"]), ["--version"])
        let mount = try complete(["photovault", "mount", "-"])
        XCTAssertTrue(mount.contains("-f") && mount.contains("--foreground") && mount.contains("--no-dbus"))
        XCTAssertFalse(mount.contains("--cipher"))
    }

    func testOptionValues() throws {
        XCTAssertEqual(try complete(["photovault", "init", "--cipher", ""]), ["aes256gcm", "xchacha20poly1305"])
        XCTAssertEqual(try complete(["photovault", "mount", "--on-lock", "s"]), ["stay"])
        // bash splits "--cipher=xc" at '=' into three words by default...
        XCTAssertEqual(try complete(["photovault", "init", "--cipher", "=", "xc"]), ["xchacha20poly1305"])
        XCTAssertEqual(try complete(["photovault", "import", "--class", "=", ""]),
                       ["complete", "complete-unless-open", "until-first-auth", "none"])
        // ...and leaves it whole when '=' is not in COMP_WORDBREAKS.
        XCTAssertEqual(try complete(["photovault", "init", "--cipher=xc"]), ["--cipher=xchacha20poly1305"])
        XCTAssertEqual(try complete(["photovault", "mount", "--idle", ""]), [])
    }

    func testFilesAndPositionals() throws {
        XCTAssertEqual(try complete(["photovault", "import", "ph"]).sorted(), ["photo1.jpg", "photo2.jpg", "photos dir"])
        XCTAssertEqual(try complete(["photovault", "mount", "ph"]), ["photos dir"])
        XCTAssertEqual(try complete(["photovault", "user", "add", "--passfile", "no"]), ["notes.txt"])
        XCTAssertEqual(try complete(["photovault", "class", "set", "photo1.jpg", "u"]), ["until-first-auth"])
        XCTAssertEqual(try complete(["photovault", "class", "set", "--user", "bob", "photo1.jpg", "complete-"]),
                       ["complete-unless-open"])
        // After "--", option-looking words are positionals and no option names are offered.
        XCTAssertEqual(try complete(["photovault", "import", "--", "-"]), [])
    }
}
