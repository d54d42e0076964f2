import Glibc
import PhotoVaultCrypto

/// The per-device secret that `--this-device-only` accounts mix into their key-encryption
/// keys (CREDENTIALS.md, "Device binding"): 32 random bytes in a 0600 file outside the
/// store, created on first use. A copy of the store alone cannot be opened for such
/// accounts, even with the password.
public enum DeviceSecret {
    public static let size = 32
    /// Names a *path* (never a secret); lets tests and admins point at another device secret.
    public static let pathVariable = "PHOTOVAULT_DEVICE_SECRET"
    public static let systemPath = "/var/lib/photovault/device-secret"

    /// `$PHOTOVAULT_DEVICE_SECRET` if set; else the system path for root, else
    /// `${XDG_CONFIG_HOME:-~/.config}/photovault/device-secret` (a relative XDG_CONFIG_HOME
    /// is ignored, as the XDG base-directory spec asks).
    public static func path() -> String {
        if let p = env(pathVariable) { return p }
        if geteuid() == 0 { return systemPath }
        let config = env("XDG_CONFIG_HOME").flatMap { $0.hasPrefix("/") ? $0 : nil } ?? StorePath.join(home(), ".config")
        return StorePath.join(StorePath.join(config, "photovault"), "device-secret")
    }

    /// Public, stable 16-byte ID of a device secret, stored in device-bound records so that
    /// "other device" can be told apart from "wrong password" (it reveals nothing about the
    /// secret: keyed BLAKE2b of a constant under the 256-bit secret).
    public static func id(of secret: SecureBytes) -> [UInt8] {
        let label = Array("PhotoVault device ID".utf8)
        return secret.withUnsafeBytes { k in
            label.withUnsafeBytes { KeyedHash.hash(key: k, parts: [$0], outputLength: 16) }
        }
    }

    /// KEK' = BLAKE2b-256(key = device secret, "PVdevice" || KEK).
    static func bind(_ kek: SecureBytes, to secret: SecureBytes) -> SecureBytes {
        let label = Array("PVdevice".utf8)
        return label.withUnsafeBytes { l in kek.withUnsafeBytes { KeyedHash.secret(key: secret, parts: [l, $0]) } }
    }

    /// Loads the secret at `path`; nil if the file does not exist.
    public static func load(at path: String) throws -> SecureBytes? {
        // O_NONBLOCK: a FIFO in its place is refused below instead of waited on for ever
        // (every device-bound add, open and reset hung); harmless on a regular file.
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw StoreError.posix("open device secret \(path)")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw StoreError.posix("fstat \(path)") }
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_size == size else {
            throw StoreError.io(errno: EINVAL, context: "device secret \(path) must be a regular file of exactly \(size) bytes")
        }
        // As ssh does for private keys: a secret others may read is refused, not used.
        guard st.st_uid == geteuid() || st.st_uid == 0 else {
            throw StoreError.io(errno: EACCES, context: "device secret \(path) belongs to uid \(st.st_uid), not to this user")
        }
        guard st.st_mode & 0o077 == 0 else {
            throw StoreError.io(errno: EACCES, context: "device secret \(path) is open to other users (mode "
                                + "\(String(st.st_mode & 0o777, radix: 8))); run 'chmod 600 \(path)' and treat it as exposed")
        }
        let secret = SecureBytes(count: size)
        let n = try secret.withUnsafeMutableBytes { try FileIO.readFully(fd, $0.baseAddress!, size, offset: 0) }
        guard n == size else { secret.wipe(); throw StoreError.io(errno: EIO, context: "device secret \(path) is short") }
        return secret
    }

    /// Loads the secret, creating it (and its directory, 0700) if absent. Crash-safe: the
    /// file appears under its name only once complete and synced (temp file + link), and if
    /// two processes race, both end up using the one that was linked first.
    public static func loadOrCreate(at path: String) throws -> SecureBytes {
        if let s = try load(at: path) { return s }
        let dir = StorePath.dirname(path)
        try AtomicFile.makeDirectories(dir)
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw StoreError.posix("open \(dir)") }
        defer { close(dfd) }
        let name = StorePath.basename(path)
        let tmp = AtomicFile.tempPrefix + Base64Hex.random(8)
        let fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.posix("create \(dir)/\(tmp)") }
        defer { unlinkat(dfd, tmp, 0) }
        let secret = SecureBytes(randomCount: size)
        do {
            try FileIO.writeAll(fd, UnsafeRawPointer(secret.unsafePointer), size, offset: 0)
            guard fsync(fd) == 0 else { throw StoreError.posix("fsync") }
            close(fd)
        } catch { close(fd); secret.wipe(); throw error }
        // link(2), or where there are no hard links (the secret on an exFAT drive) a rename
        // that refuses a taken name (NoReplace).
        if NoReplace.createIfAbsent(tmp: tmp, name: name, in: dfd) != 0 {
            secret.wipe()
            guard errno == EEXIST else { throw StoreError.posix("create \(path)") }
            // Another process created it first: use theirs.
            guard let theirs = try load(at: path) else { throw StoreError.posix("open device secret \(path)", ENOENT) }
            return theirs
        }
        do { try AtomicFile.syncDirectory(dfd, name) } catch { secret.wipe(); throw error }
        return secret
    }

    private static func env(_ name: String) -> String? {
        guard let v = getenv(name) else { return nil }
        let s = String(cString: v)
        return s.isEmpty ? nil : s
    }

    private static func home() -> String {
        if let h = env("HOME") { return h }
        if let pw = getpwuid(geteuid()), let d = pw.pointee.pw_dir { return String(cString: d) }
        return "/"
    }
}
