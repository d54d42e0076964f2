import Foundation
import XCTest

/// A long-running helper process (dbus-daemon, a shell script holding files open, ...),
/// started with posix_spawn so its exit is seen by waitpid (see `Harness.run`), with its
/// output in files. Killed and reaped by `stop()`.
final class BackgroundProcess {
    let pid: pid_t
    let outputPath: String
    private var reaped = false
    private(set) var exitStatus: Int32?

    init(_ argv: [String], env: [String: String] = [:], output: String) throws {
        outputPath = output
        var e = ProcessInfo.processInfo.environment
        for (k, v) in env { e[k] = v }
        var fa = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&fa)
        defer { posix_spawn_file_actions_destroy(&fa) }
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&fa, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&fa, 1, 2)
        let cargv: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let cenv: [UnsafeMutablePointer<CChar>?] = e.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in cargv { free(p) }; for p in cenv { free(p) } }
        var p: pid_t = 0
        let rc = posix_spawn(&p, argv[0], &fa, nil, cargv, cenv)
        guard rc == 0 else { throw RigError.spawn("\(argv[0]): \(String(cString: strerror(rc)))") }
        pid = p
    }

    /// Whether it is still running (reaps it once it has exited).
    var isRunning: Bool {
        if reaped { return false }
        var st: Int32 = 0
        if waitpid(pid, &st, WNOHANG) == pid {
            reaped = true
            exitStatus = (st & 0x7f) == 0 ? (st >> 8) & 0xff : 128 + (st & 0x7f)
            return false
        }
        return true
    }

    /// Waits up to `seconds` for the exit; returns the exit status, or nil if still running.
    func wait(_ seconds: Double) -> Int32? {
        _ = Harness.waitUntil(seconds) { !isRunning }
        return isRunning ? nil : exitStatus
    }

    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    func stop() {
        guard isRunning else { return }
        kill(pid, SIGTERM)
        if wait(3) == nil { kill(pid, SIGKILL); _ = wait(3) }
    }

    deinit { stop() }
}

enum RigError: Error {
    case spawn(String)
    case busDidNotStart(String)
}

/// Two private dbus-daemons standing in for the system and the session bus, with a permissive
/// policy written by the test, and the ways a desktop announces a lock: logind's
/// Session.Lock / LockedHint / PrepareForSleep on the "system" bus, and the screen savers'
/// ActiveChanged on the "session" bus.
final class DBusRig {
    static let sessionPath = "/org/freedesktop/login1/session/_31"
    let directory: String
    let systemAddress: String
    let sessionAddress: String
    private var daemons: [BackgroundProcess] = []

