import XCTest
import Foundation
import Glibc
@testable import PhotoVaultCrypto
@testable import PhotoVaultStore

final class ConfigTests: XCTestCase {
    private var pristineConfig: [String: [UInt8]] = [:]

    private func newStore() throws -> (StoreLayout, StoreConfig) {
        let layout = StoreLayout(root: Fixture.tempDir(self) + "/store")
        let config = StoreConfig(cipher: .xchacha20poly1305, chunkSize: 16384)
        try layout.initialise(config: config)
        pristineConfig[layout.root] = Fixture.readFile(layout.configPath)
        return (layout, config)
    }

    private func mtime(_ path: String) -> timespec {
        var st = stat()
        precondition(stat(path, &st) == 0)
        return st.st_mtim
    }

    /// Loads a config that must fail with `expected`, and checks the file was not rewritten.
    private func expectLoadFails(_ layout: StoreLayout, content: [UInt8], _ expected: (StoreError) -> Bool, _ label: String,
                                 file: StaticString = #filePath, line: UInt = #line) {
        Fixture.writeFile(layout.configPath, content)
        let t0 = mtime(layout.configPath)
        XCTAssertThrowsError(try layout.loadConfig(), label, file: file, line: line) { e in
            XCTAssertTrue((e as? StoreError).map(expected) ?? false, "\(label): got \(e)", file: file, line: line)
        }
        XCTAssertEqual(Fixture.readFile(layout.configPath), content, "\(label): config rewritten", file: file, line: line)
        let t1 = mtime(layout.configPath)
        XCTAssertTrue(t0.tv_sec == t1.tv_sec && t0.tv_nsec == t1.tv_nsec, "\(label): mtime changed", file: file, line: line)
    }

    /// The store's config as first written, with one edit applied.
    private func edited(_ layout: StoreLayout, _ edit: (inout [String: Any]) -> Void) throws -> [UInt8] {
        let pristine = pristineConfig[layout.root]!
        var obj = try JSONSerialization.jsonObject(with: Data(pristine)) as! [String: Any]
        edit(&obj)
        return Array(try JSONSerialization.data(withJSONObject: obj))
    }

    func testRoundTripAndLayout() throws {
        let (layout, config) = try newStore()
        XCTAssertEqual(try layout.loadConfig(), config)
        XCTAssertEqual(try StoreConfig.decode(config.encoded()), config)
        var st = stat()
        XCTAssertEqual(stat(layout.configPath, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        for d in [layout.root, layout.accountsDir, layout.usersDir] {
            XCTAssertEqual(stat(d, &st), 0, d)
            XCTAssertEqual(st.st_mode & 0o777, 0o700, d)
        }
        XCTAssertThrowsError(try layout.initialise(config: config)) { XCTAssertEqual($0 as? StoreError, .storeExists(path: layout.root)) }
        XCTAssertEqual(config.storeID.count, 16)
        XCTAssertNotEqual(StoreConfig().storeID, config.storeID)
    }

    /// Two inits of one directory at the same time (two `photovault init`, or `init` and a
    /// first mount's offer): exactly one makes the store, the other is told it exists. Both
    /// passed the existence check and the second rename replaced the first config, whose
    /// store ID and account-name salt the first one's accounts were then made with; they no
    /// longer opened. (A race: on the old code it showed in nearly every round.)
    func testTwoInitsAtOnceMakeOneStore() throws {
        let base = Fixture.tempDir(self)
        for round in 0..<20 {
            let layout = StoreLayout(root: base + "/store-\(round)")
            let start = DispatchSemaphore(value: 0), done = DispatchGroup()
            let lock = NSLock()
            nonisolated(unsafe) var results: [Result<StoreConfig, Error>] = []
            for _ in 0..<2 {
                done.enter()
                Thread {
                    start.wait()
                    let config = StoreConfig()
                    let r = Result { try layout.initialise(config: config); return config }
                    lock.lock(); results.append(r); lock.unlock()
                    done.leave()
                }.start()
            }
            start.signal(); start.signal()
            done.wait()
            let made = results.compactMap { try? $0.get() }
            XCTAssertEqual(made.count, 1, "round \(round): \(made.count) inits succeeded")
            for r in results { if case .failure(let e) = r { XCTAssertEqual(e as? StoreError, .storeExists(path: layout.root)) } }
            if let winner = made.first { XCTAssertEqual(try layout.loadConfig(), winner, "round \(round)") }
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.root).sorted(),
                           ["accounts", StoreConfig.fileName, "users"].sorted(), "no temp file left")
        }
    }

