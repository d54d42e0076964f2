import Foundation

/// Parses "90s", "15m", "1h", "2h30m", "1h5m10s" or a plain number of seconds ("45", "1.5").
/// Returns seconds, or nil for junk, an empty string, repeated or out-of-order units, or a total <= 0.
public func parseDuration(_ s: String) -> Double? {
    let text = s.trimmingCharacters(in: .whitespaces).lowercased()
    if text.isEmpty { return nil }
    if let plain = Double(text) {
        return plain.isFinite && plain > 0 ? plain : nil
    }
    // Units must appear in decreasing order, each at most once, so "30m2h" and "1h1h" are junk.
    let units: [(Character, Double)] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)]
    var total = 0.0
    var number = ""
    var nextUnitIndex = 0
    for ch in text {
        if ch.isASCII && (ch.isNumber || ch == ".") {
            number.append(ch)
            continue
        }
        guard let idx = units.firstIndex(where: { $0.0 == ch }), idx >= nextUnitIndex,
              let value = Double(number), value.isFinite, value >= 0 else { return nil }
        total += value * units[idx].1
        nextUnitIndex = idx + 1
        number = ""
    }
    guard number.isEmpty, total.isFinite, total > 0 else { return nil }
    return total
}
