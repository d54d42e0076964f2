import Foundation
import XCTest

/// What photo applications do inside a library folder: SQLite catalogues (rollback journal
/// and WAL with its shared-memory file, two writers at once, POSIX locks), and temporary
/// files used after unlink.
final class MountApplicationTests: XCTestCase {
    static let sqliteScript = """
    import sqlite3, sys
    path, mode, tag = sys.argv[1], sys.argv[2], sys.argv[3]
    db = sqlite3.connect(path, timeout=30)
    db.execute("pragma journal_mode=%s" % mode)
    db.execute("create table if not exists photos(id integer primary key, name text, blob blob)")
    if tag == "setup":
        sys.exit(0)
    for i in range(150):
        with db:
            db.execute("insert into photos(name, blob) values (?, randomblob(3000))", ("%s-%d" % (tag, i),))
    db.close()
    """

    func testSQLiteCataloguesWithConcurrentWriters() {
        let sb = Sandbox("pv-sqlite")
        sb.initStore()
        let mp = sb.mount()
        let script = sb.root + "/catalogue_writer.py"
        try! Self.sqliteScript.write(toFile: script, atomically: true, encoding: .utf8)
        let qs = Sandbox.quote(script), q = Sandbox.quote(mp)
        sb.ok("""
        set -e
        python3 \(qs) \(q)/rollback.db delete SQLITE-CAPTION-ROLLBACK
        # Switching a new database to WAL takes an exclusive lock without waiting (two
        # processes racing for it fail with "database is locked" on ext4 too): switch first.
        python3 \(qs) \(q)/wal.db wal setup
        python3 \(qs) \(q)/wal.db wal SQLITE-CAPTION-WAL-A & a=$!
        python3 \(qs) \(q)/wal.db wal SQLITE-CAPTION-WAL-B & b=$!
        wait $a; wait $b
        """)
        let check = """
        import sqlite3, sys
        for path in sys.argv[1:]:
            db = sqlite3.connect(path)
            print(db.execute("pragma integrity_check").fetchone()[0],
                  db.execute("select count(*), count(distinct name) from photos").fetchone())
        """
        let checker = sb.root + "/catalogue_check.py"
        try! check.write(toFile: checker, atomically: true, encoding: .utf8)
        let expected = "ok (150, 150)\nok (300, 300)\n"
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(checker)) \(q)/rollback.db \(q)/wal.db"), expected)
        sb.remount(mp)
        XCTAssertEqual(sb.ok("python3 \(Sandbox.quote(checker)) \(q)/rollback.db \(q)/wal.db"), expected)
        sb.unmount(mp)
        sb.assertNoPlaintext(["SQLITE-CAPTION", "rollback.db", "wal.db", "photos"])
    }

    /// A file removed while open stays readable and writable through its descriptor, and
    /// its name is gone at once (as on ext4).
    func testUnlinkedOpenFileKeepsWorking() {
        let sb = Sandbox("pv-unlinked")
        sb.initStore()
        let mp = sb.mount()
        let f = Sandbox.quote(mp + "/scratch.tmp")
        let out = sb.ok("""
        set -e
        exec 3<>\(f)
        printf 'UNLINKED-BEFORE\\n' >&3
        rm \(f)
        test ! -e \(f)
        printf 'UNLINKED-AFTER\\n' >&3
        head -c 100000 /dev/urandom | base64 -w0 >&3
        cat /proc/self/fd/3 | head -2
        ls -A \(Sandbox.quote(mp)) | wc -l
        """)
        XCTAssertTrue(out.hasPrefix("UNLINKED-BEFORE\nUNLINKED-AFTER\n"), out)
        XCTAssertTrue(out.hasSuffix("\n0\n"), out)
        sb.unmount(mp)
        // Nothing of the unlinked file is left underneath (only the tree's own metadata: the
        // directory files and the mount lock).
        sb.assertNoPlaintext(["UNLINKED-", "scratch.tmp"])
        let leftovers = sb.ok("find \(Sandbox.quote(sb.store))/users -mindepth 2 ! -name .pvdir ! -name .pvmount | wc -l")
        XCTAssertEqual(leftovers, "0\n")
    }
}
