import Crypto
import Foundation

/// An expected digest of a downloaded file, checked before the file is moved into place.
///
/// Written as `ALGORITHM=HEX`, for example `sha256=9f86d0…`.
public struct Checksum: Sendable, Hashable, Codable, CustomStringConvertible {
    /// A digest algorithm.
    public struct Algorithm: Sendable, Hashable, Codable, CustomStringConvertible {
        /// The lower-case name used in `ALGORITHM=HEX`.
        public let name: String
        /// Hex digits in a digest of this algorithm.
        let hexLength: Int
        /// Bytes in a digest of this algorithm.
        var digestLength: Int { hexLength / 2 }

        public static let sha256 = Algorithm(name: "sha256", hexLength: 64)
        public static let sha512 = Algorithm(name: "sha512", hexLength: 128)
        public static let sha1 = Algorithm(name: "sha1", hexLength: 40)
        public static let md5 = Algorithm(name: "md5", hexLength: 32)

        static let all: [Algorithm] = [.sha256, .sha512, .sha1, .md5]

        private init(name: String, hexLength: Int) {
            self.name = name
            self.hexLength = hexLength
        }

        /// The algorithm of this name (`sha256`, `sha512`, `sha1`, `md5`; case and dashes
        /// ignored); nil for any other.
        public init?(named name: String) {
            let wanted = name.lowercased().replacingOccurrences(of: "-", with: "")
            guard let algorithm = Algorithm.all.first(where: { $0.name == wanted }) else { return nil }
            self = algorithm
        }

        public var description: String { name }
    }

    /// The algorithm.
    public let algorithm: Algorithm
    /// The expected digest in lower-case hex.
    public let hex: String

    /// Creates a checksum from an algorithm and a hex digest.
    /// - Throws: ``HaulError/Code/invalidArgument`` when the digest is not hex of the right length.
    public init(algorithm: Algorithm, hex: String) throws {
        let lower = hex.lowercased()
        guard lower.count == algorithm.hexLength, lower.allSatisfy(\.isHexDigit) else {
            throw HaulError(
                .invalidArgument,
                "Invalid \(algorithm.name) checksum '\(hex)': expected \(algorithm.hexLength) hex digits"
            )
        }
        self.algorithm = algorithm
        self.hex = lower
    }

    /// Parses `ALGORITHM=HEX` (also `ALGORITHM:HEX`).
    /// - Throws: ``HaulError/Code/invalidArgument`` for an unknown algorithm or a malformed digest.
    public init(parsing text: String) throws {
        guard let separator = text.firstIndex(where: { $0 == "=" || $0 == ":" }) else {
            throw HaulError(
                .invalidArgument,
                "Invalid checksum '\(text)'",
                hint: "Write it as sha256=HEX (also sha512, sha1, md5)"
            )
        }
        guard let algorithm = Algorithm(named: String(text[..<separator])) else {
            throw HaulError(
                .invalidArgument,
                "Unknown checksum algorithm '\(text[..<separator])'",
                hint: "Use sha256, sha512, sha1 or md5"
            )
        }
        try self.init(algorithm: algorithm, hex: String(text[text.index(after: separator)...]))
    }

    public var description: String { "\(algorithm.name)=\(hex)" }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        try self.init(parsing: try container.decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// Incremental digest over any of the supported algorithms.
struct AnyDigest {
    private enum State {
        case sha256(SHA256)
        case sha512(SHA512)
        case sha1(Insecure.SHA1)
        case md5(Insecure.MD5)
    }

    private var state: State

    init(_ algorithm: Checksum.Algorithm) {
        switch algorithm.name {
        case "sha512": state = .sha512(SHA512())
        case "sha1": state = .sha1(Insecure.SHA1())
        case "md5": state = .md5(Insecure.MD5())
        default: state = .sha256(SHA256())
        }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        switch state {
        case .sha256(var h):
            h.update(bufferPointer: bytes)
            state = .sha256(h)
        case .sha512(var h):
            h.update(bufferPointer: bytes)
            state = .sha512(h)
        case .sha1(var h):
            h.update(bufferPointer: bytes)
            state = .sha1(h)
        case .md5(var h):
            h.update(bufferPointer: bytes)
            state = .md5(h)
        }
    }

    func finalize() -> [UInt8] {
        switch state {
        case .sha256(let h): Array(h.finalize())
        case .sha512(let h): Array(h.finalize())
        case .sha1(let h): Array(h.finalize())
        case .md5(let h): Array(h.finalize())
        }
    }

    func finalizeHex() -> String {
        finalize().map { String(format: "%02x", $0) }.joined()
    }
}
