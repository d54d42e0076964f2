import Glibc
import PhotoVaultStore
import CLinux
import PhotoVaultCrypto

/// Identity backend: the backing tree is shown as is. It proves the adapter against a
/// tree whose expected contents are obvious, and it is what tests compare with.
final class PlainBackend: TreeBackend, @unchecked Sendable {
    final class Naming: DirectoryNaming, @unchecked Sendable {}
    private let naming = Naming()

    func naming(forDirectory fd: Int32) throws -> DirectoryNaming { naming }
    func backingName(_ plain: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> [UInt8] { plain }
    func prepareName(_ plain: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> [UInt8] { plain }
    func nameRemoved(_ backing: [UInt8], in dir: DirectoryNaming, dirFD: Int32) {}
    func plainName(_ backing: [UInt8], in dir: DirectoryNaming, dirFD: Int32) throws -> DecodedName { .visible(backing) }

    func makeDirectory(named backing: [UInt8], in parentFD: Int32, parent: DirectoryNaming, mode: mode_t) throws {
        guard Syscall.mkdirat(parentFD, backing, mode) == 0 else { throw FSError.last() }
    }

    func removeDirectory(named backing: [UInt8], in parentFD: Int32) throws {
        guard Syscall.unlinkat(parentFD, backing, AT_REMOVEDIR) == 0 else { throw FSError.last() }
    }

    func plaintextSize(backingSize: Int64) -> Int64 { backingSize }

    func openContent(fd: Int32, classForNewHeader cls: ProtectionClass?, rootFD: Int32) throws -> FileContent { PlainContent(fd: fd) }
    func createContent(fd: Int32, protectionClass cls: ProtectionClass?, rootFD: Int32) throws -> FileContent {
        PlainContent(fd: fd)
    }
    func companionsOfFile(_ fd: Int32, rootFD: Int32) -> [String] { [] }
    func mayHaveCompanionsOfFiles(rootFD: Int32) -> Bool { false }
    func fileRemoved(companions: [String], rootFD: Int32) {}
    func defaultClass(in dir: DirectoryNaming) -> ProtectionClass? { nil }
    func setDefaultClass(_ cls: ProtectionClass, in dir: DirectoryNaming, dirFD: Int32) throws { throw FSError.notSupported }
    func setProtectionClass(_ cls: ProtectionClass, of content: FileContent) throws { throw FSError.notSupported }
    func protectionClass(ofFile fd: Int32) throws -> ProtectionClass? { nil }

    func sealLinkTarget(_ plain: [UInt8], rootFD: Int32) throws -> [UInt8] { plain }
    func openLinkTarget(_ stored: [UInt8], rootFD: Int32) throws -> [UInt8] { stored }
    func linkTargetRemoved(_ stored: [UInt8], rootFD: Int32) {}

    func sealXattrName(_ plain: [UInt8]) throws -> [UInt8] { plain }
    func openXattrName(_ backing: [UInt8]) -> [UInt8]? { backing }
    func sealXattrValue(_ plain: [UInt8], name: [UInt8]) throws -> [UInt8] { plain }
    func openXattrValue(_ sealed: [UInt8], name: [UInt8]) throws -> [UInt8] { sealed }

    func canOpen(_ cls: ProtectionClass) -> Bool { true }
    func lock() {}
    func wipeAll() {}
}

/// Plain file content: pread/pwrite straight on the backing descriptor.
final class PlainContent: FileContent {
    let fd: Int32
    init(fd: Int32) { self.fd = fd }

    var protectionClass: ProtectionClass? { nil }

    func size() throws -> Int64 {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw FSError.last() }
        return Int64(st.st_size)
    }

    func read(into buffer: UnsafeMutableRawPointer, count: Int, offset: Int64) throws -> Int {
        var done = 0
        while done < count {
            let n = pread(fd, buffer + done, count - done, off_t(offset) + off_t(done))
            if n < 0 { if errno == EINTR { continue }; throw FSError.last() }
            if n == 0 { break }
            done += n
        }
        return done
    }

    func write(from buffer: UnsafeRawPointer, count: Int, offset: Int64) throws -> Int {
        try dropSetIDIfAsked()
        var done = 0
        while done < count {
            let n = pwrite(fd, buffer + done, count - done, off_t(offset) + off_t(done))
            if n < 0 { if errno == EINTR { continue }; throw FSError.last() }
            done += n
        }
        return done
    }

    func truncate(to size: Int64) throws {
        try dropSetIDIfAsked()
        guard ftruncate(fd, off_t(size)) == 0 else { throw FSError.last() }
    }

    /// The daemon writes with CAP_FSETID, so the backing file system keeps setuid/setgid
    /// bits that the caller's own write would drop: the request says so (`DeviceIO`).
    private func dropSetIDIfAsked() throws {
        guard DeviceIO.requestDropsSetID else { return }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw FSError.last() }
        try SetIDBits.drop(on: fd, st)
    }

    func allocate(offset: Int64, length: Int64, keepSize: Bool) throws {
        if keepSize {
            guard pv_reserve(fd, offset, length) == 0 else { throw FSError.last() }
        } else {
            let e = posix_fallocate(fd, off_t(offset), off_t(length))
            guard e == 0 else { throw FSError.posix(e) }
        }
    }

    func zeroRange(offset: Int64, length: Int64, keepSize: Bool) throws {
        let mode: Int32 = keepSize ? FALLOC_FL_PUNCH_HOLE_VALUE | FALLOC_FL_KEEP_SIZE_VALUE : FALLOC_FL_ZERO_RANGE_VALUE
        guard pv_fallocate(fd, mode, offset, length) == 0 else { throw FSError.last() }
    }

    func seek(from offset: Int64, data: Bool) throws -> Int64 {
        let r = Glibc.lseek(fd, off_t(offset), data ? SEEK_DATA_VALUE : SEEK_HOLE_VALUE)
        guard r >= 0 else { throw FSError.last() }
        return Int64(r)
    }

    func sync(dataOnly: Bool) throws {
        guard (dataOnly ? fdatasync(fd) : fsync(fd)) == 0 else { throw FSError.last() }
    }

    func wipeKey() {}
    func close() throws { Glibc.close(fd) }
}
