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

    /// Creates the directory `path` (and its missing parents) private to its owner (0700)
    /// unless it exists; an existing directory is left as it is.
    /// - Throws: ``HaulError/Code/fileSystem`` in a sentence: something other than a
    ///   directory is there (or on the way there), or the directory cannot be created.
    public static func createDirectory(_ path: String, role: String = "The Haul home") throws {
        if let (component, reason) = makeDirectory(path) {
            let what = component == path ? "\(role) \(path)" : "\(role) \(path) cannot be created: \(component)"
            throw HaulError(
                .fileSystem,
                "\(what) \(reason)",
                path: path,
                hint: "Point HAUL_HOME at a directory you can write, or move what is in the way"
            )
        }
    }

    /// Makes `path` and its missing parents; the component that failed and why, or nil.
    private static func makeDirectory(_ path: String) -> (String, String)? {
        var info = stat()
        if stat(path, &info) == 0 {
            return info.st_mode & S_IFMT == S_IFDIR ? nil : (path, "is not a directory")
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path, parent != "/", let failure = makeDirectory(parent) { return failure }
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else {
            return (path, "cannot be made: \(String(cString: strerror(errno)).lowercased())")
        }
        return nil
    }
}
