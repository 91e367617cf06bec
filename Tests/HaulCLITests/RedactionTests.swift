import Foundation
import HaulClient
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Credentials and tokens in URLs are never shown or logged (issue 11 item 10).
@Suite("Secrets in URLs", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct RedactionTests {
    @Test(
        "passwords, user-name tokens and secret query values are hidden; other text is kept",
        arguments: [
            ("https://alice:SECRET@example.org/a.iso", "https://alice:***@example.org/a.iso"),
            ("https://SECRET@example.org/a", "https://***@example.org/a"),
            ("Invalid URL 'http://u:SE@CRET@h/x'", "Invalid URL 'http://u:***@h/x'"),
            ("https://h/a?token=SECRET&x=1", "https://h/a?token=***&x=1"),
            (
                "https://b.s3.amazonaws.com/k?X-Amz-Credential=SECRET&X-Amz-Date=20261123&X-Amz-Signature=SECRET",
                "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Date=20261123&X-Amz-Signature=***"
            ),
            (
                "failed: HTTP 404 for https://u:SECRET@h/x (try https://h/y?sig=SECRET)",
                "failed: HTTP 404 for https://u:***@h/x (try https://h/y?sig=***)"
            ),
            (
                "mail alice@example.org about https://h/?keyboard=1",
                "mail alice@example.org about https://h/?keyboard=1"
            ),
            ("https://h/a?monkey=1&key=SECRET#frag", "https://h/a?monkey=1&key=***#frag"),
        ]
    )
    func redactsText(input: String, expected: String) {
        #expect(Redaction.text(input) == expected)
    }

    @Test("errors and encoded task values never carry the secret; the value in memory keeps the real URL")
    func errorsAndValues() throws {
        let url = URL(string: "https://alice:SECRET@example.org/a?access_token=SECRET")!
        var error = HaulError(.connection, "Cancelled \(url.absoluteString)", url: url, hint: "See \(url)")
        error.message = "downloads[0]: \(url.absoluteString)"
        #expect(!error.description.contains("SECRET"))
        #expect(!error.message.contains("SECRET") && error.hint?.contains("SECRET") == false)
        #expect(error.url == url)

        let info = DownloadInfo(
            id: UUID(),
            url: url,
            path: nil,
            directory: "/d",
            state: .failed,
            priority: 0,
            bytesCommitted: 0,
            totalBytes: nil,
            errorMessage: "HTTP 404 for \(url.absoluteString)",
            session: "s"
        )
        #expect(info.url == url)
        let json = String(decoding: try HaulJSON.encoder().encode(info), as: UTF8.self)
        #expect(!json.contains("SECRET"), "\(json)")
        #expect(json.contains("alice:***@example.org"))
        let record = EventRecord(.added(info))
        #expect(record.url == "https://alice:***@example.org/a?access_token=***")
    }

    @Test("haul add, list, events, wait, get and the daemon's log never show a URL's password or token")
    func nothingShowsTheSecret() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 300_000, seed: 4))
            let port = server.url("/").port!
            let good = "http://alice:SECRET1@127.0.0.1:\(port)/f.bin?token=SECRET2"
            let missing = "http://SECRET3@127.0.0.1:\(port)/missing?sig=SECRET4"
            var shown: [String] = []

            // `haul add` starts the daemon (logging to daemon.log at debug level).
            let started = try await HaulProcess.run(["daemon", "--log-level", "debug"], home: home)
            #expect(started.status == 0, "\(started.stderr)")
            let added = try await HaulProcess.run(["add", "--session", "s", "-d", out, good, missing], home: home)
            #expect(added.status == 0, "\(added.stderr)")
            shown += [added.stdout, added.stderr]
            let waited = try await HaulProcess.run(["wait", "--session", "s"], home: home)
            #expect(waited.status == 6, "one task fails with a 404, and wait says its class: \(waited.stderr)")
            shown += [waited.stdout, waited.stderr]
            #expect(sha256(file: out + "/f.bin") == server.sha256("/f.bin"))
            for arguments in [["list"], ["list", "--json"], ["events", "--session", "s", "--no-follow", "--json"]] {
                let result = try await HaulProcess.run(arguments, home: home)
                #expect(result.status == 0, "\(arguments): \(result.stderr)")
                shown += [result.stdout, result.stderr]
            }
            #expect(shown.joined().contains("alice:***@127.0.0.1"), "the URL is still shown, redacted")
            let client = HaulClient(home: HaulHome(path: home))
            let failed = try await client.tasks(session: "s").first { $0.state == .failed }
            #expect(failed?.errorMessage?.contains("404") == true)
            #expect(failed?.errorCode == .httpStatus)
            try await client.shutdown()

            // `haul get` failing on such a URL.
            let get = try await HaulProcess.run(["get", "-d", out, missing], home: home)
            #expect(get.status == 1)
            shown += [get.stdout, get.stderr]

            let stopped = try await HaulProcess.run(["daemon", "stop"], home: home)
            #expect(stopped.status == 0, "\(stopped.stderr)")
            let log = (try? String(contentsOfFile: home + "/daemon.log", encoding: .utf8)) ?? ""
            #expect(log.contains("GET"), "the debug log names the requests")
            shown.append(log)
            for (index, text) in shown.enumerated() {
                for secret in ["SECRET1", "SECRET2", "SECRET3", "SECRET4"] {
                    #expect(!text.contains(secret), "output \(index) shows \(secret): \(text)")
                }
            }
        }
    }
}
