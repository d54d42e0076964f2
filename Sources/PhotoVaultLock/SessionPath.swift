/// logind's object path prefix for sessions.
public let logindSessionPathPrefix = "/org/freedesktop/login1/session"

/// The object path logind uses for session `id`, escaped like `sd_bus_path_encode` /
/// `bus_label_escape`: ASCII letters stay, digits stay except in the first position,
/// every other byte becomes `_xx` (lower-case hex). An empty id becomes `_`.
/// Examples: "1" -> ".../_31", "c2" -> ".../c2", "12" -> ".../_312".
public func logindSessionPath(forID id: String) -> String {
    return logindSessionPathPrefix + "/" + busLabelEscape(id)
}

func busLabelEscape(_ label: String) -> String {
    if label.isEmpty { return "_" }
    var out = ""
    for (index, byte) in label.utf8.enumerated() {
        let isLetter = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
        let isDigit = byte >= 0x30 && byte <= 0x39
        if isLetter || (isDigit && index > 0) {
            out.unicodeScalars.append(Unicode.Scalar(byte))
        } else {
            let hex = "0123456789abcdef".utf8.map { Character(Unicode.Scalar($0)) }
            out.append("_")
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xF)])
        }
    }
    return out
}
