import Foundation
import Haul
import HaulTesting

/// Documents and hashes that tests of several targets build: a Metalink 4 around its
/// `<file>` elements, and the piece hashes of some bytes.
package enum Fixtures {
    /// The length of the pieces ``pieceHashes(of:length:)`` cuts by default: 256 KiB.
    package static let pieceLength = 256 << 10

    /// A Metalink 4 document with these `<file>` elements.
    package static func metalink4(_ files: String) -> Data {
        Data(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <published>2026-11-24T00:00:00Z</published>
            \(files)
            </metalink>
            """.utf8
        )
    }

    /// The SHA-256 of every piece of `bytes`.
    package static func pieceHashes(of bytes: [UInt8], length: Int = pieceLength) throws -> PieceHashes {
        let hexes = stride(from: 0, to: bytes.count, by: length).map {
            TestContent.sha256(bytes[$0..<min($0 + length, bytes.count)])
        }
        return try PieceHashes(algorithm: .sha256, length: Int64(length), hexDigests: hexes)
    }

    /// The first and last byte a request's `Range` header asks for (`bytes=F-L` or `bytes=F-`).
    package static func range(_ request: TestServer.RecordedRequest) -> (first: Int, last: Int?)? {
        guard let value = request.header("Range"), value.hasPrefix("bytes=") else { return nil }
        let parts = value.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let first = Int(parts[0]) else { return nil }
        return (first, parts[1].isEmpty ? nil : Int(parts[1]))
    }

    /// Runs `tool` with `arguments`, its output dropped; returns its exit status.
    package static func run(_ tool: String, _ arguments: [String]) async throws -> Int32 {
        let process = try ChildProcess(tool, arguments: arguments, standardOutput: .null, standardError: .null)
        return await process.exited().status
    }
}
