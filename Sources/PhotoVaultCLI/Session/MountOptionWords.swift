import PhotoVaultSession

extension ParsedArguments {
    /// `photovault mount -o ro,idle=10m` (the habit gocryptfs and sshfs users bring, and what
    /// mount(8) passes): the `-o` words turned into the options they stand for, through the
    /// table of the mount(8) form (`MountHelperForm`), and merged with those given directly.
    /// An option given both ways (`--idle 5m -o idle=10m`) is a usage error, as a repeat is.
    func mergingMountOptionWords() throws -> ParsedArguments {
        let texts = allValues("options")
        guard !texts.isEmpty else { return self }
        let long = try MountHelperForm.longOptions(for: texts.flatMap { MountHelperForm.split($0) })
        guard case .run(_, let extra) = try ArgumentParser().parse(command + long) else { return self }
        var values = self.values
        values["options"] = nil
        for (key, v) in extra.values {
            if values[key] != nil { throw usageError("option '--\(key)' given both directly and in -o") }
            values[key] = v
        }
        var flags = self.flags
        for f in extra.flags where flags.contains(f) {
            throw usageError("option '--\(f)' given both directly and in -o")
        }
        flags.formUnion(extra.flags)
        return ParsedArguments(command: command, positionals: positionals, arguments: arguments, values: values, flags: flags)
    }
}
