import Foundation

/// What a ``TestServer`` serves, how each file misbehaves, and what it saw.
extension TestServer {
    /// How the server labels a resource's version.
    public enum ETagStyle: Sendable, Equatable {
        /// `"v<version>-<seed>"`
        case strong
        /// `W/"v<version>-<seed>"`
        case weak
        /// No ETag header.
        case none
        /// This strong ETag, whatever the version (a mirror's own).
        case fixed(String)
    }

    /// Ways to break `Content-Range` on 206 responses.
    public enum ContentRangeFault: Sendable, Equatable {
        /// The first byte position is off by this many bytes (the body is the honest range).
        case shiftedStart(Int)
        /// The complete length is off by this many bytes.
        case wrongTotal(Int)
        /// Unparseable.
        case malformed
    }

    /// Ways to lie about a body's length.
    public enum LengthLie: Sendable, Equatable {
        /// Promise this many bytes more than are sent, then close the connection.
        case short(Int)
        /// Send this many bytes more than the headers promise (chunked framing makes it possible).
        case long(Int)
    }

    /// A file the server serves, and how it misbehaves.
    public struct Resource: Sendable {
        /// Length in bytes.
        public var size: Int
        /// Seed of the generated content.
        public var seed: UInt64
        /// Content version; bumping it changes the bytes, the ETag and Last-Modified.
        public var version: Int
        public var etag: ETagStyle
        /// `Last-Modified`, or nil for none.
        public var lastModified: Date?
        /// Whether Range requests are honoured.
        public var ranges: Bool
        /// A `Content-Disposition` header value.
        public var contentDisposition: String?
        /// Throttle each response to this many bytes per second.
        public var bytesPerSecond: Int?
        /// Throttle only responses to requests without a Range header (a download's first
        /// connection) to this many bytes per second: a slow connection among fast ones.
        public var unrangedBytesPerSecond: Int?
        /// Close the connection after this many body bytes.
        public var cutAfter: Int?
        /// How many responses get the `cutAfter`, `lengthLie` and `contentRangeFault` faults
        /// (then the resource is served honestly).
        public var faultyResponses: Int
        public var contentRangeFault: ContentRangeFault?
        public var lengthLie: LengthLie?
        /// Answer the first `failFirst` requests with `failStatus` (and `Retry-After` when set).
        public var failFirst: Int
        /// Answer this many requests that carry a Range header with `failStatus`: a server
        /// that refuses a client's extra connections.
        public var failRanged: Int
        /// Ranged requests served as usual before `failRanged` begins (a mirror that fails
        /// after it was checked and served a segment).
        public var passRanged = 0
        public var failStatus: Int
        public var retryAfter: String?
        /// Answer with a redirect to this location instead of content.
        public var redirectTo: String?
        public var redirectStatus: Int
        /// Send the body chunked, without Content-Length.
        public var chunked: Bool
        /// Answer whole-file requests as an HTTP/1.0 server streaming generated content would:
        /// no Content-Length, the end of the body marked only by closing the connection (so
        /// a `cutAfter` looks exactly like the end).
        public var closeDelimited: Bool
        /// Every response goes silent (sends nothing more, keeps the connection open) once it
        /// reaches this offset of the file: a server that stalls at the same point each time.
        public var stallAt: Int?
        /// Every response waits once it reaches this offset of the file until the test calls
        /// ``TestServer/release(_:)`` for the path: downloads held under way for as long as
        /// the test needs, however slow the machine.
        public var holdAt: Int?
        /// When set, a new version changes only these byte ranges and keeps the rest of
        /// version 1: a file whose bytes around a resume point stay the same while others change.
        public var changedBytes: [Range<Int>]?
        /// Bytes served inverted (each XOR 0xFF) in every response, with the same ETag and
        /// length: a mirror whose copy is damaged in places.
        public var corrupted: [Range<Int>] = []
        /// Bytes served as they are instead of generated ones (`size` is their count).
        public var body: [UInt8]?
        /// A `Content-Type` header value.
        public var contentType: String?
        /// More header fields sent with every answer that carries the body (a digest, say).
        public var headers: [(name: String, value: String)] = []

        public init(
            size: Int,
            seed: UInt64 = 1,
            etag: ETagStyle = .strong,
            lastModified: Date? = Date(timeIntervalSince1970: 1_600_000_000),
            ranges: Bool = true,
            contentDisposition: String? = nil,
            bytesPerSecond: Int? = nil,
            unrangedBytesPerSecond: Int? = nil,
            cutAfter: Int? = nil,
            faultyResponses: Int = .max,
            contentRangeFault: ContentRangeFault? = nil,
            lengthLie: LengthLie? = nil,
            failFirst: Int = 0,
            failRanged: Int = 0,
            failStatus: Int = 503,
            retryAfter: String? = nil,
            redirectTo: String? = nil,
            redirectStatus: Int = 302,
            chunked: Bool = false,
            closeDelimited: Bool = false,
            stallAt: Int? = nil,
            holdAt: Int? = nil,
            changedBytes: [Range<Int>]? = nil,
            corrupted: [Range<Int>] = []
        ) {
            self.size = size
            self.seed = seed
            self.version = 1
            self.etag = etag
            self.lastModified = lastModified
            self.ranges = ranges
            self.contentDisposition = contentDisposition
            self.bytesPerSecond = bytesPerSecond
            self.unrangedBytesPerSecond = unrangedBytesPerSecond
            self.cutAfter = cutAfter
            self.faultyResponses = faultyResponses
            self.contentRangeFault = contentRangeFault
            self.lengthLie = lengthLie
            self.failFirst = failFirst
            self.failRanged = failRanged
            self.failStatus = failStatus
            self.retryAfter = retryAfter
            self.redirectTo = redirectTo
            self.redirectStatus = redirectStatus
            self.chunked = chunked
            self.closeDelimited = closeDelimited
            self.stallAt = stallAt
            self.holdAt = holdAt
            self.changedBytes = changedBytes
            self.corrupted = corrupted
        }

        /// `text` served as it is, with a `Content-Type`.
        public static func document(_ text: String, contentType: String) -> Resource {
            var resource = Resource(size: text.utf8.count)
            resource.body = Array(text.utf8)
            resource.contentType = contentType
            return resource
        }

        /// A redirect to `location`.
        public static func redirect(to location: String, status: Int = 302) -> Resource {
            Resource(size: 0, redirectTo: location, redirectStatus: status)
        }

        var etagValue: String? {
            switch etag {
            case .strong: return "\"v\(version)-\(seed)\""
            case .weak: return "W/\"v\(version)-\(seed)\""
            case .none: return nil
            case .fixed(let value): return value
            }
        }
    }

    /// A request as the server saw it.
    public struct RecordedRequest: Sendable {
        public var method: String
        public var path: String
        public var headers: [(name: String, value: String)]

        /// The first value of a header, compared case-insensitively.
        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }
}
