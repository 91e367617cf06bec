import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Waiting before a retry: said while it happens, and never longer than allowed.
@Suite("Retries and Retry-After", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct RetryTests {
    @Test(
        "a Retry-After longer than the patience fails at once, saying what the server asked",
        arguments: ["999999999", "99999999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"]
    )
    func retryAfterBeyondPatience(value: String) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 100_000, failFirst: 1, retryAfter: value))
            let started = ContinuousClock.now
            let error = await expectHaulError(.httpStatus) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            }
            #expect(ContinuousClock.now - started < .seconds(30))
            #expect(error?.status == 503)
            #expect(error?.isRetryable == false)
            #expect(error?.description.contains("the server asked to wait") == true, "\(error?.description ?? "")")
            #expect(error?.description.contains("days before trying again (Retry-After)") == true)
            #expect(error?.description.contains("--retry-max-wait") == true)
            #expect(server.requests(for: "/f.bin").count == 1)
        }
    }

    @Test("a short Retry-After is waited out, and the progress says why it waits and who asked")
    func retryAfterShownWhileWaiting() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 100_000, failFirst: 1, retryAfter: "2"))
            let task = try await downloader.download(
                DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
            )
            #expect(try await waitUntil { task.progress.waiting != nil })
            let waiting = try #require(task.progress.waiting)
            #expect(waiting.serverAsked)
            #expect(waiting.delay == .seconds(2))
            #expect(waiting.reason.hasPrefix("HTTP 503"))
            let result = try await task.result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(task.progress.waiting == nil)
        }
    }

    @Test("haul get --retry-max-wait: a longer Retry-After fails with exit 1 and the reason in one line")
    func retryMaxWaitOption() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 100_000, failFirst: 1, retryAfter: "60"))
            let result = try await HaulProcess.run(
                ["get", "--retry-max-wait", "5", server.url("/f.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 6)
            let last = try #require(result.stderr.split(separator: "\n").last)
            #expect(last.hasPrefix("haul: error: HTTP 503"))
            #expect(
                last.contains(
                    "the server asked to wait 60 s before trying again (Retry-After), longer than the 5 s Haul waits"
                )
            )
        }
    }
}
