import Foundation
import NIOCore

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

    /// The bytes of `buffer` that overlap what is on disk (rule 7), compared with
    /// `overlap` from `checked` on and consumed; how many. Throws ``Restart`` when they differ.
    static func compare(_ buffer: inout ByteBuffer, with overlap: [UInt8], from checked: Int) throws -> Int {
        let n = min(buffer.readableBytes, overlap.count - checked)
        let matches = buffer.withUnsafeReadableBytes { received in
            overlap.withUnsafeBytes { expected in
                memcmp(received.baseAddress!, expected.baseAddress! + checked, n) == 0
            }
        }
        guard matches else { throw Restart(reason: "the bytes before the resume point changed") }
        buffer.moveReaderIndex(forwardBy: n)
        return n
    }
}
