/// What an offline import or export reports while it runs. Paths are destination paths:
/// vault paths (`/2024/a.jpg`) for import, local paths for export.
public enum ProgressEvent: Equatable, Sendable {
    /// A directory was created or entered (merged).
    case directory(String)
    /// A regular file is about to be copied; `size` is nil when unknown (stdin).
    case fileStarted(String, size: UInt64?)
    /// The file about to be copied replaces one of that name (`force`), which stays as it was
    /// until the new copy is complete and renamed over it. Sent just before `fileStarted`.
    case replacing(String)
    /// Bytes of the current file copied so far (once per block).
    case fileProgress(String, done: UInt64)
    /// A regular file is complete and in place under its final name.
    case file(String, bytes: UInt64)
    case symlink(String)
    /// Not copied because the destination already holds it: a regular file of the same size
    /// and modification time, or a symlink with the same target (a rerun of an interrupted
    /// import or export continues where it stopped). Only without `force`.
    case unchanged(String)
    /// Not copied, with why (a FIFO, socket or device; an entry whose name does not decrypt).
    case skipped(String, reason: String)
}

/// Totals of one import or export.
public struct TransferSummary: Equatable, Sendable {
    public var files = 0
    public var directories = 0
    public var symlinks = 0
    /// Plaintext bytes of regular files.
    public var bytes: UInt64 = 0
    /// Paths reported as `.skipped`.
    public var skipped: [String] = []
    /// Files and symlinks already in place (`.unchanged`), left as they were.
    public var unchanged = 0

    public init() {}
}
