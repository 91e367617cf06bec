import Foundation
import NIOHTTP1

/// A digest of the whole file that a server sent with its answer, which the finished file
/// must match as it must match a `--checksum`.
///
/// What each header describes decides when it can be used:
/// - `Repr-Digest` (RFC 9530) and `Digest` (RFC 3230, an instance digest) describe the
///   selected representation — the whole file — in a `206` as in a `200`;
/// - `Content-Digest` (RFC 9530) and `Content-MD5` (RFC 1864) describe the message's
///   content, which is the whole file only in a `200` without `Content-Encoding`.
///
/// Of several, the strongest algorithm Haul knows wins (SHA-512, SHA-256, then SHA-1 and
/// MD5). A value that cannot be read is ignored, as RFC 9530 asks, never trusted.
package struct ServerDigest: Sendable, Equatable {
    /// The digest the file must have.
    package var checksum: Checksum
    /// The header it came from, as the saved line and the JSON name it (`Repr-Digest`).
    package var header: String

    /// The best usable digest of the whole file in a response's headers; nil when none.
    /// - Parameters:
    ///   - status: the response's status; content digests count only in a `200`.
    package init?(headers: HTTPHeaders, status: Int) {
        var found: [ServerDigest] = []
        for value in headers["Repr-Digest"] { found += Self.structured(value, header: "Repr-Digest") }
        for value in headers["Digest"] { found += Self.instance(value) }
        let wholeContent = status == 200 && headers["Content-Encoding"].allSatisfy { $0.lowercased() == "identity" }
        if wholeContent {
            for value in headers["Content-Digest"] { found += Self.structured(value, header: "Content-Digest") }
            for value in headers["Content-MD5"] {
                if let checksum = Self.checksum(.md5, base64: value) {
                    found.append(ServerDigest(checksum: checksum, header: "Content-MD5"))
                }
            }
        }
        let strength: [String: Int] = ["sha512": 4, "sha256": 3, "sha1": 2, "md5": 1]
        guard
            let best = found.max(by: {
                strength[$0.checksum.algorithm.name, default: 0] < strength[$1.checksum.algorithm.name, default: 0]
            })
        else { return nil }
        self = best
    }

    private init(checksum: Checksum, header: String) {
        self.checksum = checksum
        self.header = header
    }

    /// RFC 9530's dictionary: `sha-256=:BASE64:, sha-512=:BASE64:`.
    static func structured(_ value: String, header: String) -> [ServerDigest] {
        value.split(separator: ",").compactMap { member in
            let parts = member.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            let name = parts[0].trimmingCharacters(in: .whitespaces).lowercased()
            var bytes = parts[1].trimmingCharacters(in: .whitespaces)
            // A parameter after the byte sequence (`;x=y`) is allowed and ignored.
            if let semicolon = bytes.firstIndex(of: ";") { bytes = String(bytes[..<semicolon]) }
            guard bytes.count >= 2, bytes.hasPrefix(":"), bytes.hasSuffix(":") else { return nil }
            let algorithm: Checksum.Algorithm? =
                switch name {
                case "sha-256": .sha256
                case "sha-512": .sha512
                default: nil  // md5 and sha are deprecated by RFC 9530; others unknown here.
                }
            guard let algorithm, let checksum = checksum(algorithm, base64: String(bytes.dropFirst().dropLast()))
            else { return nil }
            return ServerDigest(checksum: checksum, header: header)
        }
    }

    /// RFC 3230's `Digest: SHA-256=BASE64, MD5=BASE64` (algorithm names from its registry).
    static func instance(_ value: String) -> [ServerDigest] {
        value.split(separator: ",").compactMap { member in
            let parts = member.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            let algorithm: Checksum.Algorithm? =
                switch parts[0].trimmingCharacters(in: .whitespaces).lowercased() {
                case "sha-256": .sha256
                case "sha-512": .sha512
                case "sha": .sha1
                case "md5": .md5
                default: nil
                }
            guard let algorithm,
                let checksum = checksum(algorithm, base64: parts[1].trimmingCharacters(in: .whitespaces))
            else { return nil }
            return ServerDigest(checksum: checksum, header: "Digest")
        }
    }

    /// A checksum from a Base64 digest of the algorithm's length; nil for anything else.
    static func checksum(_ algorithm: Checksum.Algorithm, base64: String) -> Checksum? {
        guard base64.utf8.count <= 200, let data = Data(base64Encoded: base64.trimmingCharacters(in: .whitespaces)),
            data.count == algorithm.digestLength
        else { return nil }
        return try? Checksum(algorithm: algorithm, hex: data.map { String(format: "%02x", $0) }.joined())
    }
}
