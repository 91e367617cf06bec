import Foundation
import GRDB
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import NIOHTTP1
import Testing

@testable import Haul

@Suite("Content-Range parsing", .timeLimit(.minutes(10)))
struct ContentRangeTests {
    @Test(arguments: [
        ("bytes 0-99/1000", Optional(ClosedRange<Int64>(uncheckedBounds: (0, 99))), Int64?(1000)),
        ("bytes 500-999/1000", 500...999, 1000),
        ("bytes 5000000000-5000000099/6000000000", 5_000_000_000...5_000_000_099, 6_000_000_000),
        ("bytes 0-0/*", 0...0, nil),
        ("bytes */1000", nil, 1000),
    ])
    func parsesValid(text: String, range: ClosedRange<Int64>?, total: Int64?) throws {
        let parsed = try #require(ContentRange(parsing: text))
        #expect(parsed.range == range)
        #expect(parsed.completeLength == total)
    }

    @Test(arguments: [
        "bytes=0-99/1000", "items 0-99/1000", "bytes 99-0/1000", "bytes 0-1000/1000", "bytes */*", "bytes 0-99",
        "bytes -5-99/1000", "bytes 0-99/abc", "", "bytes 0-99/1000/3",
    ])
    func rejectsMalformed(text: String) {
        #expect(ContentRange(parsing: text) == nil)
    }
}

@Suite("Validators and If-Range", .timeLimit(.minutes(10)))
struct ValidatorTests {
    @Test func strongETagIsUsed() {
        let v = Validators(
            etag: "\"abc\"",
            lastModified: "Sun, 13 Sep 2020 12:26:40 GMT",
            date: "Mon, 14 Sep 2020 00:00:00 GMT"
        )
        #expect(v.ifRangeValue == "\"abc\"")
    }

    @Test func weakETagIsNeverSentButStrongLastModifiedIs() {
        let v = Validators(
            etag: "W/\"abc\"",
            lastModified: "Sun, 13 Sep 2020 12:26:40 GMT",
            date: "Sun, 13 Sep 2020 12:26:42 GMT"
        )
        #expect(v.ifRangeValue == "Sun, 13 Sep 2020 12:26:40 GMT")
    }

    @Test("one second between rounded headers may be milliseconds: not strong")
    func lastModifiedOneSecondBeforeDateIsWeak() {
        let v = Validators(
            etag: "W/\"abc\"",
            lastModified: "Sun, 13 Sep 2020 12:26:40 GMT",
            date: "Sun, 13 Sep 2020 12:26:41 GMT"
        )
        #expect(v.ifRangeValue == nil)
    }

    @Test func lastModifiedWithinASecondOfDateIsWeak() {
        let v = Validators(
            etag: nil,
            lastModified: "Sun, 13 Sep 2020 12:26:40 GMT",
            date: "Sun, 13 Sep 2020 12:26:40 GMT"
        )
        #expect(v.ifRangeValue == nil)
        let noDate = Validators(etag: nil, lastModified: "Sun, 13 Sep 2020 12:26:40 GMT", date: nil)
        #expect(noDate.ifRangeValue == nil)
    }

