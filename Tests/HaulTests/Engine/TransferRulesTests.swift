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

    @Test("a 200 is the whole file from byte 0, with its length when bound to one")
    func twoHundredIsWholeFile() {
        let rules = Self.strong
        #expect(
            rules.classify(status: 200, headers: Self.headers(("Content-Length", "42")), to: .whole, confirming: false)
                == .wholeFile(length: 42)
        )
        #expect(
            rules.classify(
                status: 200,
                headers: Self.headers(("Content-Length", "42"), ("Transfer-Encoding", "chunked")),
                to: Self.resumeAt1MiB,
                confirming: false
            ) == .wholeFile(length: nil)
        )
    }

    @Test("a 206 that matches what was asked continues the file")
    func goodPartialContinues() {
        let headers = Self.headers(
            ("Content-Range", "bytes 983040-4194303/4194304"),
            ("Content-Length", "3211264"),
            ("ETag", Self.etag)
        )
        #expect(
            Self.strong.classify(status: 206, headers: headers, to: Self.resumeAt1MiB, confirming: false)
                == .continues(end: 4 * Self.mib, learntLength: nil)
        )
    }

    @Test(
        "rule 4: a 206 that does not match what was asked or what is known restarts",
        arguments: [
            ("bytes 0-4194303/4194304", "206 starts at 0, asked for 983040"),
            ("bytes 983040-4194303/5000000", "206 says the file is 5000000 bytes, was 4194304"),
            ("bytes 983040-4194303/*", "206 says the file is * bytes, was 4194304"),
            ("bytes 983040-", "206 with a missing or malformed Content-Range"),
        ]
    )
    func badPartialRestarts(contentRange: String, reason: String) {
        let answer = Self.strong.classify(
            status: 206,
            headers: Self.headers(("Content-Range", contentRange)),
            to: Self.resumeAt1MiB,
            confirming: false
        )
        #expect(answer == .restart(reason))
    }

    @Test("a 206 whose validator or length disagrees restarts")
    func contradictingPartialRestarts() {
        let range = ("Content-Range", "bytes 983040-4194303/4194304")
        #expect(
            Self.strong.classify(
                status: 206,
                headers: Self.headers(range, ("ETag", "\"v2\"")),
                to: Self.resumeAt1MiB,
                confirming: false
            ) == .restart("206 shows another version of the file: the ETag changed from \"v1\" to \"v2\"")
        )
        #expect(
            Self.strong.classify(
                status: 206,
                headers: Self.headers(range, ("Content-Length", "10")),
                to: Self.resumeAt1MiB,
                confirming: false
            ) == .restart("206 Content-Length 10 disagrees with Content-Range bytes 983040-4194303/4194304")
        )
    }

    @Test("a 206 to a request that asked for no range is a failure, not a continuation")
    func unaskedPartialFails() {
        let headers = Self.headers(("Content-Range", "bytes 0-9/10"))
        #expect(Self.strong.classify(status: 206, headers: headers, to: .whole, confirming: false) == .failure)
    }

    @Test("a length never known is learnt from a 206, or confirmed by one ending where the file did")
    func unknownLengthIsLearnt() {
        let opening = TransferRules.Opening.resume(offset: 100, overlap: 100, ifRange: nil)
        #expect(
            Self.unknown.classify(
                status: 206,
                headers: Self.headers(("Content-Range", "bytes 0-199/200")),
                to: opening,
                confirming: true
            ) == .continues(end: 200, learntLength: 200)
        )
        #expect(
            Self.unknown.classify(
                status: 206,
                headers: Self.headers(("Content-Range", "bytes 0-99/*")),
                to: opening,
                confirming: true
            ) == .continues(end: 100, learntLength: 100)
        )
        #expect(
            Self.unknown.classify(
                status: 206,
                headers: Self.headers(("Content-Range", "bytes 0-149/*")),
                to: opening,
                confirming: true
            ) == .continues(end: 150, learntLength: nil)
        )
    }

    @Test("rule 6: a 416 is complete only when it names exactly the committed and stored length")
    func fourSixteenCompleteOnlyWhenExact() {
        let atEnd = TransferRules.Opening.resume(offset: 4 * Self.mib, overlap: 65536, ifRange: Self.etag)
        #expect(
            Self.strong.classify(
                status: 416,
                headers: Self.headers(("Content-Range", "bytes */4194304")),
                to: atEnd,
                confirming: false
            ) == .complete(length: 4 * Self.mib, unconfirmed: nil)
        )
        // The file shrank below the committed offset.
        #expect(
            Self.strong.classify(
                status: 416,
                headers: Self.headers(("Content-Range", "bytes */1048576")),
                to: atEnd,
                confirming: false
            ) == .restart("416 for bytes from 4128768 (the server says 1048576 bytes, 4194304 were committed)")
        )
        // It names the committed offset, but not the stored length.
        #expect(
            Self.strong.classify(
                status: 416,
                headers: Self.headers(("Content-Range", "bytes */1048576")),
                to: Self.resumeAt1MiB,
                confirming: false
            ) == .restart("416 for bytes from 983040 (the server says 1048576 bytes, 1048576 were committed)")
        )
        #expect(
            Self.strong.classify(
                status: 416,
                headers: Self.headers(("Content-Range", "bytes */4194304"), ("ETag", "\"v2\"")),
                to: atEnd,
                confirming: false
            ) == .restart("416 from another version of the file: the ETag changed from \"v1\" to \"v2\"")
        )
        #expect(
            Self.strong.classify(status: 416, headers: [:], to: atEnd, confirming: false)
                == .restart("416 for bytes from 4128768 (the server says no length, 4194304 were committed)")
        )
    }

    @Test("rule 8: confirming an end the server cannot state ends the file there, unconfirmed")
    func confirmingUnconfirmed() {
        let opening = TransferRules.Opening.resume(offset: 100, overlap: 100, ifRange: nil)
        #expect(
            Self.unknown.classify(status: 416, headers: [:], to: opening, confirming: true)
                == .complete(length: 100, unconfirmed: "its 416 names no length")
        )
        #expect(
            Self.unknown.classify(status: 200, headers: [:], to: opening, confirming: true)
                == .complete(length: 100, unconfirmed: "the server ignores ranges")
        )
        #expect(
            Self.unknown.classify(
                status: 200,
                headers: Self.headers(("Content-Length", "100")),
                to: opening,
                confirming: true
            )
                == .complete(length: 100, unconfirmed: nil)
        )
        #expect(
            Self.unknown.classify(status: 404, headers: [:], to: opening, confirming: true)
                == .complete(length: 100, unconfirmed: "it answered HTTP 404")
        )
        // A transient failure is retried, not taken for an answer.
        #expect(Self.unknown.classify(status: 503, headers: [:], to: opening, confirming: true) == .failure)
        // A longer 200 is more file: the whole of it, from byte 0.
        #expect(
            Self.unknown.classify(
                status: 200,
                headers: Self.headers(("Content-Length", "150")),
                to: opening,
                confirming: true
            )
                == .wholeFile(length: 150)
        )
    }

    @Test("a 200 confirming an end, but from another version, is that version whole")
    func confirmingAnotherVersion() {
        let rules = TransferRules(Validators(etag: Self.etag))
        let opening = TransferRules.Opening.resume(offset: 100, overlap: 100, ifRange: Self.etag)
        #expect(
            rules.classify(
                status: 200,
                headers: Self.headers(("Content-Length", "100"), ("ETag", "\"v2\"")),
                to: opening,
                confirming: true
            ) == .wholeFile(length: 100)
        )
    }

    @Test("any other status is the transport's failure", arguments: [404, 500, 503, 204, 301])
    func otherStatusFails(status: Int) {
        #expect(
            Self.strong.classify(status: status, headers: [:], to: Self.resumeAt1MiB, confirming: false) == .failure
        )
    }

    // MARK: A segment's answer

    @Test("a segment's 206 continues it; a 200, a 416 or a 206 beyond the asked end restarts")
    func segmentAnswers() {
        let good = Self.headers(("Content-Range", "bytes 1048576-2097151/4194304"))
        #expect(
            Self.strong.classifySegment(
                status: 206,
                headers: good,
                requestStart: Self.mib,
                requestLast: 2 * Self.mib - 1
            )
                == .continues(end: 2 * Self.mib)
        )
        let tooLong = Self.headers(("Content-Range", "bytes 1048576-4194303/4194304"))
        #expect(
            Self.strong.classifySegment(
                status: 206,
                headers: tooLong,
                requestStart: Self.mib,
                requestLast: 2 * Self.mib - 1
            )
                == .restart("206 ends at 4194303, asked for at most 2097151", carriesWholeFile: false)
        )
        #expect(
            Self.strong.classifySegment(status: 200, headers: [:], requestStart: Self.mib, requestLast: nil)
                == .restart("200 to a range request with If-Range", carriesWholeFile: true)
        )
        #expect(
            Self.strong.classifySegment(status: 416, headers: [:], requestStart: Self.mib, requestLast: nil)
                == .restart("416 for a range inside the file (the file shrank or changed)", carriesWholeFile: false)
        )
        #expect(Self.strong.classifySegment(status: 503, headers: [:], requestStart: 0, requestLast: nil) == .failure)
    }

    @Test("a 200 to a range request is the same file when its validators and length agree")
    func sameFileOrNot() {
        let length = ("Content-Length", "4194304")
        #expect(Self.strong.isSameFile(status: 200, headers: Self.headers(length, ("ETag", Self.etag))))
        #expect(Self.strong.isSameFile(status: 200, headers: Self.headers(length)))
        #expect(!Self.strong.isSameFile(status: 200, headers: Self.headers(length, ("ETag", "\"v2\""))))
        #expect(!Self.strong.isSameFile(status: 200, headers: Self.headers(("Content-Length", "5"))))
        #expect(!Self.strong.isSameFile(status: 206, headers: Self.headers(length)))
        #expect(!Self.unknown.isSameFile(status: 200, headers: Self.headers(length)))
    }

    @Test("a download splits only with a validator, a length and a server that serves ranges")
    func splitting() {
        #expect(Self.strong.maySplit(status: 200, headers: Self.headers(("Accept-Ranges", "bytes"))))
        #expect(Self.strong.maySplit(status: 206, headers: [:]))
        #expect(!Self.strong.maySplit(status: 200, headers: [:]))
        #expect(!Self.strong.maySplit(status: 200, headers: Self.headers(("Accept-Ranges", "none"))))
        #expect(!Self.weak.maySplit(status: 206, headers: [:]))
        #expect(!TransferRules(Validators(etag: Self.etag)).maySplit(status: 206, headers: [:]))
    }

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
