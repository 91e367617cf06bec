import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

@Suite("Server faults, redirects, names and bad input", .timeLimit(.minutes(10)))
struct FaultTests {
    @Test("5xx and 429 are retried from the last checkpoint", arguments: [500, 503, 429, 408])
    func retryableStatuses(status: Int) async throws {
        try await withHarness { server, downloader, temp in
            server.set(
                "/f.bin",
                .init(size: 200_000, failFirst: 2, failStatus: status, retryAfter: status == 429 ? "0" : nil)
            )
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 3)
        }
    }

    @Test("retries are bounded; the error names the status")
    func retriesExhausted() async throws {
        try await withHarness(retries: 2) { server, downloader, temp in
            server.set("/f.bin", .init(size: 1000, failFirst: 100, failStatus: 503))
            let error = await expectHaulError(.httpStatus) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            }
            #expect(error?.status == 503)
            #expect(error?.description.contains("HTTP 503") == true)
            #expect(server.requests(for: "/f.bin").count == 3)
        }
    }

    @Test("other 4xx fail at once with the status", arguments: [400, 401, 403, 404, 410])
    func clientErrorsFailAtOnce(status: Int) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 1000, failFirst: 100, failStatus: status))
            let error = await expectHaulError(.httpStatus) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            }
            #expect(error?.status == status)
            #expect(error?.description.hasPrefix("HTTP \(status)") == true)
            #expect(server.requests(for: "/f.bin").count == 1)
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
        }
    }

    @Test("a connection refused is retried, then reported")
    func connectionRefused() async throws {
        let temp = try TemporaryDirectory()
        // A port bound and not listening, held for the whole test: a free port let go could be
        // taken by another test's server meanwhile, and answer.
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }
        let url = URL(string: "http://127.0.0.1:\(refusing.port)/gone.bin")!
        try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("s.sqlite"), retries: 1))
        {
            downloader in
            await expectHaulError(.connection) {
                _ = try await downloader.download(DownloadRequest(url: url, destination: .directory(temp.path)))
                    .result()
            }
        }
    }

    @Test("redirects are followed and the Range survives them")
    func redirects() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/real.bin", .init(size: 2 << 20, cutAfter: 500_000, faultyResponses: 1))
            server.set("/start", .redirect(to: "/middle", status: 301))
            server.set("/middle", .redirect(to: server.url("/real.bin").absoluteString, status: 307))
            let result = try await fetch(server, "/start", with: downloader, into: temp.path, name: "out.bin")
            #expect(sha256(file: result.path) == server.sha256("/real.bin"))
            #expect(server.requests(for: "/real.bin").last?.header("Range")?.hasPrefix("bytes=") == true)
        }
    }

    @Test(
        "a redirect to a non-HTTP scheme is refused",
        arguments: ["ftp://127.0.0.1/x", "file:///etc/passwd", "unix:///tmp/s"]
    )
    func redirectToOtherScheme(location: String) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/start", .redirect(to: location))
            let error = await expectHaulError(.unsupportedRedirect) {
                _ = try await fetch(server, "/start", with: downloader, into: temp.path)
            }
            #expect(error?.description.contains("only http and https") == true)
            let left = try FileManager.default.contentsOfDirectory(atPath: temp.path).filter { $0 != "home" }
            #expect(left.isEmpty)
        }
    }

    @Test("redirect loops stop")
    func redirectLoop() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/a", .redirect(to: "/b"))
            server.set("/b", .redirect(to: "/a"))
            await expectHaulError(.tooManyRedirects) {
                _ = try await fetch(server, "/a", with: downloader, into: temp.path)
            }
            #expect(server.requests.count == 11)
        }
    }

    @Test(
        "Content-Disposition names are used, sanitised and kept inside the directory",
        arguments: [
            ("attachment; filename=\"../../escape.txt\"", "escape.txt"),
            ("attachment; filename*=UTF-8''%E2%82%AC%20rates.txt", "€ rates.txt"),
            ("attachment; filename=\"/etc/passwd\"", "passwd"),
            ("attachment; filename=\"..\"", "f.bin"),
        ]
    )
    func contentDispositionNames(header: String, expected: String) async throws {
        try await withHarness { server, downloader, temp in
            let downloads = try temp.directory("downloads")
            server.set("/f.bin", .init(size: 10_000, contentDisposition: header))
            let result = try await fetch(server, "/f.bin", with: downloader, into: downloads)
            #expect(result.path == (downloads as NSString).appendingPathComponent(expected))
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let names = try FileManager.default.contentsOfDirectory(atPath: downloads)
            #expect(names == [expected])
        }
    }

    @Test("an existing file is not overwritten without overwrite, and is with it")
    func existingDestination() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 10_000))
            let path = temp.file("f.bin")
            _ = FileManager.default.createFile(atPath: path, contents: Data("mine".utf8))
            let error = await expectHaulError(.destinationExists) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            }
            #expect(error?.description.contains("--force") == true)
            #expect(FileManager.default.contents(atPath: path) == Data("mine".utf8))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path, overwrite: true)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
        }
    }

    @Test("a completed download whose file is in place completes again without a request")
    func alreadyComplete() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 10_000))
            _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            let again = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(again.alreadyComplete)
            #expect(server.requests(for: "/f.bin").count == 1)
        }
    }

    @Test(
        "malformed URLs and other schemes are refused before any request",
        arguments: [
            ("", HaulError.Code.invalidURL), ("not a url", .invalidURL), ("http://", .invalidURL),
            ("ftp://example.org/file", .unsupportedScheme), ("file:///etc/passwd", .unsupportedScheme),
            ("javascript:alert(1)", .unsupportedScheme),
        ]
    )
    func badURLs(text: String, code: HaulError.Code) async throws {
        await expectHaulError(code) { _ = try DownloadRequest.parseURL(text) }
    }

    @Test("an unusable destination directory is a clear error", arguments: ["/nonexistent/haul/dir", "/proc"])
    func unwritableDirectory(directory: String) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 1000))
            let error = await expectHaulError(.fileSystem) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: directory)
            }
            #expect(error?.description.contains(directory) == true)
        }
    }

    @Test("custom headers are sent; credentials are dropped on a redirect to another host")
    func customHeaders() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 1000))
            server.set("/away", .redirect(to: "http://localhost:\(server.port)/f.bin"))
            let request = DownloadRequest(
                url: server.url("/away"),
                destination: .file(temp.file("x.bin")),
                headers: [
                    try HTTPHeaderField(parsing: "Authorization: Bearer secret"),
                    try HTTPHeaderField(parsing: "X-Trace: 42"),
                    try HTTPHeaderField(parsing: "Accept-Encoding: gzip"),
                ]
            )
            _ = try await downloader.download(request).result()
            let first = try #require(server.requests(for: "/away").first)
            #expect(first.header("Authorization") == "Bearer secret")
            #expect(first.header("X-Trace") == "42")
            #expect(first.header("Accept-Encoding") == "identity")
            let second = try #require(server.requests(for: "/f.bin").first)
            #expect(second.header("Authorization") == nil)
            #expect(second.header("X-Trace") == "42")
        }
        await expectHaulError(.invalidArgument) { _ = try HTTPHeaderField(parsing: "no colon") }
        await expectHaulError(.invalidArgument) { _ = try HTTPHeaderField(parsing: "Bad Name: x") }
    }
}
