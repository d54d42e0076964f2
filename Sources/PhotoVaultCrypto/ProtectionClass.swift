/// iOS Data Protection classes, per file. Raw values are the on-disk encoding (FORMAT.md).
public enum ProtectionClass: UInt8, CaseIterable, Sendable, CustomStringConvertible {
    /// Key forgotten at lock: no access while locked, open handles included.
    case complete = 1
    /// Open handles survive a lock; new files can be created (sealed to a public key); no re-open.
    case completeUnlessOpen = 2
    /// Available from first unlock until unmount.
    case untilFirstAuth = 3
    /// Available until unmount; no lock restriction at all.
    case none = 4

    public var name: String {
        switch self {
        case .complete: return "complete"
        case .completeUnlessOpen: return "complete-unless-open"
        case .untilFirstAuth: return "until-first-auth"
        case .none: return "none"
        }
    }

    public var description: String { name }

    public init?(name: String) {
        guard let c = ProtectionClass.allCases.first(where: { $0.name == name }) else { return nil }
        self = c
    }

    public static let `default`: ProtectionClass = .complete
}
