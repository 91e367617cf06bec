import Foundation
import GRDB

/// One byte range of a download and how much of it is durably on disk.
///
/// A task has one or more segments; together they cover the file. `committed` is the
/// absolute offset up to which this segment's bytes were synced to the part file before
/// the record was written: a restart continues each segment from there.
package struct SegmentRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    package static let databaseTableName = "segment"

    package var taskID: UUID
    package var ordinal: Int
    /// First byte of the segment.
    package var start: Int64
    /// One past the last byte, or nil while the length is unknown.
    package var end: Int64?
    /// Bytes in `start..<committed` are durably on disk.
    package var committed: Int64

    package init(taskID: UUID, ordinal: Int, start: Int64, end: Int64? = nil, committed: Int64) {
        self.taskID = taskID
        self.ordinal = ordinal
        self.start = start
        self.end = end
        self.committed = committed
    }

    package enum Columns {
        package static let taskID = Column(CodingKeys.taskID)
        package static let ordinal = Column(CodingKeys.ordinal)
        package static let committed = Column(CodingKeys.committed)
    }
}

extension SegmentRecord {
    /// Why segments cannot describe one download's file, or nil when they can: none at all,
    /// one inverted or past its own end or the file's length, two that overlap, one without
    /// an end before the last. Whatever comes from outside a running transfer — resume data,
    /// the store's rows — is checked with it before a transfer does arithmetic on it.
    package static func layoutProblem(
        _ segments: [(start: Int64, end: Int64?, committed: Int64)],
        totalLength: Int64?
    ) -> String? {
        guard !segments.isEmpty else { return "no segments" }
        let sorted = segments.sorted { $0.start < $1.start }
        for (index, segment) in sorted.enumerated() {
            guard segment.start >= 0, segment.committed >= segment.start else { return "a segment is inverted" }
            if let end = segment.end {
                guard end >= segment.start, segment.committed <= end else { return "a segment overruns its end" }
                if let totalLength, end > totalLength { return "a segment lies beyond the file's length" }
            }
            guard index + 1 < sorted.count else { continue }
            guard let end = segment.end else { return "a segment without an end is not the last" }
            if end > sorted[index + 1].start { return "two segments overlap" }
        }
        return nil
    }
}
