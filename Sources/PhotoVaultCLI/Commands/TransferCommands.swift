import Foundation
import PhotoVaultCrypto
import PhotoVaultStore

/// `photovault import` and `export`. When the same account's vault is mounted, files go
/// through the mount (the daemon stays the only writer); otherwise the store is used
/// directly under the tree lock (docs/OFFLINE.md).
enum TransferCommands {
    static func importFiles(_ args: ParsedArguments) throws -> Int32 {
        var all = args.positionals
        guard all.count >= 2, let dest = all.popLast() else { throw args.usageError("import needs SOURCE... DEST_DIR_IN_VAULT") }
        if all.contains("-") && args.flag("password-stdin") { throw args.usageError("'-' (stdin) cannot be used with --password-stdin") }
        var cls: ProtectionClass? = nil
        if let c = args.value("class") {
            guard let v = ProtectionClass(name: c) else { throw args.usageError("--class must be complete, complete-unless-open, until-first-auth or none") }
            cls = v
        }
        let vault = try OfflineAccess.open(args)
        let start = Date()
        let quiet = args.flag("quiet")
        let progress = Progress(verb: "imported", quiet: quiet)
        if let mp = try vault.writableMount() {
            let vp = try VaultPath(dest)
            var skipped = 0, unchanged = 0
            if all == ["-"] {
                _ = try MountRoute.stream(STDIN_FILENO, to: mp, dest: vp, class: cls, force: args.flag("force"))
            } else {
                guard !all.contains("-") else { throw StoreError.invalidArgument("'-' (standard input) must be the only source") }
                try refuseSelfCopy(all, treeRoot: vault.tree.root, mountpoint: mp)
                // Named as offline names them (the same line, the same exit status 26).
                skipped = try MountRoute.copy(all, to: mp, dest: vp, class: cls, force: args.flag("force"),
                                              unchanged: { _ in unchanged += 1 }) {
                    progress.event(.skipped($0, reason: Importer.unsupportedTypeReason))
                }
            }
            let more = OfflineAccess.unchangedNote(unchanged) + (skipped == 0 ? "" : "; \(skipped) skipped (named above)")
            if !quiet { FileHandle.standardError.write(Data("imported through the live mount at \(DisplayText.escape(mp))\(DisplayText.escape(more))\n".utf8)) }
            return skipped == 0 ? 0 : ExitCodes.partialTransfer
        }
        PartialFile.catchSignals()   // a Ctrl-C leaves no half-written file behind
        if progress.tty && !quiet { progress.expected = TransferSize.local(all) }
        let summary: TransferSummary
        do {
            summary = try vault.writing {
                try Importer(tree: vault.tree).import(sources: all, into: dest, class: cls, force: args.flag("force"),
                                                      progress: progress.event)
            }
        } catch { throw progress.stopped(by: error) }
        progress.finish(summary, seconds: Date().timeIntervalSince(start))
        return summary.skipped.isEmpty ? 0 : ExitCodes.partialTransfer
    }

    /// Through the mount, `cp -R` cannot skip the vault's own ciphertext or its mountpoint,
    /// which grow while they are read: a source that holds either, or lies in the tree, is refused.
    static func refuseSelfCopy(_ sources: [String], treeRoot: String, mountpoint: String) throws {
        let tree = RealPath.of(treeRoot), mount = RealPath.of(mountpoint)
        for source in sources {
            guard let s = RealPath.of(source) else { continue }
            let prefix = s == "/" ? "/" : s + "/"
            let holds = { (g: String?) in g.map { $0 == s || $0.hasPrefix(prefix) } ?? false }
            if holds(tree) || holds(mount) || tree.map({ s.hasPrefix($0 + "/") }) == true {
                throw StoreError.invalidArgument("\(source) holds or is inside this vault (its mount or its encrypted "
                                                 + "tree); import its other contents")
            }
        }
    }

    /// Export writes plaintext: never into the store, where it would lie unencrypted beside
    /// the ciphertext, nor into this vault's own mount, which it reads (it would copy its
    /// copies until it ran out of descriptors). DEST need not exist yet.
    static func refuseExportInside(_ dest: String, store: String, mountpoint: String?) throws {
        guard let d = resolvedPath(dest) else { return }
        let places = [(RealPath.of(store), "the store"), (mountpoint.flatMap(RealPath.of), "this vault's mount")]
        for case let (root?, what) in places where d == root || d.hasPrefix(root == "/" ? "/" : root + "/") {
            throw StoreError.invalidArgument("\(dest) is inside \(what) (\(root)), and export writes plaintext; "
                                             + "export to a directory outside it")
        }
    }

