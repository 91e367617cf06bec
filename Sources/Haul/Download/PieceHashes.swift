import Foundation

/// The hash of every `length` bytes of a file (the last piece may be shorter), as a
/// Metalink's `<pieces>` gives them: each piece is checked as soon as it is on disk, and one
/// that does not match is fetched again from another source (docs/architecture.md, "Piece
/// hashes").
public struct PieceHashes: Sendable, Hashable {
    /// The algorithm of every piece's hash.
    public let algorithm: Checksum.Algorithm
    /// Bytes in each piece but the last.
    public let length: Int64
    /// The digests, one after the other (`count` × the algorithm's digest length).
    package let digests: [UInt8]

    /// The smallest and largest piece length taken (Metalinks use 256 KiB to a few MiB).
    public static let lengths: ClosedRange<Int64> = 1024...(1 << 32)
    /// The most pieces a file may have (4 Mi: 128 MiB of SHA-256 digests at most).
    public static let maxCount = 4 << 20

    /// Creates piece hashes from their hex digests, in order.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a length outside ``lengths``, more
    ///   than ``maxCount`` pieces, none, or a digest that is not hex of the algorithm's length.
    public init(algorithm: Checksum.Algorithm, length: Int64, hexDigests: [String]) throws {
        guard PieceHashes.lengths.contains(length) else {
            throw HaulError(.invalidArgument, "A piece length of \(length) bytes is not one of 1 KiB to 4 GiB")
        }
        guard !hexDigests.isEmpty, hexDigests.count <= PieceHashes.maxCount else {
            throw HaulError(
                .invalidArgument,
                "\(hexDigests.count) piece hashes are not a number Haul takes (1 to \(PieceHashes.maxCount))"
            )
        }
        var digests: [UInt8] = []
        digests.reserveCapacity(hexDigests.count * algorithm.digestLength)
        for (index, hex) in hexDigests.enumerated() {
            guard let bytes = PieceHashes.bytes(hex: hex, count: algorithm.digestLength) else {
                throw HaulError(
                    .invalidArgument,
                    "Piece hash \(index) is not \(algorithm.hexLength) hex digits of \(algorithm.name)"
                )
            }
            digests += bytes
        }
        self.algorithm = algorithm
        self.length = length
        self.digests = digests
    }

    /// Piece hashes from digests already checked (the store's).
    init?(algorithm: Checksum.Algorithm, length: Int64, digests: [UInt8]) {
        let count = digests.count / algorithm.digestLength
        guard PieceHashes.lengths.contains(length), count > 0, count <= PieceHashes.maxCount,
            digests.count == count * algorithm.digestLength
        else { return nil }
        self.algorithm = algorithm
        self.length = length
        self.digests = digests
    }

    /// How many pieces there are.
    public var count: Int { digests.count / algorithm.digestLength }

    /// Piece `index`'s digest in lower-case hex.
    public func hex(_ index: Int) -> String {
        digest(index).map { String(format: "%02x", $0) }.joined()
    }

    /// Piece `index`'s digest.
    func digest(_ index: Int) -> ArraySlice<UInt8> {
        let size = algorithm.digestLength
        return digests[(index * size)..<((index + 1) * size)]
    }

    /// Why these hashes cannot describe a file of `total` bytes (another number of pieces),
    /// or nil when they do.
    func problem(forLength total: Int64) -> String? {
        let expected = total == 0 ? 0 : (total + length - 1) / length
        guard Int64(count) != expected else { return nil }
        return "its \(count) piece hashes of \(length) bytes do not fit a file of \(total) bytes (\(expected) pieces)"
    }

    /// The bytes piece `index` covers in a file of `total` bytes.
    func range(of index: Int, total: Int64) -> Range<Int64> {
        let start = Int64(index) * length
        return start..<min(start + length, total)
    }

    /// The pieces that overlap `bytes`.
    func pieces(overlapping bytes: Range<Int64>) -> Range<Int> {
        guard !bytes.isEmpty else { return 0..<0 }
        let first = Int(bytes.lowerBound / length)
        let last = Int((bytes.upperBound - 1) / length)
        return first..<min(last + 1, count)
    }

    private static func bytes(hex: String, count: Int) -> [UInt8]? {
        let utf8 = Array(hex.utf8)
        guard utf8.count == count * 2 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        for i in stride(from: 0, to: utf8.count, by: 2) {
            guard let high = nibble(utf8[i]), let low = nibble(utf8[i + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }
}

/// The JSON form, as resume data carries it: `{"algorithm": "sha256", "length": 262144,
/// "hashes": ["…"]}` — checked on decoding as ``PieceHashes/init(algorithm:length:hexDigests:)``
/// checks them.
extension PieceHashes: Codable {
    private enum CodingKeys: String, CodingKey {
        case algorithm, length, hashes
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .algorithm)
        guard let algorithm = Checksum.Algorithm(named: name) else {
            throw DecodingError.dataCorruptedError(
                forKey: .algorithm,
                in: container,
                debugDescription: "an unknown piece hash algorithm"
            )
        }
        let length = try container.decode(Int64.self, forKey: .length)
        let hashes = try container.decode([String].self, forKey: .hashes)
        do {
            self = try PieceHashes(algorithm: algorithm, length: length, hexDigests: hashes)
        } catch let error as HaulError {
            throw DecodingError.dataCorruptedError(forKey: .hashes, in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(algorithm.name, forKey: .algorithm)
        try container.encode(length, forKey: .length)
        try container.encode((0..<count).map(hex), forKey: .hashes)
    }
}
