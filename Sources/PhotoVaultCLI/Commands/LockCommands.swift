/// `photovault lock`, `unlock` and `status`, through the mount daemon's control socket.
enum LockCommands {
    static func lock(_ args: ParsedArguments) throws -> Int32 { try MountFlow.lock(args) }
    static func unlock(_ args: ParsedArguments) throws -> Int32 { try MountFlow.unlock(args) }
    static func status(_ args: ParsedArguments) throws -> Int32 { try MountFlow.status(args) }
}
