import Foundation

/// A response already received for a segment, with what the transfer checked about it.
struct SegmentResponse: Sendable {
    var response: HTTPTransport.Response
    /// The segment it feeds (identified by its start).
    var segmentStart: Int64
    /// Where the body's first byte belongs in the file.
    var bodyOffset: Int64
    /// The bytes just before the resume point the body must repeat (rule 7), when the
    /// server gave no validator; they are compared, not written.
    var overlap: [UInt8]
    /// Where the response says its body ends, when it says.
    var expectedEnd: Int64?
    /// The mirror it came from, when not the URL asked for: named in its errors.
    var mirror: URL?
}
