import Foundation

/// Where Haul keeps its state: `$HAUL_HOME`, else `$XDG_DATA_HOME/haul`, else
/// `~/.local/share/haul`.
public struct HaulHome: Sendable, Equatable {
    /// The directory.
    public var path: String

    public init(path: String) {
        self.path = path
    }

    /// The SQLite store inside it.
    public var storePath: String { (path as NSString).appendingPathComponent("haul.sqlite") }

    /// Resolves the home from the environment.
    public static func resolve(environment: [String: String] = ProcessInfo.processInfo.environment) -> HaulHome {
        if let home = environment["HAUL_HOME"], !home.isEmpty { return HaulHome(path: home) }
        if let data = environment["XDG_DATA_HOME"], !data.isEmpty {
            return HaulHome(path: (data as NSString).appendingPathComponent("haul"))
        }
        let user = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return HaulHome(path: (user as NSString).appendingPathComponent(".local/share/haul"))
    }
}
