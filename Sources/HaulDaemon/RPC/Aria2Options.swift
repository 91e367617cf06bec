import Foundation
import Haul
import HaulWire
import HaulWireMapping

/// aria2's options as Haul reads them: a download's (`dir`, `out`, `header`, limits,
/// `split`, `checksum`), sizes written aria2's way, and flags.
enum Aria2Options {
    typealias Failure = Aria2RPC.Failure

    /// The request aria2's options describe, from the options Haul has.
    /// - Parameter directory: where downloads go unless `dir` says.
    static func request(
        uris: [String],
        options: [String: JSONValue],
        directory defaultDirectory: String
    ) throws -> DownloadRequest {
        let url = try DownloadRequest.parseURL(uris[0])
        let directory = options["dir"]?.string ?? defaultDirectory
        guard directory.hasPrefix("/") else {
            throw Failure.failed("dir must be an absolute path: '\(directory.prefix(200))'")
        }
        var destination = Destination.directory(directory)
        if let out = options["out"]?.string, !out.isEmpty { destination.fileName = out }
        var request = DownloadRequest(url: url, destination: destination)
        request.mirrors = try uris.dropFirst().map { try DownloadRequest.parseURL($0) }
        request.tls = TaskRoutes.environmentTLS
        request.proxy = TaskRoutes.environmentProxy
        if let headers = options["header"] {
            let lines = headers.array?.compactMap(\.string) ?? headers.string.map { [$0] } ?? []
            request.headers = try lines.map { line in
                guard let colon = line.firstIndex(of: ":") else {
                    throw Failure.failed("header must be 'Name: value': '\(line.prefix(100))'")
                }
                return HTTPHeaderField(
                    name: String(line[..<colon]).trimmingCharacters(in: .whitespaces),
                    value: String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                )
            }
        }
        if let limit = options["max-download-limit"] {
            let bytes = try size(limit, option: "max-download-limit")
            request.rateLimit = bytes == 0 ? nil : bytes
        }
        if let split = options["split"] { request.connections = Int(try size(split, option: "split")) }
        if let perServer = options["max-connection-per-server"] {
            request.maxConnectionsPerServer = Int(try size(perServer, option: "max-connection-per-server"))
            if options["split"] == nil { request.connections = request.maxConnectionsPerServer }
        }
        if let checksum = options["checksum"]?.string { request.checksum = try Checksum(parsing: checksum) }
        return request
    }

    /// An option's number as aria2 writes it: digits, with `K` (1024) or `M` (1024 K) after.
    static func size(_ value: JSONValue, option: String) throws -> Int64 {
        let text = value.string ?? value.integer.map(String.init) ?? ""
        let multiplier: Int64
        var digits = Substring(text)
        switch text.last {
        case "K", "k":
            multiplier = 1 << 10
            digits = digits.dropLast()
        case "M", "m":
            multiplier = 1 << 20
            digits = digits.dropLast()
        default: multiplier = 1
        }
        guard let number = Int64(digits), number >= 0, number <= Int64.max / multiplier else {
            throw Failure.failed("\(option) must be a number of bytes (K and M allowed): '\(text.prefix(40))'")
        }
        return number * multiplier
    }

    static func flag(_ value: JSONValue?) -> Bool {
        switch value {
        case .bool(true)?: return true
        case .string(let text)?: return text == "true"
        default: return false
        }
    }
}
