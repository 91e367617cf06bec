import Foundation
import NIOCore

/// The files of `Sources/HaulDaemon/Assets` (the dashboard and the OpenAPI document),
/// carried inside the binary: the EmbedAssets plugin writes ``base64`` at build time.
enum EmbeddedAssets {
    /// Each file's bytes, decoded once.
    static let files: [String: ByteBuffer] = base64.compactMapValues { text in
        Data(base64Encoded: text).map { ByteBuffer(bytes: $0) }
    }

    /// The file called `name`, with the media type its extension says.
    static func file(_ name: String) -> (body: ByteBuffer, contentType: String)? {
        guard let body = files[name] else { return nil }
        let type =
            switch name.split(separator: ".").last {
            case "html": "text/html; charset=utf-8"
            case "css": "text/css; charset=utf-8"
            case "js": "text/javascript; charset=utf-8"
            case "json": "application/json"
            case "svg": "image/svg+xml"
            case "png": "image/png"
            default: "application/octet-stream"
            }
        return (body, type)
    }
}
