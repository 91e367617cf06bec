import Foundation

/// A Metalink document: files, each with its size, hashes, piece hashes and the URLs that
/// serve it — Metalink 4 (RFC 5854, `.meta4`) and Metalink 3 (metalinker.org, `.metalink`).
///
/// Parsed with libxml2's pull parser (``XMLPullReader``), loaded when a Metalink is first read;
/// a document type declaration is refused, so no entity is expanded or fetched.
/// Everything in it comes from outside and is checked: names are relative paths without
/// `..`, sizes are bounded, hashes are hex of their algorithm's length, and every file has
/// an http(s) URL; anything else is one sentence naming the file and what is wrong.
public struct Metalink: Sendable, Equatable {
    public var files: [File]

    /// One file of the document.
    public struct File: Sendable, Equatable {
        /// Its path relative to the download directory (a plain name, or directories and a name).
        public var name: String
        /// Its length in bytes, when given.
        public var size: Int64?
        /// Its whole-file hashes, strongest first.
        public var hashes: [Checksum]
        /// Its piece hashes, when given.
        public var pieces: PieceHashes?
        /// The http(s) URLs that serve it, most preferred first.
        public var urls: [URL]
    }

    /// The largest document read (a Metalink of thousands of files is a few MiB).
    public static let maxDocumentBytes = 16 << 20
    /// The most files one document may describe.
    public static let maxFiles = 10_000
    /// The largest file size taken (1 PiB).
    public static let maxSize: Int64 = 1 << 50

    /// Parses a Metalink 4 or 3 document; `source` names it in errors.
    /// - Throws: ``HaulError/Code/invalidArgument`` saying what is wrong, and where.
    public init(parsing data: Data, source: String) throws {
        guard data.count <= Metalink.maxDocumentBytes else {
            throw HaulError(.invalidArgument, "\(source) is larger than 16 MiB: not a Metalink Haul reads")
        }
        var reader = MetalinkReader()
        do {
            try XMLPullReader.read(data) { node, place in reader.take(node, at: place) }
        } catch .unavailable {
            throw HaulError(
                .invalidArgument,
                "\(source) cannot be read: reading a Metalink needs libxml2 (libxml2.so.2), which is not installed",
                hint: "Install it (on Debian and Ubuntu: apt install libxml2)"
            )
        } catch .notWellFormed(let line) {
            reader.failure = ("it is not well-formed XML", line)
        } catch .documentType(let line) {
            reader.failure = (
                "it declares a document type (<!DOCTYPE>), which a Metalink has no need of and Haul does not read",
                line
            )
        }
        if let (reason, line) = reader.failure {
            throw HaulError(.invalidArgument, "\(source) is not a Metalink Haul can use (line \(line)): \(reason)")
        }
        guard reader.sawRoot else {
            throw HaulError(
                .invalidArgument,
                "\(source) is not a Metalink: its root is not <metalink> of Metalink 4 or 3"
            )
        }
        var files: [File] = []
        for raw in reader.files {
            files.append(try Metalink.check(raw, source: source))
        }
        guard !files.isEmpty else { throw HaulError(.invalidArgument, "\(source) describes no file") }
        var seen: Set<String> = []
        for file in files where !seen.insert(file.name).inserted {
            throw HaulError(.invalidArgument, "\(source) names the file \(file.name) twice")
        }
        self.files = files
    }

    /// The media types of Metalink 4 (RFC 5854) and 3.
    public static let mediaTypes = ["application/metalink4+xml", "application/metalink+xml"]

    /// Whether a file is a Metalink by its media type, else by its name (`.meta4`, `.metalink`).
    public static func isMetalink(contentType: String?, path: String) -> Bool {
        if let type = contentType?.split(separator: ";").first?.trimmingWhitespace().lowercased(),
            mediaTypes.contains(type)
        {
            return true
        }
        let name = path.lowercased()
        return name.hasSuffix(".meta4") || name.hasSuffix(".metalink")
    }

