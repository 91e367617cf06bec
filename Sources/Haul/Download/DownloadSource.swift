import Foundation

/// One server a download's bytes may come from: the URL asked for, or one of its mirrors
/// (``DownloadRequest/mirrors``), with what the download learnt about it.
///
/// Mirrors of one file carry different validators (each server has its own ETag), so each
/// source keeps its own for `If-Range`; what makes them the same file is the length every
/// one must report and the bytes each one's first answer repeats from another source's
/// (docs/architecture.md, "Several sources").
public struct DownloadSource: Codable, Sendable, Equatable {
    /// Where the source is.
    public var url: URL
    /// Its own validators, learnt from its first answer; nil until then.
    public var validators: Validators?
    /// Whether its bytes were compared with another source's and agreed (the URL asked for
    /// needs no comparison: it defines the file until it is dropped).
    public var verified: Bool
    /// Why it was dropped for this download; nil while it is used.
    public var dropped: String?
    /// Bytes it delivered to this download.
    public var bytes: Int64

    public init(
        url: URL,
        validators: Validators? = nil,
        verified: Bool = false,
        dropped: String? = nil,
        bytes: Int64 = 0
    ) {
        self.url = url
        self.validators = validators
        self.verified = verified
        self.dropped = dropped
        self.bytes = bytes
    }

    /// The most sources one download may have (the URL and its mirrors).
    public static let maxSources = 16
    /// The longest drop reason kept.
    static let maxReasonLength = 1024

    /// Checks a stored or received list of sources: at most ``maxSources``, each an
    /// absolute http(s) URL, bytes not negative, reasons of a bounded length.
    static func validate(_ sources: [DownloadSource]) throws {
        guard sources.count <= maxSources else {
            throw HaulError(
                .invalidArgument,
                "A download takes at most \(maxSources - 1) mirrors, not \(sources.count - 1)"
            )
        }
        for source in sources {
            try DownloadRequest.validate(source.url)
            guard source.bytes >= 0, (source.dropped?.utf8.count ?? 0) <= maxReasonLength else {
                throw HaulError(
                    .invalidArgument,
                    "A source of a download holds a negative byte count or a reason too long"
                )
            }
        }
    }
}
