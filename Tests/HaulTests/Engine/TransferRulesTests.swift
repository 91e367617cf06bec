import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import NIOHTTP1
import Testing

@testable import Haul

/// Each range rule on its own, without a server or a disk: what opens an attempt, and what
/// each answer means. RangeCorrectnessTests and IntegrityTests pin the same rules end to end.
@Suite("Transfer rules", .timeLimit(.minutes(10)))
struct TransferRulesTests {
    static let id = UUID()
    static let etag = "\"v1\""
    static let mib: Int64 = 1 << 20
    /// A file of 4 MiB with a strong ETag: resumable with `If-Range`, splittable.
    static let strong = TransferRules(Validators(etag: etag, totalLength: 4 * mib))
    /// A file of 4 MiB with nothing `If-Range` can use: only the overlap guards a resume.
    static let weak = TransferRules(Validators(etag: "W/\"v1\"", totalLength: 4 * mib))
    /// A body of unknown length and no validator.
    static let unknown = TransferRules(Validators())

    static func one(committed: Int64, end: Int64? = 4 * mib) -> [SegmentRecord] {
        [SegmentRecord(taskID: id, ordinal: 0, start: 0, end: end, committed: committed)]
    }

    static func headers(_ fields: (String, String)...) -> HTTPHeaders {
        HTTPHeaders(fields)
    }

    // MARK: Opening