    /// `path` with its longest existing prefix resolved (realpath) and the rest, which does
    /// not exist yet, appended as `mkdir -p` would create it (`..` there is lexical).
    static func resolvedPath(_ path: String) -> String? {
        var head = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var tail: [String] = []
        while true {
            if let r = RealPath.of(head) {
                var parts = r.split(separator: "/").map(String.init)
                for c in tail where c != "." && !c.isEmpty {
                    if c == ".." { _ = parts.popLast() } else { parts.append(c) }
                }
                return "/" + parts.joined(separator: "/")
            }
            let parent = (head as NSString).deletingLastPathComponent
            guard parent != head, !parent.isEmpty else { return nil }
            tail.insert((head as NSString).lastPathComponent, at: 0)
            head = parent
        }
    }

    static func exportFiles(_ args: ParsedArguments) throws -> Int32 {
        var all = args.positionals
        guard all.count >= 2, let dest = all.popLast() else { throw args.usageError("export needs PATH_IN_VAULT... DEST") }
        let vault = try OfflineAccess.open(args)
        // Another session's mount of this vault too: export read the tree while writing its
        // copies into it, nesting DEST in itself until it ran out of descriptors.
        if dest != "-" { try refuseExportInside(dest, store: args.storePath, mountpoint: vault.anyMountpoint) }
        let tree = vault.tree
        let start = Date()
        // Standard output is the data: no progress bar beside it, and no summary unless asked.
        let progress = Progress(verb: "exported", quiet: args.flag("quiet") || (dest == "-" && !args.flag("summary")),
                                bar: dest != "-")
        PartialFile.catchSignals()
        if progress.tty && !progress.quiet { progress.expected = TransferSize.vault(tree, all) }
        let summary: TransferSummary
        // As import: an error while a file was written names it (removed) and what stays.
        // Not to standard output, where what was written is gone already.
        do { summary = try Exporter(tree: tree).export(paths: all, to: dest, force: args.flag("force"), progress: progress.event) }
        catch { throw dest == "-" ? error : progress.stopped(by: error) }
        progress.finish(summary, seconds: Date().timeIntervalSince(start))
        return summary.skipped.isEmpty ? 0 : ExitCodes.partialTransfer
    }

    /// A progress bar on a terminal (files, bytes, rate), one summary line otherwise. Every
    /// skipped entry gets a line of its own, and the summary counts them (exit status 26).
    /// `quiet` (`--quiet`, or `export -` without `--summary`): neither bar nor summary; the
    /// skipped entries and errors are still said.
    final class Progress {
        let verb: String
        let tty: Bool
        let quiet: Bool
        var files = 0
        var bytes: UInt64 = 0
        let start = Date()
        init(verb: String, quiet: Bool = false, bar: Bool = true) {
            self.verb = verb
            self.quiet = quiet
            tty = bar && isatty(2) == 1
        }

        var barShown = false
        /// The file being copied (started, not yet in place under its name).
        var current: String?

        /// The file being replaced (force), if the current file replaces one.
        var replacing: String?

        func event(_ e: ProgressEvent) {
            if case .replacing(let path) = e { replacing = path }
            if case .fileStarted(let path, _) = e { current = path; if replacing != path { replacing = nil } }
            if case .file = e { current = nil; replacing = nil }
            switch e {
            case .fileStarted, .file(_, _), .unchanged: updateInterruptNote(e)
            default: break
            }
            if case .skipped(let path, let reason) = e {
                let line = (barShown ? "\n" : "") + DisplayText.escape("photovault: skipped \(path): \(reason)") + "\n"
                barShown = false
                FileHandle.standardError.write(Data(line.utf8))
                return
            }
            switch e {
            case .file(_, let b): files += 1; bytes += UInt64(b); currentDone = 0; draw(force: true)
            case .fileProgress(_, let done): currentDone = done; draw(force: false)
            case .fileStarted: currentDone = 0
            default: break
            }
        }

        /// Bytes of the file being copied so far (`fileProgress`).
        var currentDone: UInt64 = 0
        /// Plaintext bytes the whole run is expected to copy, when known (`TransferSize`).
        var expected: UInt64?
        var lastDraw = 0.0
        var lastWidth = 0