    /// init makes the store's root and the missing directories above it (`~/.local/share/
    /// photovault/store`) and syncs each into its parent before the config is linked: only
    /// the root's contents were synced, so on btrfs a power loss could take the whole store.
    func testInitSyncsTheStoreRootAndTheDirectoriesItMadeAboveIt() throws {
        let base = Fixture.tempDir(self)
        let layout = StoreLayout(root: base + "/data/photovault/store")
        func path(_ fd: Int32) -> String {
            var buf = [CChar](repeating: 0, count: 4096)
            let n = readlink("/proc/self/fd/\(fd)", &buf, buf.count - 1)
            return n > 0 ? String(cString: buf) : "?"
        }
        var synced: [String] = []
        OfflineFixture.hookFsync(self) { synced.append(path($0)); return true }
        try layout.initialise(config: StoreConfig())
        let real = try XCTUnwrap(RealPath.of(base))
        let rel = synced.map { $0.hasPrefix(real) ? "BASE" + $0.dropFirst(real.count) : $0 }
        XCTAssertEqual(rel, ["BASE", "BASE/data", "BASE/data/photovault", "BASE/data/photovault/store"])
        XCTAssertEqual(try layout.loadConfig().version, 1)
        // A file in the way is one plain error, not Foundation's NSCocoaErrorDomain dump.
        Fixture.writeFile(base + "/file", [1])
        XCTAssertThrowsError(try StoreLayout(root: base + "/file/sub/store").initialise(config: StoreConfig())) {
            XCTAssertEqual($0 as? StoreError, .io(errno: ENOTDIR, context: "mkdir \(base)/file/sub"))
        }
    }

