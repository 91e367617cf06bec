import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import NIOHTTP1
import Testing

@testable import Haul

extension TransferRulesTests {
    /// What each answer of a server means for the file: continue it, restart it, complete it, or fail.
    @Suite("Transfer rules: responses")
    struct Responses {
        @Test("a 200 is the whole file from byte 0, with its length when bound to one")
        func twoHundredIsWholeFile() {
            let rules = TransferRulesTests.strong
            #expect(
                rules.classify(
                    status: 200,
                    headers: TransferRulesTests.headers(("Content-Length", "42")),
                    to: .whole,
                    confirming: false
                )
                    == .wholeFile(length: 42)
            )
            #expect(
                rules.classify(
                    status: 200,
                    headers: TransferRulesTests.headers(("Content-Length", "42"), ("Transfer-Encoding", "chunked")),
                    to: TransferRulesTests.resumeAt1MiB,
                    confirming: false
                ) == .wholeFile(length: nil)
            )
        }

        @Test("a 206 that matches what was asked continues the file")
        func goodPartialContinues() {
            let headers = TransferRulesTests.headers(
                ("Content-Range", "bytes 983040-4194303/4194304"),
                ("Content-Length", "3211264"),
                ("ETag", TransferRulesTests.etag)
            )
            #expect(
                TransferRulesTests.strong.classify(
                    status: 206,
                    headers: headers,
                    to: TransferRulesTests.resumeAt1MiB,
                    confirming: false
                )
                    == .continues(end: 4 * TransferRulesTests.mib, learntLength: nil)
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
            let answer = TransferRulesTests.strong.classify(
                status: 206,
                headers: TransferRulesTests.headers(("Content-Range", contentRange)),
                to: TransferRulesTests.resumeAt1MiB,
                confirming: false
            )
            #expect(answer == .restart(reason))
        }

        @Test("a 206 whose validator or length disagrees restarts")
        func contradictingPartialRestarts() {
            let range = ("Content-Range", "bytes 983040-4194303/4194304")
            #expect(
                TransferRulesTests.strong.classify(
                    status: 206,
                    headers: TransferRulesTests.headers(range, ("ETag", "\"v2\"")),
                    to: TransferRulesTests.resumeAt1MiB,
                    confirming: false
                ) == .restart("206 shows another version of the file: the ETag changed from \"v1\" to \"v2\"")
            )
            #expect(
                TransferRulesTests.strong.classify(
                    status: 206,
                    headers: TransferRulesTests.headers(range, ("Content-Length", "10")),
                    to: TransferRulesTests.resumeAt1MiB,
                    confirming: false
                ) == .restart("206 Content-Length 10 disagrees with Content-Range bytes 983040-4194303/4194304")
            )
        }

        @Test("a 206 to a request that asked for no range is a failure, not a continuation")
        func unaskedPartialFails() {
            let headers = TransferRulesTests.headers(("Content-Range", "bytes 0-9/10"))
            #expect(
                TransferRulesTests.strong.classify(status: 206, headers: headers, to: .whole, confirming: false)
                    == .failure
            )
        }

        @Test("a length never known is learnt from a 206, or confirmed by one ending where the file did")
        func unknownLengthIsLearnt() {
            let opening = TransferRules.Opening.resume(offset: 100, overlap: 100, ifRange: nil)
            #expect(
                TransferRulesTests.unknown.classify(
                    status: 206,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes 0-199/200")),
                    to: opening,
                    confirming: true
                ) == .continues(end: 200, learntLength: 200)
            )
            #expect(
                TransferRulesTests.unknown.classify(
                    status: 206,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes 0-99/*")),
                    to: opening,
                    confirming: true
                ) == .continues(end: 100, learntLength: 100)
            )
            #expect(
                TransferRulesTests.unknown.classify(
                    status: 206,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes 0-149/*")),
                    to: opening,
                    confirming: true
                ) == .continues(end: 150, learntLength: nil)
            )
        }

        @Test("rule 6: a 416 is complete only when it names exactly the committed and stored length")
        func fourSixteenCompleteOnlyWhenExact() {
            let atEnd = TransferRules.Opening.resume(
                offset: 4 * TransferRulesTests.mib,
                overlap: 65536,
                ifRange: TransferRulesTests.etag
            )
            #expect(
                TransferRulesTests.strong.classify(
                    status: 416,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes */4194304")),
                    to: atEnd,
                    confirming: false
                ) == .complete(length: 4 * TransferRulesTests.mib, unconfirmed: nil)
            )
            // The file shrank below the committed offset.
            #expect(
                TransferRulesTests.strong.classify(
                    status: 416,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes */1048576")),
                    to: atEnd,
                    confirming: false
                ) == .restart("416 for bytes from 4128768 (the server says 1048576 bytes, 4194304 were committed)")
            )
            // It names the committed offset, but not the stored length.
            #expect(
                TransferRulesTests.strong.classify(
                    status: 416,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes */1048576")),
                    to: TransferRulesTests.resumeAt1MiB,
                    confirming: false
                ) == .restart("416 for bytes from 983040 (the server says 1048576 bytes, 1048576 were committed)")
            )
            #expect(
                TransferRulesTests.strong.classify(
                    status: 416,
                    headers: TransferRulesTests.headers(("Content-Range", "bytes */4194304"), ("ETag", "\"v2\"")),
                    to: atEnd,
                    confirming: false
                ) == .restart("416 from another version of the file: the ETag changed from \"v1\" to \"v2\"")
            )
            #expect(
                TransferRulesTests.strong.classify(status: 416, headers: [:], to: atEnd, confirming: false)
                    == .restart("416 for bytes from 4128768 (the server says no length, 4194304 were committed)")
            )
        }

        @Test("rule 8: confirming an end the server cannot state ends the file there, unconfirmed")
        func confirmingUnconfirmed() {
            let opening = TransferRules.Opening.resume(offset: 100, overlap: 100, ifRange: nil)
            #expect(
                TransferRulesTests.unknown.classify(status: 416, headers: [:], to: opening, confirming: true)
                    == .complete(length: 100, unconfirmed: "its 416 names no length")
            )
            #expect(
                TransferRulesTests.unknown.classify(status: 200, headers: [:], to: opening, confirming: true)
                    == .complete(length: 100, unconfirmed: "the server ignores ranges")
            )
            #expect(
                TransferRulesTests.unknown.classify(
                    status: 200,
                    headers: TransferRulesTests.headers(("Content-Length", "100")),
                    to: opening,
                    confirming: true
                )
                    == .complete(length: 100, unconfirmed: nil)
            )
            #expect(
                TransferRulesTests.unknown.classify(status: 404, headers: [:], to: opening, confirming: true)
                    == .complete(length: 100, unconfirmed: "it answered HTTP 404")
            )
            // A transient failure is retried, not taken for an answer.
            #expect(
                TransferRulesTests.unknown.classify(status: 503, headers: [:], to: opening, confirming: true)
                    == .failure
            )
            // A longer 200 is more file: the whole of it, from byte 0.
            #expect(
                TransferRulesTests.unknown.classify(
                    status: 200,
                    headers: TransferRulesTests.headers(("Content-Length", "150")),
                    to: opening,
                    confirming: true
                )
                    == .wholeFile(length: 150)
            )
        }

        @Test("a 200 confirming an end, but from another version, is that version whole")
        func confirmingAnotherVersion() {
            let rules = TransferRules(Validators(etag: TransferRulesTests.etag))
            let opening = TransferRules.Opening.resume(offset: 100, overlap: 100, ifRange: TransferRulesTests.etag)
            #expect(
                rules.classify(
                    status: 200,
                    headers: TransferRulesTests.headers(("Content-Length", "100"), ("ETag", "\"v2\"")),
                    to: opening,
                    confirming: true
                ) == .wholeFile(length: 100)
            )
        }

        @Test("any other status is the transport's failure", arguments: [404, 500, 503, 204, 301])
        func otherStatusFails(status: Int) {
            #expect(
                TransferRulesTests.strong.classify(
                    status: status,
                    headers: [:],
                    to: TransferRulesTests.resumeAt1MiB,
                    confirming: false
                ) == .failure
            )
        }

        // MARK: A segment's answer

        @Test("a segment's 206 continues it; a 200, a 416 or a 206 beyond the asked end restarts")
        func segmentAnswers() {
            let good = TransferRulesTests.headers(("Content-Range", "bytes 1048576-2097151/4194304"))
            #expect(
                TransferRulesTests.strong.classifySegment(
                    status: 206,
                    headers: good,
                    requestStart: TransferRulesTests.mib,
                    requestLast: 2 * TransferRulesTests.mib - 1
                )
                    == .continues(end: 2 * TransferRulesTests.mib)
            )
            let tooLong = TransferRulesTests.headers(("Content-Range", "bytes 1048576-4194303/4194304"))
            #expect(
                TransferRulesTests.strong.classifySegment(
                    status: 206,
                    headers: tooLong,
                    requestStart: TransferRulesTests.mib,
                    requestLast: 2 * TransferRulesTests.mib - 1
                )
                    == .restart("206 ends at 4194303, asked for at most 2097151", carriesWholeFile: false)
            )
            #expect(
                TransferRulesTests.strong.classifySegment(
                    status: 200,
                    headers: [:],
                    requestStart: TransferRulesTests.mib,
                    requestLast: nil
                )
                    == .restart("200 to a range request with If-Range", carriesWholeFile: true)
            )
            #expect(
                TransferRulesTests.strong.classifySegment(
                    status: 416,
                    headers: [:],
                    requestStart: TransferRulesTests.mib,
                    requestLast: nil
                )
                    == .restart("416 for a range inside the file (the file shrank or changed)", carriesWholeFile: false)
            )
            #expect(
                TransferRulesTests.strong.classifySegment(status: 503, headers: [:], requestStart: 0, requestLast: nil)
                    == .failure
            )
        }

        @Test("a 200 to a range request is the same file when its validators and length agree")
        func sameFileOrNot() {
            let length = ("Content-Length", "4194304")
            #expect(
                TransferRulesTests.strong.isSameFile(
                    status: 200,
                    headers: TransferRulesTests.headers(length, ("ETag", TransferRulesTests.etag))
                )
            )
            #expect(TransferRulesTests.strong.isSameFile(status: 200, headers: TransferRulesTests.headers(length)))
            #expect(
                !TransferRulesTests.strong.isSameFile(
                    status: 200,
                    headers: TransferRulesTests.headers(length, ("ETag", "\"v2\""))
                )
            )
            #expect(
                !TransferRulesTests.strong.isSameFile(
                    status: 200,
                    headers: TransferRulesTests.headers(("Content-Length", "5"))
                )
            )
            #expect(!TransferRulesTests.strong.isSameFile(status: 206, headers: TransferRulesTests.headers(length)))
            #expect(!TransferRulesTests.unknown.isSameFile(status: 200, headers: TransferRulesTests.headers(length)))
        }

        @Test("a download splits only with a validator, a length and a server that serves ranges")
        func splitting() {
            #expect(
                TransferRulesTests.strong.maySplit(
                    status: 200,
                    headers: TransferRulesTests.headers(("Accept-Ranges", "bytes"))
                )
            )
            #expect(TransferRulesTests.strong.maySplit(status: 206, headers: [:]))
            #expect(!TransferRulesTests.strong.maySplit(status: 200, headers: [:]))
            #expect(
                !TransferRulesTests.strong.maySplit(
                    status: 200,
                    headers: TransferRulesTests.headers(("Accept-Ranges", "none"))
                )
            )
            #expect(!TransferRulesTests.weak.maySplit(status: 206, headers: [:]))
            #expect(!TransferRules(Validators(etag: TransferRulesTests.etag)).maySplit(status: 206, headers: [:]))
        }
    }
}
