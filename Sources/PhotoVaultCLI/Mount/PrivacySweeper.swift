import Foundation
import PhotoVaultPrivacy
import CLinux

/// The short-lived process that outlives a mount daemon by the thumbnail quarantine
/// (`DesktopPrivacy.sweep`, docs/PRIVACY.md): the daemon exits at once after the unmount, as
/// `photovault unmount`, `lock` and scripts expect, while thumbnailers still busy with vault
/// photos (seen up to 26 s after a lock) find the cache pointing where nothing can be saved.
/// After the quarantine this process puts the user's thumbnail directory back, purges once more
/// and scrubs the recent-files lists again. Started as `/proc/self/exe __privacy-sweep SECONDS
/// MOUNTPOINT [GIVEN]` in a session of its own, with the plan (thumbnail names, no file names)
/// on its stdin. If it is killed, the redirect stays dangling (nothing is saved through it) until
/// the next mount repairs it.
enum PrivacySweeper {
    static let command = "__privacy-sweep"

    /// The quarantine: PHOTOVAULT_THUMBNAIL_QUARANTINE seconds (tests), else the default.
    static var quarantine: Double {
        if let s = ProcessInfo.processInfo.environment["PHOTOVAULT_THUMBNAIL_QUARANTINE"], let v = Double(s), v >= 0 { return v }
        return DesktopPrivacy.defaultQuarantine
    }

    /// The device of the photovault mount at `path`, from /proc/self/mountinfo (topmost wins).
    static let probe: ThumbnailGuard.MountProbe = { path in
        let last = MountInfoEntry.all().last { $0.fsType == MountInfoEntry.photoVaultType && $0.mountpoint == path }
        let mm = last?.device.split(separator: ":") ?? []
        guard mm.count == 2, let major = UInt64(mm[0]), let minor = UInt64(mm[1]) else { return nil }
        // glibc's makedev encoding (what stat's st_dev holds).
        return ((major & 0xfffff000) << 32) | ((major & 0xfff) << 8) | ((minor & 0xffffff00) << 12) | (minor & 0xff)
    }

    /// Called by the daemon after the unmount: starts the sweep process, or restores now.
    static func handOver(_ plan: DesktopPrivacy.SweepPlan, privacy: DesktopPrivacy, settings: MountSettings,
                         log: @escaping @Sendable (String) -> Void) {
        let delay = quarantine
        if delay == 0 { privacy.restoreNow(plan); return }
        var fds: [Int32] = [0, 0]
        guard pv_pipe2_cloexec(&fds) == 0 else { privacy.restoreNow(plan); return }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setflags(&attr, pv_posix_spawn_setsid())
        var argv = ["photovault", command, String(delay), RuntimeRegistry.canonical(settings.mountpoint)]
        if let g = settings.givenMountpoint { argv.append(g) }
        let cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for p in cargs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, cargs, Glibc.environ)
        close(fds[0])
        guard rc == 0 else {
            close(fds[1])
            log("desktop privacy: cannot start the sweep (\(String(cString: strerror(rc)))); restoring the thumbnail cache now")
            privacy.restoreNow(plan)
            return
        }
        let bytes = plan.encoded
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress! + done, bytes.count - done) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            done += n
        }
        close(fds[1])
        log("desktop privacy: sweep in \(Int(delay)) s (pid \(pid))")
    }

    /// Entry of the sweep process.
    static func childMain(_ arguments: [String]) -> Never {
        _ = chdir("/")
        guard arguments.count >= 2, let delay = Double(arguments[0]) else { exit(2) }
        let mountpoint = arguments[1]
        let given = arguments.count > 2 ? arguments[2] : nil
        var input: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(0, &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            input += buf[0..<n]
        }
        close(0)
        let plan = DesktopPrivacy.SweepPlan(decoding: input)
        let log = Logger.syslog()
        guard let privacy = DesktopPrivacy(mountpoint: mountpoint, given: given, thumbnails: plan.thumbnails,
                                           probe: probe, log: log) else { exit(0) }
        var left = delay
        while left > 0 { left = Double(sleep(UInt32(left.rounded(.up)))) }
        privacy.sweep(plan)
        exit(0)
    }
}