    @Test func httpDateFormsParse() {
        let expected = Date(timeIntervalSince1970: 784_111_777)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPDate.parse("yesterday") == nil)
        #expect(HTTPDate.parse("  Sun, 06 Nov 1994 08:49:37 GMT ") == expected)
    }

    @Test("HTTP dates are written and read as the C library's UTC calendar has them, without it")
    func httpDateFormatMatchesGmtime() {
        var random = SeededGenerator(state: 9110)
        for round in 0..<5_000 {
            // 1900 to 2200, and the days around the epoch and the ends of centuries.
            let seconds =
                round < 40
                ? [-2_208_988_800, -1, 0, 86_399, 86_400, 951_782_400, 951_868_799, 4_107_542_400][round % 8]
                    + Int64(round / 8)
                : Int64.random(in: -2_208_988_800...7_258_118_400, using: &random)
            var time = time_t(seconds)
            var parts = tm()
            gmtime_r(&time, &parts)
            let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
            let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
            func two(_ value: Int32) -> String { String(format: "%02d", value) }
            let expected =
                "\(weekdays[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) "
                + "\(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
            let date = Date(timeIntervalSince1970: TimeInterval(seconds))
            #expect(HTTPDate.format(date) == expected, "\(seconds)")
            #expect(HTTPDate.parse(expected) == date, "\(expected)")
        }
        #expect(HTTPDate.parse("Tue, 29 Feb 2000 00:00:00 GMT") != nil)
        #expect(HTTPDate.parse("Thu, 29 Feb 2001 00:00:00 GMT") == nil)
    }

    @Test(
        "HTTP dates that are not dates are refused, without ICU",
        arguments: [
            "Sun, 31 Feb 1994 08:49:37 GMT",  // no such day
            "Sun, 06 Foo 1994 08:49:37 GMT",  // no such month
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 PST",  // HTTP dates are in GMT
            "Sun, 6 Nov 1994 08:49:37 GMT",  // IMF-fixdate has two-digit days
            "Sun, 06 Nov 199 08:49:37 GMT",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "",
        ]
    )
    func httpDateRefusals(text: String) {
        #expect(HTTPDate.parse(text) == nil)
    }

    @Test func httpDateFormatsAndRoundTrips() {
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 784_111_777)) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 0)) == "Thu, 01 Jan 1970 00:00:00 GMT")
        for seconds in stride(from: 0, to: 4_000_000_000, by: 86_399 * 97) {
            let date = Date(timeIntervalSince1970: TimeInterval(seconds))
            #expect(HTTPDate.parse(HTTPDate.format(date)) == date)
        }
        // RFC 850's two-digit years: not more than 50 years ahead ('94 is 1994 above; '60 is 2060).
        #expect(HTTPDate.parse("Thursday, 01-Jan-60 00:00:00 GMT") == Date(timeIntervalSince1970: 2_840_140_800))
    }
}

@Suite("File names", .timeLimit(.minutes(10)))
struct FileNamingTests {
    @Test(arguments: [
        ("attachment; filename=\"report.pdf\"", "report.pdf"),
        ("attachment; filename=report.pdf", "report.pdf"),
        ("attachment; filename*=UTF-8''%E2%82%AC%20rates.txt", "€ rates.txt"),
        ("attachment; filename=\"fallback.txt\"; filename*=UTF-8''na%C3%AFve.txt", "naïve.txt"),
        ("attachment; filename=\"../../etc/passwd\"", "passwd"),
        ("attachment; filename=\"..\\\\..\\\\windows\\\\evil.exe\"", "evil.exe"),
        ("attachment; filename=\".bashrc\"", "bashrc"),
        ("attachment; filename=\"a\u{0}b\u{7}c.txt\"", "abc.txt"),
        ("attachment; filename=\"semi;colon.txt\"", "semi;colon.txt"),
    ])
    func contentDisposition(header: String, expected: String) {
        let url = URL(string: "http://example.org/ignored.bin")!
        #expect(FileNaming.fileName(contentDisposition: header, url: url) == expected)
    }