        /// The progress line, on a terminal only: bytes as they go (it counted whole files and
        /// stood still during a large one), the rate, and with `expected` the share done and an
        /// estimate of the time left, as rsync's --info=progress2 shows them. At most five
        /// times a second, besides the redraw after each file.
        func draw(force: Bool) {
            guard tty, !quiet else { return }
            let now = Date().timeIntervalSince(start)
            guard force || now - lastDraw >= 0.2 else { return }
            lastDraw = now
            let done = bytes + currentDone
            let rate = now > 0 ? Double(done) / now : 0
            var line = Progress.size(done)
            if let total = expected, total > 0 {
                let shown = max(total, done)
                line += " of \(Progress.size(shown)) (\(min(100, done * 100 / shown))%)"
            }
            line += ", \(Progress.size(UInt64(rate)))/s"
            if let total = expected, rate > 0, total > done {
                line += ", \(Progress.duration(Double(total - done) / rate)) left"
            }
            line += ", " + OfflineAccess.count(files, "file")
            // Spaces over what a longer line before left on the terminal.
            let pad = max(0, lastWidth - line.count)
            lastWidth = line.count
            FileHandle.standardError.write(Data(("\r" + line + String(repeating: " ", count: pad)).utf8))
            barShown = true
        }

        /// "512 B", "3.4 MiB", "1.20 GiB".
        static func size(_ n: UInt64) -> String {
            if n < 1024 { return "\(n) B" }
            if n < 1 << 30 { return String(format: "%.1f MiB", Double(n) / 1_048_576) }
            return String(format: "%.2f GiB", Double(n) / 1_073_741_824)
        }

        /// "0:07", "12:30", "1:02:03".
        static func duration(_ seconds: Double) -> String {
            let s = Int(seconds.rounded(.up))
            return s >= 3600 ? String(format: "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60)
                             : String(format: "%d:%02d", s / 60, s % 60)
        }

        var unchanged = 0

        /// What a Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT) now says before it ends the command
        /// (`InterruptNote`): which file it stopped in (not kept), what stays, and that a rerun
        /// continues (files already in place are skipped).
        func updateInterruptNote(_ e: ProgressEvent) {
            if case .unchanged = e { unchanged += 1 }
            // Counted here: `files` is counted after this event's other uses below.
            let done = files + (e.isFileDone ? 1 : 0)
            let kept = OfflineAccess.count(done, "file") + " \(verb) before it"
                + (unchanged == 0 ? "" : " (and \(unchanged) already in place)") + (done == 1 ? " stays" : " stay")
            let at = current.map { " while copying \($0), which was not kept" } ?? ""
            InterruptNote.set((tty && !quiet ? "\n" : "") + "photovault: interrupted\(at); \(kept): run the same command "
                              + "again to continue (what is already in place is skipped)\n")
        }

        /// A run that failed while it wrote a file: its error, its line saying which file
        /// that was (removed) and what stays (the files completed before it). Other errors
        /// (an existing entry, a directory that cannot be made) name their entry already and
        /// are as they are through a live mount. Export names the local file it was writing.
        func stopped(by error: Error) -> Error {
            guard let current else { return error }
            if barShown { FileHandle.standardError.write(Data("\n".utf8)) }
            barShown = false
            let done = "\(files) file\(files == 1 ? "" : "s") \(verb) before it stay\(files == 1 ? "s" : "")"
            // With --force, "which was not kept" read as if the file already there were gone.
            let what = replacing == current ? "whose new copy was not kept (the one that was there stays as it was)"
                                            : "which was not kept"
            return TransferFailure(underlying: error, note: "stopped at \(current), \(what); " + done)
        }

        func finish(_ s: TransferSummary, seconds: Double) {
            if barShown { FileHandle.standardError.write(Data("\n".utf8)) }
            guard !quiet else { return }
            let skipped = s.skipped.isEmpty ? "" : "; \(s.skipped.count) skipped (named above)"
            FileHandle.standardError.write(Data((DisplayText.escape(OfflineAccess.progressLine(s, verb: verb, seconds: seconds) + skipped) + "\n").utf8))
        }
    }
}

/// A transfer that failed partway: the error's own line, with where the run stopped and
/// what it left, and the error's exit status.
struct TransferFailure: Error {
    let underlying: Error
    let note: String
}

extension ProgressEvent {
    /// A regular file completed and in place.
    var isFileDone: Bool { if case .file = self { return true } else { return false } }
}