    /// Reads a Metalink file.
    public init(contentsOf path: String) throws {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            (attributes[.size] as? Int ?? 0) <= Metalink.maxDocumentBytes
        else {
            if FileManager.default.fileExists(atPath: path) {
                throw HaulError(.invalidArgument, "\(path) is larger than 16 MiB: not a Metalink Haul reads")
            }
            throw HaulError(.fileSystem, "Cannot read the Metalink file \(path)", path: path)
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HaulError(.fileSystem, "Cannot read the Metalink file \(path)", path: path)
        }
        try self.init(parsing: data, source: path)
    }

    /// Checks one file as the document gave it.
    private static func check(_ raw: MetalinkReader.RawFile, source: String) throws -> File {
        func refuse(_ what: String) -> HaulError {
            HaulError(.invalidArgument, "\(source): the file '\(raw.name.prefix(200))' \(what)")
        }
        let components = raw.name.split(separator: "/", omittingEmptySubsequences: false)
        guard !raw.name.isEmpty, !raw.name.hasPrefix("/"), raw.name.utf8.count <= 4096,
            components.allSatisfy({ FileNaming.isPlainName(String($0)) })
        else {
            throw refuse(
                "has a name Haul will not write (empty, absolute, with '..', '.', an empty part or a control character)"
            )
        }
        var size: Int64?
        if let text = raw.size {
            guard let value = Int64(text.trimmingCharacters(in: .whitespacesAndNewlines)), value >= 0,
                value <= maxSize
            else { throw refuse("has a size that is not a number of bytes from 0 to 1 PiB: \(text.prefix(40))") }
            size = value
        }
        var hashes: [Checksum] = []
        for (type, hex) in raw.hashes {
            // Hash types Haul does not compute are skipped, as the RFC allows.
            guard let algorithm = algorithm(named: type) else { continue }
            guard
                let checksum = try? Checksum(
                    algorithm: algorithm,
                    hex: hex.trimmingCharacters(in: .whitespacesAndNewlines)
                )
            else { throw refuse("has a \(type) hash that is not \(algorithm.hexLength) hex digits") }
            hashes.append(checksum)
        }
        let strength = [Checksum.Algorithm.sha512, .sha256, .sha1, .md5]
        hashes.sort { strength.firstIndex(of: $0.algorithm)! < strength.firstIndex(of: $1.algorithm)! }
        var pieces: PieceHashes?
        if let rawPieces = raw.pieces, let algorithm = algorithm(named: rawPieces.type) {
            guard let length = Int64(rawPieces.length), PieceHashes.lengths.contains(length) else {
                throw refuse("has a piece length that is not 1 KiB to 4 GiB: \(rawPieces.length.prefix(40))")
            }
            let hexes = rawPieces.hashes.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            do {
                pieces = try PieceHashes(algorithm: algorithm, length: length, hexDigests: hexes)
            } catch {
                throw refuse("has a piece hash that is not \(algorithm.hexLength) hex digits, or no piece hash")
            }
            if let size, let pieces, let problem = pieces.problem(forLength: size) {
                throw refuse("does not match its piece hashes: \(problem)")
            }
        }
        let ranked = raw.urls.sorted { $0.priority < $1.priority }
        let urls = ranked.compactMap { entry -> URL? in
            guard let url = try? DownloadRequest.parseURL(entry.text) else { return nil }
            return url
        }
        guard !urls.isEmpty else { throw refuse("has no http or https URL") }
        // The best sources: a download takes at most 16.
        return File(
            name: raw.name,
            size: size,
            hashes: hashes,
            pieces: pieces,
            urls: Array(urls.prefix(DownloadSource.maxSources))
        )
    }

    private static func algorithm(named type: String) -> Checksum.Algorithm? {
        Checksum.Algorithm(named: type)
    }
}

