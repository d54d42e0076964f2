import CSystemd
import Glibc

/// D-Bus type codes as the C `char` sd-bus expects (the SD_BUS_TYPE_* constants import as Int).
enum BusType {
    static let boolean = CChar(UInt8(ascii: "b"))
    static let string = CChar(UInt8(ascii: "s"))
    static let objectPath = CChar(UInt8(ascii: "o"))
    static let uint32 = CChar(UInt8(ascii: "u"))
    static let unixFD = CChar(UInt8(ascii: "h"))
    static let array = CChar(UInt8(ascii: "a"))
    static let dictEntry = CChar(UInt8(ascii: "e"))
    static let variant = CChar(UInt8(ascii: "v"))
}

/// One argument of an outgoing method call.
enum BusArgument {
    case string(String)
    case uint32(UInt32)
}

/// A private sd-bus connection. sd-bus is not thread-safe: an instance is created, used and
/// closed on one thread only (README pitfall 16), so this type is deliberately not Sendable.
final class SDBus {
    let raw: OpaquePointer

    /// Opens a bus client. `address` nil means the sd-bus default for that bus, which honours
    /// DBUS_SYSTEM_BUS_ADDRESS / DBUS_SESSION_BUS_ADDRESS. We avoid sd_bus_default*, which hands
    /// out a per-thread shared object.
    init(address: String?, system: Bool) throws {
        var bus: OpaquePointer?
        var r: Int32
        let name = system ? "system" : "session"
        if let address {
            r = sd_bus_new(&bus)
            guard r >= 0, let b = bus else { throw LockError.busConnect(bus: name, errno: -r) }
            r = sd_bus_set_address(b, address)
            if r >= 0 { r = sd_bus_set_bus_client(b, 1) }
            if r >= 0 { r = sd_bus_start(b) }
            if r < 0 {
                sd_bus_unref(b)
                throw LockError.busConnect(bus: name, errno: -r)
            }
        } else {
            r = system ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus)
            guard r >= 0, bus != nil else { throw LockError.busConnect(bus: name, errno: -r) }
        }
        raw = bus!
    }

    deinit {
        sd_bus_flush_close_unref(raw)
    }

    /// Installs a match rule. sd_bus_add_match is synchronous: the rule is active on return,
    /// so signals sent afterwards are delivered (README pitfall 13). The slot is floating and
    /// lives as long as the connection.
    func addMatch(_ rule: String, callback: sd_bus_message_handler_t, userdata: UnsafeMutableRawPointer?) throws {
        let r = sd_bus_add_match(raw, nil, rule, callback, userdata)
        if r < 0 { throw LockError.busCall(method: "AddMatch(\(rule))", name: "errno", message: errnoText(-r)) }
    }

    /// Synchronous method call. The caller owns the reply (use `BusMessage`).
    /// `autoStart` false: a name nobody owns fails at once (NameHasNoOwner) instead of having
    /// the bus start its service.
    func call(destination: String, path: String, interface: String, member: String,
              arguments: [BusArgument], timeoutMicroseconds: UInt64 = 2_000_000, autoStart: Bool = true) throws -> BusMessage {
        var message: OpaquePointer?
        var r = sd_bus_message_new_method_call(raw, &message, destination, path, interface, member)
        guard r >= 0, let m = message else {
            throw LockError.busCall(method: member, name: "errno", message: errnoText(-r))
        }
        defer { sd_bus_message_unref(m) }
        if !autoStart { _ = sd_bus_message_set_auto_start(m, 0) }
        for argument in arguments {
            switch argument {
            case .string(let s):
                r = s.withCString { sd_bus_message_append_basic(m, BusType.string, $0) }
            case .uint32(var u):
                r = sd_bus_message_append_basic(m, BusType.uint32, &u)
            }
            if r < 0 { throw LockError.busCall(method: member, name: "errno", message: errnoText(-r)) }
        }
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        var reply: OpaquePointer?
        r = sd_bus_call(raw, m, timeoutMicroseconds, &error, &reply)
        guard r >= 0, let rep = reply else {
            let name = error.name.map { String(cString: $0) } ?? "errno"
            let text = error.message.map { String(cString: $0) } ?? errnoText(-r)
            throw LockError.busCall(method: member, name: name, message: text)
        }
        return BusMessage(owning: rep)
    }
}

