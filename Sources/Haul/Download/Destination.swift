import Foundation

/// Where a download's finished file goes.
public struct Destination: Sendable, Hashable, Codable {
    /// The directory the file goes into.
    public var directory: String
    /// The file name, or nil to let the server's `Content-Disposition` or the URL choose it.
    public var fileName: String?

    /// Into exactly this file path.
    public static func file(_ path: String) -> Destination {
        let absolute = Destination.absolute(path)
        return Destination(
            directory: (absolute as NSString).deletingLastPathComponent,
            fileName: (absolute as NSString).lastPathComponent
        )
    }

    /// Into `relative` inside `directory` and never outside it: a name, or a relative path
    /// whose components are plain names (subdirectories allowed; `..`, `.` and absolute
    /// paths refused). For names from files and other programs, such as an input file's `out=`.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a name that would leave the directory.
    public static func file(_ relative: String, confinedTo directory: String) throws -> Destination {
        guard !relative.hasPrefix("/"),
            relative.split(separator: "/", omittingEmptySubsequences: false)
                .allSatisfy({ FileNaming.isPlainName(String($0)) })
        else {
            throw HaulError(
                .invalidArgument,
                "The name '\(relative)' would leave the download directory",
                hint: "Use a name or a relative path without '..' (the directory itself comes from -d)"
            )
        }
        return .file((Destination.absolute(directory) as NSString).appendingPathComponent(relative))
    }

    /// Into `directory`, already made absolute (``absolute(_:)``), named `fileName` (nil:
    /// chosen from the response or the URL).
    package init(directory: String, fileName: String?) {
        self.directory = directory
        self.fileName = fileName
    }

    /// Into this directory, under a name chosen from the response or the URL.
    public static func directory(_ path: String) -> Destination {
        Destination(directory: Destination.absolute(path), fileName: nil)
    }

    /// `path` made absolute (from the current directory, `~` expanded) without resolving
    /// symbolic links: a file written there by rename replaces the link, never its target.
    package static func absoluteKeepingLinks(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        return expanded.hasPrefix("/")
            ? expanded : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(expanded)
    }

    package static func absolute(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let full =
            expanded.hasPrefix("/")
            ? expanded : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(expanded)
        return (full as NSString).standardizingPath
    }
}