    /// The tc2231 cases (greenbytes.de/tech/tc2231), with the name RFC 6266 gives: nil where
    /// the header is invalid (ignored whole) or names no file. The header as Haul receives it:
    /// NIO's parser decodes headers as UTF-8, so a raw ISO-8859-1 byte arrives as U+FFFD.
    static let tc2231: [(String, String, String?)] = [
        ("inlonly", "inline", nil),
        ("inlonlyquoted", "\"inline\"", nil),
        ("inlwithasciifilename", "inline; filename=\"foo.html\"", "foo.html"),
        ("inlwithfnattach", "inline; filename=\"Not an attachment!\"", "Not an attachment!"),
        ("attonly", "attachment", nil),
        ("attonlyquoted", "\"attachment\"", nil),
        ("attonlyucase", "ATTACHMENT", nil),
        ("attwithasciifilename", "attachment; filename=\"foo.html\"", "foo.html"),
        ("attwithasciifnescapedchar", "attachment; filename=\"f\\oo.html\"", "foo.html"),
        (
            "attwithasciifnescapedquote", "attachment; filename=\"\\\"quoting\\\" tested.html\"",
            "\"quoting\" tested.html"
        ),
        ("attwithquotedsemicolon", "attachment; filename=\"Here's a semicolon;.html\"", "Here's a semicolon;.html"),
        ("attwithfilenameandextparam", "attachment; foo=\"bar\"; filename=\"foo.html\"", "foo.html"),
        ("attwithfilenameandextparamescaped", "attachment; foo=\"\\\"\\\\\";filename=\"foo.html\"", "foo.html"),
        ("attwithasciifilenameucase", "attachment; FILENAME=\"foo.html\"", "foo.html"),
        ("attwithasciifilenamenq", "attachment; filename=foo.html", "foo.html"),
        ("attwithtokfncommanq", "attachment; filename=foo,bar.html", nil),
        ("attwithasciifilenamenqs", "attachment; filename=foo.html ;", "foo.html"),
        ("attemptyparam", "attachment; ;filename=foo", nil),
        ("attwithasciifilenamenqws", "attachment; filename=foo bar.html", nil),
        ("attwithfntokensq", "attachment; filename='foo.bar'", "'foo.bar'"),
        ("attwithisofnplain", "attachment; filename=\"foo-\u{FFFD}.html\"", nil),
        ("attwithutf8fnplain", "attachment; filename=\"foo-ä.html\"", "foo-ä.html"),
        ("attwithfnrawpctenca", "attachment; filename=\"foo-%41.html\"", "foo-%41.html"),
        ("attwithfnusingpct", "attachment; filename=\"50%.html\"", "50%.html"),
        ("attwithfnrawpctencaq", "attachment; filename=\"foo-%\\41.html\"", "foo-%41.html"),
        ("attwithnamepct", "attachment; name=\"foo-%41.html\"", nil),
        ("attwithfnrawpctenclong", "attachment; filename=\"foo-%c3%a4-%e2%82%ac.html\"", "foo-%c3%a4-%e2%82%ac.html"),
        ("attwithasciifilenamews1", "attachment; filename =\"foo.html\"", "foo.html"),
        ("attwith2filenames", "attachment; filename=\"foo.html\"; filename=\"bar.html\"", nil),
        ("attfnbrokentoken", "attachment; filename=foo[1](2).html", nil),
        ("attfnbrokentokeniso", "attachment; filename=foo-ä.html", nil),
        ("attmissingdisposition", "filename=foo.html", nil),
        ("attmissingdisposition2", "x=y; filename=foo.html", nil),
        ("attmissingdisposition3", "\"foo; filename=bar;baz\"; filename=qux", nil),
        ("attmissingdisposition4", "filename=foo.html, filename=bar.html", nil),
        ("emptydisposition", "; filename=foo.html", nil),
        ("doublecolon", ": inline; attachment; filename=foo.html", nil),
        ("attandinline", "inline; attachment; filename=foo.html", nil),
        ("attandinline2", "attachment; inline; filename=foo.html", nil),
        ("attbrokenquotedfn", "attachment; filename=\"foo.html\".txt", nil),
        ("attbrokenquotedfn2", "attachment; filename=\"bar", nil),
        ("attbrokenquotedfn3", "attachment; filename=foo\"bar;baz\"qux", nil),
        ("attmultinstances", "attachment; filename=foo.html, attachment; filename=bar.html", nil),
        ("attmissingdelim", "attachment; foo=foo filename=bar", nil),
        ("attmissingdelim2", "attachment; filename=bar foo=foo", nil),
        ("attmissingdelim3", "attachment filename=bar", nil),
        ("attreversed", "filename=foo.html; attachment", nil),
        ("attconfusedparam", "attachment; xfilename=foo.html", nil),
        ("attcdate", "attachment; creation-date=\"Wed, 12 Feb 1997 16:29:51 -0500\"", nil),
        ("dispext", "foobar", nil),
        ("dispextbadfn", "attachment; example=\"filename=example.txt\"", nil),
        ("attwithisofn2231iso", "attachment; filename*=iso-8859-1''foo-%E4.html", "foo-ä.html"),
        ("attwithfn2231utf8", "attachment; filename*=UTF-8''foo-%c3%a4-%e2%82%ac.html", "foo-ä-€.html"),
        ("attwithfn2231noc", "attachment; filename*=''foo-%c3%a4-%e2%82%ac.html", nil),
        ("attwithfn2231iso-bad", "attachment; filename*=utf-8''foo-%E4.html", nil),
        ("attwithfn2231ws1", "attachment; filename *=UTF-8''foo-%c3%a4.html", nil),
        ("attwithfn2231ws2", "attachment; filename*= UTF-8''foo-%c3%a4.html", "foo-ä.html"),
        ("attwithfn2231ws3", "attachment; filename* =UTF-8''foo-%c3%a4.html", "foo-ä.html"),
        ("attwithfn2231quot", "attachment; filename*=\"UTF-8''foo-%c3%a4.html\"", nil),
        ("attwithfn2231quot2", "attachment; filename*=\"foo%20bar.html\"", nil),
        ("attwithfn2231singleqmissing", "attachment; filename*=UTF-8'foo-%c3%a4.html", nil),
        ("attwithfn2231nbadpct1", "attachment; filename*=UTF-8''foo%", nil),
        ("attwithfn2231nbadpct2", "attachment; filename*=UTF-8''f%oo.html", nil),
        ("attwithfn2231dpct", "attachment; filename*=UTF-8''A-%2541.html", "A-%41.html"),
        ("attfnboth", "attachment; filename=\"foo-ae.html\"; filename*=UTF-8''foo-%c3%a4.html", "foo-ä.html"),
        ("attfnboth2", "attachment; filename*=UTF-8''foo-%c3%a4.html; filename=\"foo-ae.html\"", "foo-ä.html"),
        ("attnewandfn", "attachment; foobar=x; filename=\"foo.html\"", "foo.html"),
        ("attrfc2047token", "attachment; filename==?ISO-8859-1?Q?foo-=E4.html?=", nil),
        ("attrfc2047quoted", "attachment; filename=\"=?ISO-8859-1?Q?foo-=E4.html?=\"", "=?ISO-8859-1?Q?foo-=E4.html?="),
    ]