    @Test("nothing written: ask for the whole file")
    func freshStartAsksForWhole() {
        #expect(Self.strong.opening(segments: Self.one(committed: 0), partSize: 0, confirming: false) == .whole)
        #expect(
            Self.unknown.opening(segments: Self.one(committed: 0, end: nil), partSize: 0, confirming: false) == .whole
        )
    }

    @Test("a resume sends If-Range with the strong validator and re-reads 64 KiB before the offset")
    func resumeWithIfRange() {
        let opening = Self.strong.opening(
            segments: Self.one(committed: Self.mib),
            partSize: Self.mib,
            confirming: false
        )
        #expect(opening == .resume(offset: Self.mib, overlap: 65536, ifRange: Self.etag))
        #expect(opening.range == "bytes=983040-")
        #expect(opening.ifRange == Self.etag)
    }

    @Test("without a usable validator a resume still asks for a range, guarded by the overlap alone")
    func resumeWithoutValidator() {
        let opening = Self.weak.opening(segments: Self.one(committed: Self.mib), partSize: Self.mib, confirming: false)
        #expect(opening == .resume(offset: Self.mib, overlap: 65536, ifRange: nil))
    }

    @Test("without a validator and no more than the overlap written, fetching again is cheaper than checking")
    func littleWrittenStartsOver() {
        let opening = Self.weak.opening(segments: Self.one(committed: 65536), partSize: 65536, confirming: false)
        #expect(opening == .startOver(reason: nil))
        // With a validator the same offset resumes, comparing everything written.
        #expect(
            Self.strong.opening(segments: Self.one(committed: 65536), partSize: 65536, confirming: false)
                == .resume(offset: 65536, overlap: 65536, ifRange: Self.etag)
        )
    }

    @Test(
        "with piece hashes a resume compares no overlap (rule 7a), with or without a validator; confirming an end still does"
    )
    func piecesResumeWithoutOverlap() {
        let segments = Self.one(committed: Self.mib)
        #expect(
            Self.strong.opening(segments: segments, partSize: Self.mib, confirming: false, piecesChecked: true)
                == .resume(offset: Self.mib, overlap: 0, ifRange: Self.etag)
        )
        // Little written and no validator: the pieces check it, so it is not fetched again.
        let little = Self.weak.opening(
            segments: Self.one(committed: 1000),
            partSize: 1000,
            confirming: false,
            piecesChecked: true
        )
        #expect(little == .resume(offset: 1000, overlap: 0, ifRange: nil))
        #expect(
            Self.unknown.opening(
                segments: Self.one(committed: Self.mib, end: nil),
                partSize: Self.mib,
                confirming: true,
                piecesChecked: true
            ) == .resume(offset: Self.mib, overlap: 65536, ifRange: nil)
        )
        #expect(TransferRules.overlap(segmentStart: 0, from: Self.mib, piecesChecked: true) == 0)
        #expect(TransferRules.overlap(segmentStart: 0, from: Self.mib, piecesChecked: false) == 65536)
        #expect(TransferRules.overlap(segmentStart: Self.mib, from: Self.mib + 100, piecesChecked: false) == 100)
    }

    @Test("a part file shorter than its checkpoint starts over, keeping nothing")
    func shortPartFileStartsOver() {
        let opening = Self.strong.opening(segments: Self.one(committed: Self.mib), partSize: 1000, confirming: false)
        #expect(opening == .startOver(reason: "part file shorter than its checkpoint"))
    }

    @Test("a split download goes straight to its segments, unless the part file lost their bytes")
    func splitDownloadOpensWithSegments() {
        let segments = [
            SegmentRecord(taskID: Self.id, ordinal: 0, start: 0, end: 2 * Self.mib, committed: Self.mib),
            SegmentRecord(taskID: Self.id, ordinal: 1, start: 2 * Self.mib, end: 4 * Self.mib, committed: 3 * Self.mib),
        ]
        #expect(Self.strong.opening(segments: segments, partSize: 3 * Self.mib, confirming: false) == .segments)
        #expect(
            Self.strong.opening(segments: segments, partSize: 2 * Self.mib, confirming: false)
                == .startOver(reason: "part file shorter than its checkpoints")
        )
        // Without If-Range no segment may be asked for on its own: the first one resumes.
        #expect(
            Self.weak.opening(segments: segments, partSize: 3 * Self.mib, confirming: false)
                == .resume(offset: Self.mib, overlap: 65536, ifRange: nil)
        )
    }

    @Test("confirming the end of a body of unknown length asks from the end, even with little written")
    func confirmingAsksFromTheEnd() {
        #expect(
            Self.unknown.opening(segments: Self.one(committed: 100, end: nil), partSize: 100, confirming: true)
                == .resume(offset: 100, overlap: 100, ifRange: nil)
        )
        #expect(
            Self.unknown.opening(segments: Self.one(committed: 0, end: nil), partSize: 0, confirming: true)
                == .resume(offset: 0, overlap: 0, ifRange: nil)
        )
    }

    // MARK: The first answer

    static let resumeAt1MiB = TransferRules.Opening.resume(offset: mib, overlap: 65536, ifRange: etag)

    // MARK: How an attempt ended

    @Test("an attempt's error is read in one order: a stop, another version, a retry, the end")
    func attemptOutcomes() {
        let refused = HaulError(.connection, "refused")
        let notFound = HaulError.httpStatus(404, reason: "Not Found", url: URL(string: "http://h/f")!, retryAfter: nil)
        let unavailable = HaulError.httpStatus(
            503,
            reason: "Unavailable",
            url: URL(string: "http://h/f")!,
            retryAfter: nil
        )
        var final = refused
        final.isFinal = true

        #expect(kind(AttemptOutcome(Restart(reason: "x"), stopRequested: true)) == "stopped")
        #expect(kind(AttemptOutcome(refused, stopRequested: true)) == "stopped")
        #expect(kind(AttemptOutcome(Restart(reason: "x"), stopRequested: false)) == "restart")
        #expect(kind(AttemptOutcome(refused, stopRequested: false)) == "retry")
        #expect(kind(AttemptOutcome(unavailable, stopRequested: false)) == "retry")
        #expect(kind(AttemptOutcome(notFound, stopRequested: false)) == "failed")
        #expect(kind(AttemptOutcome(final, stopRequested: false)) == "failed")
        // The task cancelled without a stop request is not a pause: it fails.
        #expect(kind(AttemptOutcome(CancellationError(), stopRequested: false)) == "failed")
        #expect(AttemptOutcome.stopped.error is CancellationError)
        #expect(AttemptOutcome.done.error == nil && AttemptOutcome.stepAside.error == nil)
    }

    private func kind(_ outcome: AttemptOutcome) -> String {
        switch outcome {
        case .done: "done"
        case .restart: "restart"
        case .retry: "retry"
        case .stepAside: "stepAside"
        case .stopped: "stopped"
        case .failed: "failed"
        }
    }
}