/// Owns a reference to an sd_bus_message (or borrows one inside a callback) and reads it with
/// the non-variadic sd-bus readers only.
struct BusMessage {
    let raw: OpaquePointer
    private let owner: MessageOwner?

    /// Takes ownership of one reference (a method reply).
    init(owning raw: OpaquePointer) {
        self.raw = raw
        self.owner = MessageOwner(raw)
    }

    /// Borrows a message that sd-bus owns for the duration of a callback.
    init(borrowing raw: OpaquePointer) {
        self.raw = raw
        self.owner = nil
    }

    var path: String? { sd_bus_message_get_path(raw).map { String(cString: $0) } }
    var interface: String? { sd_bus_message_get_interface(raw).map { String(cString: $0) } }
    var member: String? { sd_bus_message_get_member(raw).map { String(cString: $0) } }

    /// Reads a `b`. D-Bus booleans are read into a C int, not a bool (README pitfall 9).
    func readBool() throws -> Bool {
        var value: Int32 = 0
        let r = sd_bus_message_read_basic(raw, BusType.boolean, &value)
        guard r > 0 else { throw LockError.badMessage("expected boolean (\(r))") }
        return value != 0
    }

    /// Reads an `s` or `o`; the C string is borrowed from the message, so it is copied.
    func readString(type: CChar = BusType.string) throws -> String {
        var value: UnsafePointer<CChar>?
        let r = sd_bus_message_read_basic(raw, type, &value)
        guard r > 0, let value else { throw LockError.badMessage("expected string (\(r))") }
        return String(cString: value)
    }

    /// Reads an `h` and returns a private duplicate: the message's fd closes with the message.
    func readDuplicatedFD() throws -> Int32 {
        var fd: Int32 = -1
        let r = sd_bus_message_read_basic(raw, BusType.unixFD, &fd)
        guard r > 0, fd >= 0 else { throw LockError.badMessage("expected unix fd (\(r))") }
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 3)
        guard copy >= 0 else { throw LockError.system(call: "fcntl(F_DUPFD_CLOEXEC)", errno: errno) }
        return copy
    }

    /// Reads a variant that must hold a boolean (the reply of Properties.Get).
    func readVariantBool() throws -> Bool {
        guard sd_bus_message_enter_container(raw, BusType.variant, "b") > 0 else {
            throw LockError.badMessage("expected variant<b>")
        }
        let value = try readBool()
        _ = sd_bus_message_exit_container(raw)
        return value
    }

    /// Reads the body of PropertiesChanged(s interface, a{sv} changed, as invalidated) and
    /// returns (value of `name` if present in `changed`, whether `name` was invalidated).
    func readPropertiesChanged(boolProperty name: String) throws -> (interface: String, value: Bool?, invalidated: Bool) {
        let iface = try readString()
        var found: Bool?
        guard sd_bus_message_enter_container(raw, BusType.array, "{sv}") > 0 else {
            throw LockError.badMessage("expected a{sv}")
        }
        while sd_bus_message_enter_container(raw, BusType.dictEntry, "sv") > 0 {
            let key = try readString()
            if key == name, variantContents() == "b" {
                found = try readVariantBool()
            } else if sd_bus_message_skip(raw, "v") < 0 {
                throw LockError.badMessage("cannot skip variant")
            }
            _ = sd_bus_message_exit_container(raw)
        }
        _ = sd_bus_message_exit_container(raw)
        var invalidated = false
        if sd_bus_message_enter_container(raw, BusType.array, "s") > 0 {
            while let item = try? readString() {
                if item == name { invalidated = true }
            }
            _ = sd_bus_message_exit_container(raw)
        }
        return (iface, found, invalidated)
    }

    /// The signature inside the variant at the read position, e.g. "b".
    private func variantContents() -> String? {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        guard sd_bus_message_peek_type(raw, &type, &contents) > 0, type == BusType.variant,
              let contents else { return nil }
        return String(cString: contents)
    }
}

/// Drops the message reference when the last BusMessage copy goes away.
private final class MessageOwner {
    let raw: OpaquePointer
    init(_ raw: OpaquePointer) { self.raw = raw }
    deinit { sd_bus_message_unref(raw) }
}

/// CLOCK_MONOTONIC in microseconds, the clock of sd_bus_get_timeout.
func monotonicMicroseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1_000
}