    @Test("RFC 6266 on the tc2231 cases", arguments: tc2231)
    func tc2231Case(name: String, header: String, expected: String?) {
        #expect(FileNaming.suggestedName(fromContentDisposition: header) == expected, "\(name)")
    }

    @Test(arguments: [
        "attachment; filename=\"..\"", "attachment; filename=\".\"", "attachment; filename=\"/\"",
        "attachment; filename=\"\"", "attachment; filename=\"../../\"",
    ])
    func unusableDispositionFallsBackToURL(header: String) {
        let url = URL(string: "http://example.org/files/data%20set.csv?x=1")!
        #expect(FileNaming.fileName(contentDisposition: header, url: url) == "data set.csv")
    }

    @Test func urlWithoutPathGetsHashedName() {
        let url = URL(string: "http://example.org/")!
        let name = FileNaming.fileName(contentDisposition: nil, url: url)
        #expect(name.hasPrefix("download-") && name.count == "download-".count + 16)
        #expect(
            FileNaming.fileName(contentDisposition: nil, url: URL(string: "http://example.org/..%2F..%2Fx")!) == "x"
        )
        #expect(
            FileNaming.fileName(contentDisposition: nil, url: URL(string: "http://example.org/%2E%2E")!).hasPrefix(
                "download-"
            )
        )
    }

    @Test func longNamesAreCutKeepingTheExtension() throws {
        let long = String(repeating: "é", count: 300) + ".tar.gz"
        let name = try #require(FileNaming.sanitize(long))
        #expect(name.utf8.count <= FileNaming.maxNameBytes)
        #expect(name.hasSuffix("é.tar.gz"), "whole characters, both extensions: \(name.suffix(12))")
        #expect(name.utf8.count + ".\(UUID().uuidString).part".utf8.count <= 255)
        let plain = try #require(FileNaming.sanitize(String(repeating: "a", count: 300)))
        #expect(plain == String(repeating: "a", count: FileNaming.maxNameBytes))
        // A grapheme of several scalars is kept whole or dropped whole.
        let flags = try #require(FileNaming.sanitize(String(repeating: "🇫🇷", count: 40) + ".txt"))
        #expect(flags.hasSuffix("🇫🇷.txt") && flags.utf8.count <= FileNaming.maxNameBytes)
    }
}

@Suite("Checksums", .timeLimit(.minutes(10)))
struct ChecksumTests {
    @Test func parsesAllAlgorithms() throws {
        #expect(
            try Checksum(parsing: "sha256=" + String(repeating: "A", count: 64)).hex
                == String(repeating: "a", count: 64)
        )
        #expect(try Checksum(parsing: "SHA-512:" + String(repeating: "0", count: 128)).algorithm == .sha512)
        #expect(try Checksum(parsing: "sha1=" + String(repeating: "f", count: 40)).algorithm == .sha1)
        #expect(try Checksum(parsing: "md5=" + String(repeating: "1", count: 32)).algorithm == .md5)
    }

    @Test(arguments: ["sha256", "sha256=abc", "crc32=00000000", "sha256=" + String(repeating: "g", count: 64)])
    func rejectsMalformed(text: String) async {
        await expectHaulError(.invalidArgument) { _ = try Checksum(parsing: text) }
    }
}

