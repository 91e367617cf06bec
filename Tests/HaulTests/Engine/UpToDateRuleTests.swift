import Foundation
import HaulTestSupport
import NIOHTTP1
import Testing

@testable import Haul

/// `-N`'s rule on its own: when the answer to a conditional GET shows that the file already
/// at the destination is the server's current version.
@Suite("-N: is the file there up to date", .timeLimit(.minutes(1)))
struct UpToDateRuleTests {
    static let modified = Date(timeIntervalSince1970: 1_700_000_000)
    static let date = HTTPDate.format(modified)

    static func isUpToDate(_ status: Int, _ fields: [(String, String)], recorded: Validators?) -> Bool {
        TransferRules.isUpToDate(
            status: status,
            headers: HTTPHeaders(fields),
            recorded: recorded,
            size: 100,
            modified: modified
        )
    }

    @Test("a 304 is up to date, whatever else")
    func notModified() {
        #expect(Self.isUpToDate(304, [], recorded: nil))
        #expect(Self.isUpToDate(304, [("Content-Length", "7")], recorded: Validators(etag: "\"a\"")))
    }

    @Test(
        "a file this task downloaded: a 200 with its ETag and length is the same file; another ETag or length is newer"
    )
    func recordedFile() {
        let recorded = Validators(etag: "\"a\"", totalLength: 100)
        #expect(Self.isUpToDate(200, [("ETag", "\"a\""), ("Content-Length", "100")], recorded: recorded))
        #expect(!Self.isUpToDate(200, [("ETag", "\"b\""), ("Content-Length", "100")], recorded: recorded))
        #expect(!Self.isUpToDate(200, [("ETag", "\"a\""), ("Content-Length", "101")], recorded: recorded))
        #expect(!Self.isUpToDate(200, [("ETag", "\"a\"")], recorded: recorded), "no length: not proven the same")
        // Recorded by date alone: the same date and length.
        let dated = Validators(lastModified: Self.date, totalLength: 100)
        #expect(Self.isUpToDate(200, [("Last-Modified", Self.date), ("Content-Length", "100")], recorded: dated))
        #expect(
            !Self.isUpToDate(
                200,
                [("Last-Modified", HTTPDate.format(Self.modified + 60)), ("Content-Length", "100")],
                recorded: dated
            )
        )
        // Nothing recorded to compare: never the same.
        #expect(!Self.isUpToDate(200, [("Content-Length", "100")], recorded: Validators()))
    }

    @Test("a file Haul did not download: a 200 no newer than it and of its length is up to date")
    func foreignFile() {
        #expect(Self.isUpToDate(200, [("Last-Modified", Self.date), ("Content-Length", "100")], recorded: nil))
        #expect(
            !Self.isUpToDate(
                200,
                [("Last-Modified", HTTPDate.format(Self.modified + 1)), ("Content-Length", "100")],
                recorded: nil
            )
        )
        #expect(!Self.isUpToDate(200, [("Last-Modified", Self.date), ("Content-Length", "99")], recorded: nil))
        #expect(!Self.isUpToDate(200, [("Content-Length", "100")], recorded: nil), "no date: not proven older")
    }
}
