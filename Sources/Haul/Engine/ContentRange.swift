import Foundation

/// A parsed `Content-Range` header of a `bytes` range (RFC 9110 §14.4).
///
/// `bytes 500-999/1000` → first 500, last 999, complete length 1000;
/// `bytes */1000` (on a 416) → unsatisfied, complete length 1000; `*` as length → unknown.
struct ContentRange: Equatable, Sendable {
    /// The first and last byte positions, inclusive; nil for `bytes */N`.
    var range: ClosedRange<Int64>?
    /// The full length of the representation, nil when the server sent `*`.
    var completeLength: Int64?

    init(range: ClosedRange<Int64>?, completeLength: Int64?) {
        self.range = range
        self.completeLength = completeLength
    }

    /// Parses the header value; returns nil for anything malformed or of another unit.
    init?(parsing value: String) {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let rangePart = parts[0].trimmingCharacters(in: .whitespaces)
        let lengthPart = parts[1].trimmingCharacters(in: .whitespaces)

        if lengthPart == "*" {
            completeLength = nil
        } else {
            guard let length = ContentRange.nonNegative(lengthPart) else { return nil }
            completeLength = length
        }
        if rangePart == "*" {
            guard completeLength != nil else { return nil }
            range = nil
        } else {
            let bounds = rangePart.split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 2,
                let first = ContentRange.nonNegative(String(bounds[0])),
                let last = ContentRange.nonNegative(String(bounds[1])),
                last >= first
            else { return nil }
            if let completeLength, last >= completeLength { return nil }
            range = first...last
        }
    }

    /// The number of body bytes this range promises.
    var length: Int64? { range.map { $0.upperBound - $0.lowerBound + 1 } }

    private static func nonNegative(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(text)
    }
}