    static let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <keep_umask/>
          <listen>unix:tmpdir=/tmp</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow user="*"/>
            <allow own="*"/>
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
          </policy>
        </busconfig>
        """

    init(directory dir: String) throws {
        directory = dir
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let conf = dir + "/bus.conf"
        try Self.config.write(toFile: conf, atomically: true, encoding: .utf8)
        systemAddress = "unix:path=\(dir)/system.sock"
        sessionAddress = "unix:path=\(dir)/session.sock"
        for (name, address) in [("system", systemAddress), ("session", sessionAddress)] {
            let d = try BackgroundProcess(["/usr/bin/dbus-daemon", "--config-file=\(conf)", "--address=\(address)",
                                           "--nofork", "--nosyslog"], output: dir + "/\(name).log")
            daemons.append(d)
            // Ready once a client can talk to it.
            let up = Harness.waitUntil(5) {
                Harness.run(["/usr/bin/dbus-send", "--bus=\(address)", "--type=method_call", "--print-reply",
                             "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.GetId"],
                            timeout: 5).status == 0
            }
            guard up else { throw RigError.busDidNotStart("\(name): \(d.output)") }
        }
    }

    /// What the mount daemon needs in its environment to watch these buses as its session's.
    var environment: [String: String] {
        ["DBUS_SYSTEM_BUS_ADDRESS": systemAddress, "DBUS_SESSION_BUS_ADDRESS": sessionAddress,
         "PHOTOVAULT_SESSION_PATH": Self.sessionPath, "XDG_SESSION_ID": "1"]
    }

    /// dbus-send a signal; `sender` makes dbus-send own that name first, as logind does, so
    /// strict sender matches receive it.
    func send(system: Bool, sender: String?, path: String, member: String, _ args: [String] = [],
              file: StaticString = #filePath, line: UInt = #line) {
        var argv = ["/usr/bin/dbus-send", "--bus=\(system ? systemAddress : sessionAddress)", "--type=signal"]
        if let sender { argv.append("--sender=\(sender)") }
        argv += [path, member] + args
        let r = Harness.run(argv, timeout: 10)
        XCTAssertEqual(r.status, 0, "dbus-send \(member): \(r.stderr)", file: file, line: line)
    }

    func sessionLock() {
        send(system: true, sender: "org.freedesktop.login1", path: Self.sessionPath,
             member: "org.freedesktop.login1.Session.Lock")
    }

    func sessionUnlock() {
        send(system: true, sender: "org.freedesktop.login1", path: Self.sessionPath,
             member: "org.freedesktop.login1.Session.Unlock")
    }

    func prepareForSleep(_ value: Bool) {
        send(system: true, sender: "org.freedesktop.login1", path: "/org/freedesktop/login1",
             member: "org.freedesktop.login1.Manager.PrepareForSleep", ["boolean:\(value)"])
    }

    /// `interface` is org.freedesktop.ScreenSaver or org.gnome.ScreenSaver.
    func screenSaverActive(_ interface: String, _ value: Bool) {
        let path = interface == "org.gnome.ScreenSaver" ? "/org/gnome/ScreenSaver" : "/org/freedesktop/ScreenSaver"
        send(system: false, sender: interface, path: path, member: "\(interface).ActiveChanged", ["boolean:\(value)"])
    }

    /// PropertiesChanged(org.freedesktop.login1.Session, {LockedHint: <value>}) with gdbus, the
    /// way the brief and logind's own clients spell it.
    @discardableResult
    func lockedHintWithGdbus(_ value: Bool) -> Harness.Result {
        Harness.run(["/usr/bin/gdbus", "emit", "--system", "--object-path", Self.sessionPath,
                     "--signal", "org.freedesktop.DBus.Properties.PropertiesChanged",
                     "'org.freedesktop.login1.Session'", "{'LockedHint': <\(value)>}", "@as []"],
                    env: ["DBUS_SYSTEM_BUS_ADDRESS": systemAddress], timeout: 10)
    }

    /// The same signal from a connection that owns org.freedesktop.login1 (python3-dbus), as
    /// real logind sends it: the watcher matches sender='org.freedesktop.login1', and gdbus
    /// emit cannot own a name.
    @discardableResult
    func lockedHintAsLogind(_ value: Bool, file: StaticString = #filePath, line: UInt = #line) -> Harness.Result {
        let script = """
            import sys, dbus
            bus = dbus.bus.BusConnection(sys.argv[1])
            bus.request_name("org.freedesktop.login1")
            msg = dbus.lowlevel.SignalMessage(sys.argv[2], "org.freedesktop.DBus.Properties", "PropertiesChanged")
            msg.append("org.freedesktop.login1.Session",
                       dbus.Dictionary({"LockedHint": dbus.Boolean(sys.argv[3] == "true", variant_level=1)}, signature="sv"),
                       dbus.Array([], signature="s"))
            bus.send_message(msg)
            bus.flush()
            """
        let r = Harness.run(["/usr/bin/python3", "-c", script, systemAddress, Self.sessionPath, value ? "true" : "false"],
                            timeout: 10)
        XCTAssertEqual(r.status, 0, "python3-dbus emitter: \(r.stderr)", file: file, line: line)
        return r
    }

    func stop() {
        for d in daemons { d.stop() }
        daemons.removeAll()
    }

    deinit { stop() }

    /// Starts a stand-in for systemd-logind on the system bus (see `ScriptedLogind`); the
    /// n-th one of a test logs to logind-n.log.
    func startLogind(_ n: Int = 1) throws -> ScriptedLogind {
        try ScriptedLogind(address: systemAddress, log: directory + "/logind-\(n).log")
    }
}

/// systemd-logind as far as the mount daemon uses it, in python3-dbus: owns
/// org.freedesktop.login1 (so strict sender matches see its signals), answers GetSessionByPID,
/// GetSession, Get(LockedHint) (false) and Inhibit (a pipe whose far end it watches), and emits
/// Manager.PrepareForSleep when told to. Each call, and each inhibitor let go, is a line of its log.
final class ScriptedLogind {
    static let script = """
        import os, sys, dbus, dbus.service, dbus.mainloop.glib
        from gi.repository import GLib
        dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
        address, session, logpath = sys.argv[1:4]
        log = open(logpath, "a", buffering=1)
        bus = dbus.bus.BusConnection(address)
        M = "org.freedesktop.login1.Manager"
        class Manager(dbus.service.Object):
            @dbus.service.method(M, in_signature="u", out_signature="o")
            def GetSessionByPID(self, pid):
                log.write("GetSessionByPID\\n"); return session
            @dbus.service.method(M, in_signature="s", out_signature="o")
            def GetSession(self, which):
                log.write("GetSession(%s)\\n" % which); return session
            @dbus.service.method(M, in_signature="ssss", out_signature="h")
            def Inhibit(self, what, who, why, mode):
                r, w = os.pipe()
                def released(fd, condition):
                    log.write("released\\n"); os.close(fd); return False
                GLib.io_add_watch(r, GLib.PRIORITY_DEFAULT, GLib.IO_HUP | GLib.IO_ERR | GLib.IO_IN, released)
                fd = dbus.types.UnixFd(w)
                os.close(w)
                log.write("Inhibit(%s,%s)\\n" % (what, mode)); return fd
            @dbus.service.signal(M, signature="b")
            def PrepareForSleep(self, start): pass
            @dbus.service.method("org.photovault.Test", in_signature="b")
            def EmitPrepareForSleep(self, start): self.PrepareForSleep(start)
        class Session(dbus.service.Object):
            @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
            def Get(self, interface, name):
                log.write("Get(%s)\\n" % name); return dbus.Boolean(False, variant_level=1)
        manager = Manager(bus, "/org/freedesktop/login1")
        sessionObject = Session(bus, session)
        name = dbus.service.BusName("org.freedesktop.login1", bus)
        log.write("ready\\n")
        GLib.MainLoop().run()
        """

    let address: String
    let logPath: String
    private let process: BackgroundProcess

    /// Returns once it owns org.freedesktop.login1.
    init(address: String, log: String) throws {
        self.address = address
        logPath = log
        process = try BackgroundProcess(["/usr/bin/python3", "-c", Self.script, address, DBusRig.sessionPath, log],
                                        output: log + ".out")
        guard Harness.waitUntil(10, { calls.contains("ready") }) else {
            process.stop()
            throw RigError.spawn("fake logind did not start: \(process.output)")
        }
    }

    /// The lines of its log: "ready", then the calls ("GetSessionByPID", "Inhibit(sleep,delay)",
    /// "Get(LockedHint)" ...) and "released" for each inhibitor let go, in order.
    var calls: [String] {
        ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Manager.PrepareForSleep(value), sent by this logind (returns once it is sent).
    func prepareForSleep(_ value: Bool, file: StaticString = #filePath, line: UInt = #line) {
        let r = Harness.run(["/usr/bin/dbus-send", "--bus=\(address)", "--type=method_call", "--print-reply",
                             "--dest=org.freedesktop.login1", "/org/freedesktop/login1",
                             "org.photovault.Test.EmitPrepareForSleep", "boolean:\(value)"], timeout: 10)
        XCTAssertEqual(r.status, 0, "EmitPrepareForSleep: \(r.stderr)", file: file, line: line)
    }

    /// Kills it (SIGTERM), as `systemctl stop systemd-logind` does; its name leaves the bus.
    func stop() { process.stop() }
}

/// Facts about a live mount's daemon, from `photovault status`.
enum MountProbe {
    /// The daemon pid `photovault status` prints for `mountpoint`.
    static func daemonPID(_ s: Sandbox, _ mountpoint: String) -> pid_t? {
        let r = s.pv(["status"])
        for line in r.stdout.split(separator: "\n") where line.hasPrefix(mountpoint + "\t") {
            for field in line.split(separator: "\t") where field.hasPrefix("pid=") {
                return pid_t(field.dropFirst(4))
            }
        }
        return nil
    }

    /// The `state=` word of `photovault status` for `mountpoint` ("unlocked", "locked", ...).
    static func state(_ s: Sandbox, _ mountpoint: String) -> String? {
        let r = s.pv(["status"])
        for line in r.stdout.split(separator: "\n") where line.hasPrefix(mountpoint + "\t") {
            for word in line.split(whereSeparator: { $0 == " " || $0 == "\t" }) where word.hasPrefix("state=") {
                return String(word.dropFirst(6))
            }
        }
        return nil
    }

    static func isAlive(_ pid: pid_t) -> Bool { kill(pid, 0) == 0 || errno != ESRCH }
}
