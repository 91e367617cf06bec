import Foundation
import Haul
import HaulWire
import HaulWireMapping

/// The `-i/--input-file` format: one file per line, its URL, then any mirrors of it
/// separated by tabs; indented `key=value` lines after it set options for it (`out=NAME`,
/// `checksum=sha256=HEX`); blank lines and `#` comments are skipped. The same shape as
/// aria2's input files.
///
/// ```
/// https://example.org/a.iso<TAB>https://mirror.example.net/a.iso
///   out=first.iso
///   checksum=sha256=9f86d0…
/// https://example.org/b.iso
/// ```
struct InputFile {
    struct Entry: Equatable {
        var url: String
        /// The other URLs of the same file, after tabs on its line.
        var mirrors: [String] = []
        var out: String?
        var checksum: String?
        var line: Int
    }

    var entries: [Entry] = []

    /// Parses `text`; `source` names it in errors.
    init(parsing text: String, source: String) throws {
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = index + 1
            let trimmed = raw.trimmingWhitespace()
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            if raw.first == " " || raw.first == "\t" {
                guard !entries.isEmpty else {
                    throw HaulError(.invalidArgument, "\(source):\(line): an option line before any URL")
                }
                guard let equals = trimmed.firstIndex(of: "=") else {
                    throw HaulError(.invalidArgument, "\(source):\(line): expected key=value, got '\(trimmed)'")
                }
                let key = trimmed[..<equals].lowercased()
                let value = String(trimmed[trimmed.index(after: equals)...])
                switch key {
                case "out": entries[entries.count - 1].out = value
                case "checksum": entries[entries.count - 1].checksum = value
                default:
                    throw HaulError(
                        .invalidArgument,
                        "\(source):\(line): unknown option '\(key)'",
                        hint: "Known options: out=NAME, checksum=ALG=HEX"
                    )
                }
            } else {
                let urls = trimmed.split(separator: "\t").map { $0.trimmingWhitespace() }
                    .filter { !$0.isEmpty }
                entries.append(Entry(url: urls[0], mirrors: Array(urls.dropFirst()), line: line))
            }
        }
    }

    /// Reads a file, or standard input for `-`.
    static func read(_ path: String) throws -> InputFile {
        let data: Data?
        if path == "-" {
            data = (try? FileHandle.standardInput.readToEnd()) ?? Data()
        } else {
            data = FileManager.default.contents(atPath: path)
        }
        guard let data else {
            throw HaulError(.fileSystem, "Cannot read the input file \(path)", path: path)
        }
        return try InputFile(parsing: String(decoding: data, as: UTF8.self), source: path == "-" ? "stdin" : path)
    }
}