/// Collects a Metalink document's elements as ``XMLPullReader`` reads them.
private struct MetalinkReader {
    struct RawFile {
        var name: String
        var size: String?
        var hashes: [(type: String, hex: String)] = []
        var pieces: (length: String, type: String, hashes: [String])?
        var urls: [(text: String, priority: Int)] = []
    }

    static let metalink4 = "urn:ietf:params:xml:ns:metalink"
    static let metalink3 = "http://www.metalinker.org/"

    var files: [RawFile] = []
    /// Why the document is refused, and the line the reader was at.
    var failure: (reason: String, line: Int)?
    var sawRoot = false
    private var path: [String] = []
    private var text = ""
    private var current: RawFile?
    private var hashType: String?
    private var urlPriority = Int.max
    private var version = 4
    /// Characters gathered for one element: a hash or a URL is far shorter.
    private static let maxText = 64 * 1024
    private static let maxURLs = 1000
    private static let maxPieces = 4 << 20

    /// Takes one node; false once the document is refused.
    mutating func take(_ node: XMLPullReader.Node, at place: XMLPullReader.Place) -> Bool {
        let refusal: String? =
            switch node {
            case .start(let name, let namespace): start(name, namespace: namespace, place: place)
            case .text(let string): add(string)
            case .end(let name): end(name)
            }
        if let refusal {
            failure = (refusal, place.line)
            return false
        }
        return true
    }

    private mutating func start(_ element: String, namespace: String?, place: XMLPullReader.Place) -> String? {
        if path.isEmpty {
            guard element == "metalink", namespace == Self.metalink4 || namespace == Self.metalink3 else {
                return "its root is <\(element.prefix(40))>, not <metalink> of Metalink 4 or 3"
            }
            sawRoot = true
            version = namespace == Self.metalink4 ? 4 : 3
        }
        path.append(element)
        text = ""
        guard path.count <= 16 else { return "its elements nest more than 16 deep" }
        switch element {
        case "file" where path.count == (version == 4 ? 2 : 3):
            guard files.count < Metalink.maxFiles else { return "it describes more than 10,000 files" }
            guard let name = place.attribute("name") else { return "a <file> has no name" }
            current = RawFile(name: name)
        case "hash":
            hashType = place.attribute("type")
        case "pieces" where current != nil:
            guard let length = place.attribute("length"), let type = place.attribute("type") else {
                return "a <pieces> lacks its length or type"
            }
            current?.pieces = (length, type, [])
        case "url" where current != nil:
            if version == 4 {
                urlPriority =
                    place.attribute("priority").flatMap { Int($0) }.map { min(max($0, 1), 999_999) } ?? 999_999
            } else {
                // Metalink 3: a preference from 100 (best) down to 0.
                let preference = place.attribute("preference").flatMap { Int($0) }.map { min(max($0, 0), 100) } ?? 0
                urlPriority = 101 - preference
            }
        default:
            break
        }
        return nil
    }

    private mutating func add(_ string: String) -> String? {
        guard text.utf8.count + string.utf8.count <= Self.maxText else {
            return "an element holds more than 64 KiB of text"
        }
        text += string
        return nil
    }

    private mutating func end(_ element: String) -> String? {
        defer {
            path.removeLast()
            text = ""
        }
        guard current != nil else { return nil }
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let parent = path.count >= 2 ? path[path.count - 2] : ""
        switch element {
        case "file":
            if let current { files.append(current) }
            current = nil
        case "size" where parent == "file":
            current?.size = value
        case "hash" where parent == "pieces":
            guard (current?.pieces?.hashes.count ?? 0) < Self.maxPieces else {
                return "a file has more than 4 M piece hashes"
            }
            current?.pieces?.hashes.append(value)
        case "hash" where parent == "file" || parent == "verification":
            if let hashType { current?.hashes.append((hashType, value)) }
        case "url":
            guard (current?.urls.count ?? 0) < Self.maxURLs else {
                return "a file has more than 1,000 URLs"
            }
            current?.urls.append((value, urlPriority))
        default:
            break
        }
        return nil
    }
}
