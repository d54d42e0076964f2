/// `photovault mount` and `unmount`; the work is in `Mount/MountFlow.swift`.
enum MountCommands {
    static func mount(_ args: ParsedArguments) throws -> Int32 { try MountFlow.mount(args) }
    static func unmount(_ args: ParsedArguments) throws -> Int32 { try MountFlow.unmount(args) }
}
