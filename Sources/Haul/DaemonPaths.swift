import Foundation

/// Where a daemon of one `HAUL_HOME` keeps its socket, lock, token and log.
public struct DaemonPaths: Sendable, Equatable {
    /// The home directory (0700).
    public var home: HaulHome

    public init(home: HaulHome) {
        self.home = home
    }

    /// The API's Unix socket (0600).
    public var socket: String { file("daemon.sock") }
    /// Held (flock) by the running daemon; holds its pid.
    public var lock: String { file("daemon.lock") }
    /// The token a TCP client must send (0600).
    public var token: String { file("daemon.token") }
    /// Where an auto-started daemon writes its log.
    public var log: String { file("daemon.log") }

    private func file(_ name: String) -> String { (home.path as NSString).appendingPathComponent(name) }
}