@Suite("Retry policy", .timeLimit(.minutes(10)))
struct RetryPolicyTests {
    @Test func backoffDoublesWithJitterAndCaps() {
        let policy = RetryPolicy(maxRetries: 5, baseDelay: .seconds(1), maxDelay: .seconds(8))
        #expect(policy.delay(attempt: 1, retryAfter: nil, random: 1) == .seconds(1))
        #expect(policy.delay(attempt: 1, retryAfter: nil, random: 0) == .milliseconds(500))
        #expect(policy.delay(attempt: 3, retryAfter: nil, random: 1) == .seconds(4))
        #expect(policy.delay(attempt: 10, retryAfter: nil, random: 1) == .seconds(8))
    }

    @Test func retryAfterWinsAndIsBounded() {
        let policy = RetryPolicy(maxRetryAfter: .seconds(60))
        #expect(policy.delay(attempt: 1, retryAfter: .seconds(7)) == .seconds(7))
        #expect(policy.delay(attempt: 1, retryAfter: .seconds(3600)) == .seconds(60))
        #expect(RetryPolicy.parseRetryAfter("120") == .seconds(120))
        let now = Date(timeIntervalSince1970: 784_111_777)
        #expect(RetryPolicy.parseRetryAfter("Sun, 06 Nov 1994 08:49:47 GMT", now: now) == .seconds(10))
        #expect(RetryPolicy.parseRetryAfter("soon") == nil)
    }

    @Test func retryableStatuses() {
        let url = URL(string: "http://x/")!
        for status in [408, 429, 500, 502, 503, 504] {
            #expect(HaulError.httpStatus(status, reason: "", url: url).isRetryable)
        }
        for status in [400, 401, 403, 404, 410, 416] {
            #expect(!HaulError.httpStatus(status, reason: "", url: url).isRetryable)
        }
    }
}

@Suite("Resume data", .timeLimit(.minutes(10)))
struct ResumeDataTests {
    func sample() -> ResumeData {
        ResumeData(
            taskID: UUID(),
            url: URL(string: "https://example.org/a.iso")!,
            finalURL: nil,
            headers: [HTTPHeaderField(name: "Authorization", value: "Bearer x")],
            validators: Validators(etag: "\"e\"", totalLength: 1000),
            destination: .file("/tmp/a.iso"),
            checksum: nil,
            overwrite: false,
            partPath: "/tmp/a.iso.part",
            segments: [.init(start: 0, end: 1000, committed: 400)]
        )
    }

    @Test func roundTrips() throws {
        let data = sample()
        let decoded = try ResumeData(decoding: data.encoded())
        #expect(decoded == data)
        #expect(decoded.bytesCommitted == 400)
    }

    @Test func rejectsGarbage() async {
        await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: Data("not json".utf8)) }
        await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: Data("{\"version\":1}".utf8)) }
    }

    @Test func rejectsUnknownVersion() async throws {
        var object = try JSONSerialization.jsonObject(with: sample().encoded()) as! [String: Any]
        object["version"] = 99
        let data = try JSONSerialization.data(withJSONObject: object)
        let error = await expectHaulError(.unsupportedResumeDataVersion) { _ = try ResumeData(decoding: data) }
        #expect(error?.description.contains("99") == true)
    }

    @Test func rejectsImpossibleSegmentsAndHostileNames() async throws {
        var inverted = sample()
        inverted.segments = [.init(start: 500, end: 1000, committed: 100)]
        await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: inverted.encoded()) }
        var beyond = sample()
        beyond.segments = [.init(start: 0, end: 5000, committed: 100)]
        await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: beyond.encoded()) }
        var hostile = sample()
        hostile.destination = Destination(directory: "/tmp", fileName: "../../etc/passwd")
        await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: hostile.encoded()) }
        var ftp = sample()
        ftp.url = URL(string: "ftp://example.org/a")!
        await expectHaulError(.unsupportedScheme) { _ = try ResumeData(decoding: ftp.encoded()) }
    }
}

@Suite("Trimming a line's spaces", .timeLimit(.minutes(1)))
struct WhitespaceTests {
    @Test(
        "spaces, tabs and Unicode spaces at either end go; text that starts and ends printable is kept whole",
        arguments: [
            ("https://h/a", "https://h/a"), (" https://h/a", "https://h/a"), ("https://h/a\t", "https://h/a"),
            ("\u{3000}https://h/a\u{00A0}", "https://h/a"), ("a b", "a b"), ("  ", ""), ("", ""), ("é", "é"),
            ("x\u{3000}", "x"),
        ]
    )
    func trims(text: String, expected: String) {
        #expect(text.trimmingWhitespace() == expected)
        #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespaces))
        #expect(Substring(text).trimmingWhitespace() == expected)
    }
}
