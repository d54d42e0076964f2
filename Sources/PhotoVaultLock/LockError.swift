/// Errors of the lock layer. D-Bus failures carry the errno (positive) and sd-bus error text.
public enum LockError: Error, Equatable, CustomStringConvertible {
    case busConnect(bus: String, errno: Int32)
    case busCall(method: String, name: String, message: String)
    case badMessage(String)
    case system(call: String, errno: Int32)
    case insecureDirectory(String)
    case socketInUse(String)
    case untrustedPeer(path: String, uid: uid_t)
    case pathTooLong(String)
    case protocolError(String)
    case timedOut
    case peerClosed

    public var description: String {
        switch self {
        case .busConnect(let bus, let e): return "cannot connect to the \(bus) bus: \(errnoText(e))"
        case .busCall(let method, let name, let message): return "\(method) failed: \(name): \(message)"
        case .badMessage(let what): return "unexpected D-Bus message: \(what)"
        case .system(let call, let e): return "\(call): \(errnoText(e))"
        case .insecureDirectory(let p): return "control socket directory \(p) must be a directory owned by us with mode 0700"
        case .socketInUse(let p): return "another photovault already listens on \(p)"
        case .untrustedPeer(let p, let uid):
            return "\(p) is served by uid \(uid), not by this user: refusing to talk to it"
        case .pathTooLong(let p): return "socket path too long: \(p)"
        case .protocolError(let what): return "control protocol error: \(what)"
        case .timedOut: return "timed out"
        case .peerClosed: return "connection closed by peer"
        }
    }
}

import Glibc

func errnoText(_ e: Int32) -> String {
    return String(cString: strerror(e))
}
