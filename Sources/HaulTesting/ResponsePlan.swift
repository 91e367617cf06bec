import Foundation
import NIOHTTP1

/// What the test server answers to one request: a bare status, or a body and how to send
/// it, decided from the resource's knobs.
enum ResponsePlan {
    case status(Int, headers: [(String, String)])
    case body(Body)

    /// A response with a body, and how it is sent.
    struct Body {
        var status: Int
        var headers: [(String, String)]
        var bytes: ArraySlice<UInt8>
        /// The length the headers promise, when it is not the bytes' count.
        var declared: Int?
        /// Where the connection is closed mid-body.
        var cutAfter: Int?
        var chunked: Bool
        /// HTTP/1.0 with no length: the end is the connection's close.
        var closeDelimited: Bool
        /// Where the body goes silent for good (offsets within this body).
        var stallAfter: Int?
        /// Where the body waits until the test releases its path.
        var holdAfter: Int?
        var bytesPerSecond: Int?

        /// The status line and headers.
        var head: String {
            let version = closeDelimited ? "HTTP/1.0" : "HTTP/1.1"
            var text = "\(version) \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)\r\n"
            text += "Date: \(TestServer.httpDate(Date()))\r\n"
            if closeDelimited {
                text += "Connection: close\r\n"
            } else if chunked {
                text += "Transfer-Encoding: chunked\r\n"
            } else {
                text += "Content-Length: \(declared ?? bytes.count)\r\n"
            }
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            return text + "\r\n"
        }

        /// Whether the connection may carry another response after this one.
        var keepsConnection: Bool {
            let limit = min(bytes.count, cutAfter ?? .max)
            return !(closeDelimited || limit < bytes.count || (declared ?? bytes.count) > bytes.count)
        }
    }

    /// Decides the response to a request, applying the resource's knobs. Called under the lock.
    static func make(for head: HTTPRequestHead, entry: inout TestServer.Entry) -> ResponsePlan {
        let resource = entry.resource
        if let failure = failure(for: head, entry: &entry) { return failure }
        let size = entry.content.count
        var headers = representationHeaders(resource)

        let faulty = entry.resource.faultyResponses > 0
        if faulty, resource.cutAfter != nil || resource.lengthLie != nil || resource.contentRangeFault != nil {
            entry.resource.faultyResponses -= 1
        }
        let cutAfter = faulty ? resource.cutAfter : nil
        var chunked = resource.chunked
        var extra = 0
        var declared: Int?
        switch faulty ? resource.lengthLie : nil {
        case .short(let n): declared = n
        case .long(let n):
            chunked = true
            extra = n
        case nil: break
        }

        var status = 200
        var range = 0..<size
        if resource.ranges, let requested = head.headers.first(name: "Range").flatMap(parseRange),
            ifRangeHolds(head.headers.first(name: "If-Range"), resource: resource)
        {
            if requested.first >= size {
                return .status(416, headers: headers + [("Content-Range", "bytes */\(size)")])
            }
            let last = min(requested.last ?? size - 1, size - 1)
            range = requested.first..<(last + 1)
            status = 206
            let contentRange: String
            switch faulty ? resource.contentRangeFault : nil {
            case .shiftedStart(let delta): contentRange = "bytes \(range.lowerBound + delta)-\(last + delta)/\(size)"
            case .wrongTotal(let delta): contentRange = "bytes \(range.lowerBound)-\(last)/\(size + delta)"
            case .malformed: contentRange = "bytes=\(range.lowerBound)-"
            case nil: contentRange = "bytes \(range.lowerBound)-\(last)/\(size)"
            }
            headers.append(("Content-Range", contentRange))
        }
        var body = entry.content[range]
        if extra > 0 { body = ArraySlice(Array(body) + [UInt8](repeating: 0x5A, count: extra)) }
        let declaredLength = declared.map { body.count + $0 }
        return .body(
            Body(
                status: status,
                headers: headers,
                bytes: body,
                declared: declaredLength,
                cutAfter: cutAfter,
                chunked: chunked,
                closeDelimited: resource.closeDelimited && status == 200,
                stallAfter: resource.stallAt.map { max(0, $0 - range.lowerBound) },
                holdAfter: resource.holdAt.map { max(0, $0 - range.lowerBound) },
                bytesPerSecond: head.headers.first(name: "Range") == nil
                    ? resource.unrangedBytesPerSecond ?? resource.bytesPerSecond : resource.bytesPerSecond
            )
        )
    }

    /// The failure or redirect a resource's knobs answer this request with, if any.
    private static func failure(for head: HTTPRequestHead, entry: inout TestServer.Entry) -> ResponsePlan? {
        let resource = entry.resource
        if entry.served <= resource.failFirst {
            var headers: [(String, String)] = []
            if let retryAfter = resource.retryAfter { headers.append(("Retry-After", retryAfter)) }
            return .status(resource.failStatus, headers: headers)
        }
        if resource.failRanged > 0, head.headers.first(name: "Range") != nil {
            if resource.passRanged > 0 {
                entry.resource.passRanged -= 1
            } else {
                entry.resource.failRanged -= 1
                return .status(resource.failStatus, headers: [])
            }
        }
        if let location = resource.redirectTo {
            return .status(resource.redirectStatus, headers: [("Location", location)])
        }
        return nil
    }

    /// The headers that describe the resource: validators, names, types, ranges, extras.
    private static func representationHeaders(_ resource: TestServer.Resource) -> [(String, String)] {
        var headers: [(String, String)] = []
        if let etag = resource.etagValue { headers.append(("ETag", etag)) }
        if let lastModified = resource.lastModified {
            headers.append(("Last-Modified", TestServer.httpDate(lastModified)))
        }
        if let disposition = resource.contentDisposition { headers.append(("Content-Disposition", disposition)) }
        if let type = resource.contentType { headers.append(("Content-Type", type)) }
        if resource.ranges { headers.append(("Accept-Ranges", "bytes")) }
        headers += resource.headers.map { ($0.name, $0.value) }

        return headers
    }

    /// `If-Range` holds when it equals the current strong ETag, or the Last-Modified date.
    /// A weak ETag never matches (RFC 9110 §13.1.5).
    private static func ifRangeHolds(_ value: String?, resource: TestServer.Resource) -> Bool {
        guard let value else { return true }
        if value.hasPrefix("\"") {
            return resource.etag != .weak && resource.etag != .none && value == resource.etagValue
        }
        if value.hasPrefix("W/") { return false }
        return resource.lastModified.map { TestServer.httpDate($0) == value } ?? false
    }

    /// `bytes=N-` or `bytes=N-M`; nil for anything else (including several ranges).
    private static func parseRange(_ value: String) -> (first: Int, last: Int?)? {
        guard value.hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2, let first = Int(spec[0]) else { return nil }
        if spec[1].isEmpty { return (first, nil) }
        guard let last = Int(spec[1]), last >= first else { return nil }
        return (first, last)
    }
}