    /// An init whose store directory cannot be synced after the config's link (EIO) fails
    /// and leaves no config, so that it can be run again: the config stayed, and the rerun
    /// said the store already exists.
    func testInitWhoseDirectorySyncFailsLeavesNoStore() throws {
        let layout = StoreLayout(root: Fixture.tempDir(self) + "/store")
        var store = stat()
        OfflineFixture.hookFsync(self) { fd in
            var st = stat()
            return !(fstat(fd, &st) == 0 && stat(layout.root, &store) == 0 && st.st_ino == store.st_ino)
        }
        XCTAssertThrowsError(try layout.initialise(config: StoreConfig())) {
            XCTAssertEqual(($0 as? StoreError)?.errno, EIO, "\($0)")
        }
        XCTAssertThrowsError(try layout.loadConfig()) { XCTAssertEqual($0 as? StoreError, .storeNotInitialised(path: layout.root)) }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: layout.root).sorted(), ["accounts", "users"])
        FileIO.fsync = { Glibc.fsync($0) }
        try layout.initialise(config: StoreConfig())
        XCTAssertEqual(try layout.loadConfig().version, 1)
    }

    func testMissingStore() {
        let layout = StoreLayout(root: Fixture.tempDir(self) + "/nothing")
        XCTAssertThrowsError(try layout.loadConfig()) { XCTAssertEqual($0 as? StoreError, .storeNotInitialised(path: layout.root)) }
    }

    func testUnknownVersion() throws {
        let (layout, _) = try newStore()
        for v in [0, 2, 99] {
            let content = try edited(layout) { $0["version"] = v }
            expectLoadFails(layout, content: content, { $0 == .unknownVersion(found: v, supported: 1) }, "version \(v)")
        }
    }

    /// A newer version may have changed the other fields' types: its config is still of an
    /// unknown version (exit 10), as an account record is. It used to be "truncated or not
    /// valid JSON" (exit 9) once any field no longer decoded as version 1's.
    func testUnknownVersionWithFieldsOfAnotherShape() throws {
        let (layout, _) = try newStore()
        let reshaped: [(String, Any)] = [("kdfFloor", "argon2id:3:256M"), ("chunkSize", "4k"), ("storeID", ["id": 7])]
        for (field, value) in reshaped {
            let content = try edited(layout) { $0["version"] = 2; $0[field] = value }
            expectLoadFails(layout, content: content, { $0 == .unknownVersion(found: 2, supported: 1) }, "version 2, \(field)")
        }
        let missing = try edited(layout) { $0["version"] = nil }
        expectLoadFails(layout, content: missing, { $0 == .corruptStore("\(StoreConfig.fileName) has no version") }, "no version")
    }

    func testTruncatedConfig() throws {
        let (layout, config) = try newStore()
        let full = config.encoded()
        for n in [0, 1, 10, full.count / 2, full.count - 3] {
            expectLoadFails(layout, content: Array(full.prefix(n)), { if case .corruptStore = $0 { return true }; return false },
                            "truncated to \(n)")
        }
    }

    func testWeakenedKDFFloor() throws {
        let (layout, _) = try newStore()
        let cases: [(String, Any)] = [("kdfFloor", ["opsLimit": 1, "memLimit": 64 * 1024 * 1024]),
                                      ("kdfFloor", ["opsLimit": 3, "memLimit": 8 * 1024 * 1024]),
                                      ("accountNameKDF", ["opsLimit": 0, "memLimit": 32 * 1024 * 1024]),
                                      ("accountNameKDF", ["opsLimit": 2, "memLimit": 1024 * 1024])]
        for (key, value) in cases {
            let content = try edited(layout) { $0[key] = value }
            expectLoadFails(layout, content: content, { $0 == .weakStoreKDFParameters(field: key) }, "\(key) \(value)")
        }
        // A stronger floor is accepted.
        let stronger = try edited(layout) { $0["kdfFloor"] = ["opsLimit": 4, "memLimit": 512 * 1024 * 1024] }
        Fixture.writeFile(layout.configPath, stronger)
        XCTAssertEqual(try layout.loadConfig().kdfFloor, Argon2Parameters(opsLimit: 4, memLimit: 512 * 1024 * 1024))
    }

    /// Costs above the records' ceilings (ops 64, 4 GiB) are a corrupt store naming the field:
    /// a huge memLimit trapped in the KDF, a huge opsLimit hung it, and a kdfFloor above the
    /// ceiling made every record fail.
    func testKDFAboveCeiling() throws {
        let (layout, _) = try newStore()
        let cases: [(String, [String: UInt64])] = [
            ("accountNameKDF", ["opsLimit": 2, "memLimit": 9223372036854775808]),
            ("accountNameKDF", ["opsLimit": 4294967295, "memLimit": 32 * 1024 * 1024]),
            ("accountNameKDF", ["opsLimit": 65, "memLimit": 32 * 1024 * 1024]),
            ("kdfFloor", ["opsLimit": 2, "memLimit": 9223372036854775808]),
            ("kdfFloor", ["opsLimit": 4294967295, "memLimit": 64 * 1024 * 1024]),
            ("kdfFloor", ["opsLimit": 65, "memLimit": 64 * 1024 * 1024]),
            ("kdfFloor", ["opsLimit": 2, "memLimit": (4 << 30) + 1]),
        ]
        for (key, value) in cases {
            let content = try edited(layout) { $0[key] = value }
            XCTAssertTrue(String(decoding: content, as: UTF8.self).contains("\(value.values.max()!)"), "\(key) \(value)")
            expectLoadFails(layout, content: content, { if case .corruptStore(let d) = $0 { return d.contains(key) }; return false },
                            "\(key) \(value)")
        }
        // The ceilings themselves are accepted.
        let atCeiling: [String: UInt64] = ["opsLimit": 64, "memLimit": 4 << 30]
        let content = try edited(layout) { $0["kdfFloor"] = atCeiling; $0["accountNameKDF"] = atCeiling }
        Fixture.writeFile(layout.configPath, content)
        let config = try layout.loadConfig()
        XCTAssertEqual(config.kdfFloor, Argon2Parameters(opsLimit: 64, memLimit: 4 << 30))
        XCTAssertEqual(config.accountNameKDF, Argon2Parameters(opsLimit: 64, memLimit: 4 << 30))
    }

    func testOtherCorruption() throws {
        let (layout, _) = try newStore()
        let isCorrupt: (StoreError) -> Bool = { if case .corruptStore = $0 { return true }; return false }
        let edits: [(String, (inout [String: Any]) -> Void)] = [
            ("format", { $0["format"] = "something-else" }),
            ("no storeID", { $0.removeValue(forKey: "storeID") }),
            ("short storeID", { $0["storeID"] = "AAAA" }),
            ("padded storeID", { $0["storeID"] = (($0["storeID"] as? String) ?? "") + "==" }),
            ("cipher", { $0["cipher"] = "ROT13" }),
            ("chunk size not a multiple of 4096", { $0["chunkSize"] = 5000 }),
            ("chunk size too large", { $0["chunkSize"] = 2 << 20 }),
            ("chunk size zero", { $0["chunkSize"] = 0 }),
            ("no salt", { $0.removeValue(forKey: "accountNameSalt") }),
        ]
        for (label, edit) in edits {
            expectLoadFails(layout, content: try edited(layout, edit), isCorrupt, label)
        }
        expectLoadFails(layout, content: Array("[1, 2, 3]".utf8), isCorrupt, "not an object")
        expectLoadFails(layout, content: [0xff, 0xfe, 0x00], isCorrupt, "binary")
    }

    func testDistinctExitCodes() {
        let codes = [StoreError.unknownVersion(found: 2, supported: 1).exitCode, StoreError.corruptStore("x").exitCode,
                     StoreError.weakKDFParameters.exitCode]
        XCTAssertEqual(Set(codes).count, 3)
    }
}
