import Glibc

/// The running kernel's release, for behaviour that changed between versions.
struct KernelRelease: Comparable, Sendable {
    let major: Int
    let minor: Int

    /// Parses "6.18.44-fc-v1147" and the like; nil if `release` does not start with N.N.
    init?(_ release: String) {
        let parts = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        guard parts.count == 2, release.first?.isNumber == true else { return nil }
        major = parts[0]
        minor = parts[1]
    }

    init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    static let running: KernelRelease? = {
        var u = utsname()
        guard uname(&u) == 0 else { return nil }
        let release = withUnsafeBytes(of: &u.release) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
        return KernelRelease(release)
    }()

    /// Linux 6.6 ("fuse: invalidate page cache pages before direct write") drops other
    /// handles' cached pages of the range a FOPEN_DIRECT_IO write covers. Before it, a
    /// mapping of the file could keep showing the old bytes, so write-only handles keep the
    /// page cache there (`MountOptions.directWrites`).
    static let directWritesKeepCachesCoherent: Bool = {
        guard let r = running else { return false }
        return r >= KernelRelease(major: 6, minor: 6)
    }()

    static func < (a: KernelRelease, b: KernelRelease) -> Bool {
        (a.major, a.minor) < (b.major, b.minor)
    }
}
