import Foundation
import Glibc
import XCTest

/// Two Syncthing instances (Debian's `syncthing`) keeping two folders in step, on 127.0.0.1
/// only: no global or local discovery, no relays, no NAT traversal, no usage reporting, no
/// browser. Nothing waits for a rescan interval or a file watcher: `scan` triggers a scan
/// through the REST API, `waitInSync` polls until both sides have everything. Keeps up to
/// ten conflict copies per file (the GUI's default; a hand-written config keeps none).
final class SyncthingPair {
    let root: String
    let folders: [String]
    let homes: [String]
    private(set) var ids: [String] = []
    private var guiPorts: [Int] = []
    private var listenPorts: [Int] = []
    private var processes: [BackgroundProcess] = []
    let apiKey = "photovault-sync-test-key"
    static let folderID = "vault"

    init(root: String, folders: [String]) throws {
        self.root = root
        self.folders = folders
        homes = ["A", "B"].map { root + "/syncthing-" + $0 }
        for (i, home) in homes.enumerated() {
            let r = Harness.run(["syncthing", "generate", "--home=" + home, "--no-default-folder"], timeout: 60)
            guard r.status == 0 else { throw RigError.spawn("syncthing generate: \(r.stderr)") }
            let id = Harness.run(["syncthing", "serve", "--home=" + home, "--device-id"], timeout: 30)
            ids.append(id.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            guiPorts.append(try SyncthingPair.freePort())
            listenPorts.append(try SyncthingPair.freePort())
            // The folder marker Syncthing insists on.
            try FileManager.default.createDirectory(atPath: folders[i] + "/.stfolder", withIntermediateDirectories: true)
        }
        for i in 0..<2 { try config(i).write(toFile: homes[i] + "/config.xml", atomically: true, encoding: .utf8) }
    }

    func config(_ i: Int) -> String {
        let devices = (0..<2).map { """
            <device id="\(ids[$0])" name="\($0 == 0 ? "A" : "B")" compression="metadata">
                <address>tcp://127.0.0.1:\(listenPorts[$0])</address>
            </device>
            """ }.joined(separator: "\n")
        return """
        <configuration version="36">
            <folder id="\(SyncthingPair.folderID)" label="vault" path="\(folders[i])" type="sendreceive" rescanIntervalS="3600" fsWatcherEnabled="false" ignorePerms="false">
                <device id="\(ids[0])"></device>
                <device id="\(ids[1])"></device>
                <maxConflicts>10</maxConflicts>
                <markerName>.stfolder</markerName>
            </folder>
            \(devices)
            <gui enabled="true" tls="false">
                <address>127.0.0.1:\(guiPorts[i])</address>
                <apikey>\(apiKey)</apikey>
            </gui>
            <options>
                <listenAddress>tcp://127.0.0.1:\(listenPorts[i])</listenAddress>
                <globalAnnounceEnabled>false</globalAnnounceEnabled>
                <localAnnounceEnabled>false</localAnnounceEnabled>
                <relaysEnabled>false</relaysEnabled>
                <natEnabled>false</natEnabled>
                <urAccepted>-1</urAccepted>
                <urSeen>3</urSeen>
                <startBrowser>false</startBrowser>
                <reconnectionIntervalS>1</reconnectionIntervalS>
                <crashReportingEnabled>false</crashReportingEnabled>
                <autoUpgradeIntervalH>0</autoUpgradeIntervalH>
            </options>
        </configuration>
        """
    }

    /// A TCP port on 127.0.0.1 that nothing listens on now.
    static func freePort() throws -> Int {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(s) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        a.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &a) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, len) == 0 && getsockname(s, $0, &len) == 0 }
        }
        guard ok else { throw RigError.spawn("no free port") }
        return Int(UInt16(bigEndian: a.sin_port))
    }

    func start() throws {
        for i in 0..<2 {
            processes.append(try BackgroundProcess(
                ["/usr/bin/syncthing", "serve", "--home=" + homes[i], "--no-browser", "--no-restart", "--no-upgrade",
                 "--gui-address=127.0.0.1:\(guiPorts[i])"],
                env: ["STNODEFAULTFOLDER": "1", "STNOUPGRADE": "1", "HOME": root],
                output: homes[i] + ".log"))
        }
        guard Harness.waitUntil(30, { (0..<2).allSatisfy { self.connected($0) } }) else {
            throw RigError.spawn("the two Syncthing instances did not connect: \(log)")
        }
    }

    var log: String { processes.map { String($0.output.suffix(2000)) }.joined(separator: "\n---\n") }

    func stop() {
        for p in processes { p.stop() }
        processes = []
    }

    deinit { stop() }

    func rest(_ i: Int, _ path: String, post: Bool = false) -> String? {
        let r = Harness.run(["curl", "-sf", "-m", "5"] + (post ? ["-X", "POST"] : [])
                            + ["-H", "X-API-Key: \(apiKey)", "http://127.0.0.1:\(guiPorts[i])" + path], timeout: 10)
        return r.status == 0 ? r.stdout : nil
    }

    func json(_ i: Int, _ path: String) -> [String: Any]? {
        guard let t = rest(i, path), let d = t.data(using: .utf8) else { return nil }
        return (try? JSONSerialization.jsonObject(with: d)) as? [String: Any]
    }

    func connected(_ i: Int) -> Bool {
        guard let c = json(i, "/rest/system/connections")?["connections"] as? [String: Any],
              let other = c[ids[1 - i]] as? [String: Any] else { return false }
        return other["connected"] as? Bool == true
    }

    /// Asks instance `i` (nil: both) to scan the folder now; returns when the scan is done.
    func scan(_ i: Int? = nil) {
        for k in i.map({ [$0] }) ?? [0, 1] { _ = rest(k, "/rest/db/scan?folder=\(SyncthingPair.folderID)", post: true) }
    }

    /// Scans both sides until both are idle with nothing left to pull and each sees the
    /// other complete, twice in a row (a conflict copy made while pulling is one more change
    /// to send back). False after `seconds`.
    func waitInSync(_ seconds: Double = 60) -> Bool {
        var calm = 0
        return Harness.waitUntil(seconds) {
            scan()
            let done = (0..<2).allSatisfy { i -> Bool in
                guard let st = json(i, "/rest/db/status?folder=\(SyncthingPair.folderID)"),
                      st["state"] as? String == "idle", (st["needTotalItems"] as? Int) == 0,
                      let c = json(i, "/rest/db/completion?folder=\(SyncthingPair.folderID)&device=\(ids[1 - i])"),
                      (c["completion"] as? Double) == 100, (c["needItems"] as? Int) == 0 else { return false }
                return true
            }
            calm = done ? calm + 1 : 0
            if calm < 2 { usleep(300_000) }
            return calm >= 2
        }
    }
}

/// `rclone bisync` (Debian's rclone) between two local folders, with its work directory and
/// an empty config of its own.
struct RcloneBisync {
    let path1: String
    let path2: String
    let workdir: String
    let config: String

    init(root: String, path1: String, path2: String) {
        self.path1 = path1
        self.path2 = path2
        workdir = root + "/rclone-work"
        try? FileManager.default.createDirectory(atPath: workdir, withIntermediateDirectories: true)
        config = root + "/rclone.conf"
        FileManager.default.createFile(atPath: config, contents: Data())
    }

    /// One run (`resync`: the first, which takes the union of both sides).
    @discardableResult
    func run(resync: Bool = false) -> Harness.Result {
        Harness.run(["rclone", "bisync", path1, path2, "--workdir", workdir, "--config", config,
                     "--check-access=false", "--verbose"] + (resync ? ["--resync"] : []), timeout: 120)
    }
}
