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
            // A scheme glued to the word before it counts from its first letter.
            ("see:https://u:SECRET@h/x", "see:https://u:***@h/x"),
            ("1https://SECRET@h/x", "1https://***@h/x"),
            ("(https://h/a?token=SECRET).", "(https://h/a?token=***)."),
            ("https://h/a?token=", "https://h/a?token=***"),
            ("https://h/ä?pass=SECRET\u{2003}and", "https://h/ä?pass=***\u{2003}and"),
        ]
    )
    func redactsText(input: String, expected: String) {
        #expect(Redaction.text(input) == expected)
    }

    /// The rules as regular expressions (what Haul ran before it scanned the text itself), less
    /// the word boundary before the scheme, which let a glued scheme keep its password.
    static func reference(_ text: String) -> String {
        var result = text.replacing(#/(?i)([a-z][a-z0-9+.\-]*://)([^/?#\s]*)@/#) { match in
            let (_, scheme, userInfo) = match.output
            return "\(scheme)\(userInfo.contains(":") ? "\(userInfo.prefix { $0 != ":" }):***" : "***")@"
        }
        result = result.replacing(#/([?&;])([A-Za-z0-9_.\-]+)=[^&#;\s"']*?(?=[)\]>,.]*(?:[&#;\s"']|$))/#) { match in
            let (_, separator, name) = match.output
            guard Redaction.secretParameters.contains(name.lowercased()) else { return String(match.output.0) }
            return "\(separator)\(name)=***"
        }
        return result
    }

    @Test("the scan hides what the regular expressions hide, in 20,000 texts drawn from URL parts")
    func scanMatchesTheExpressions() {
        let parts = [
            "http://", "a1://", "u", ":", "p@", "@", "/", "?token=", "&KEY=", ";x=", "?", "&", ";", "=", " ", ")", ".",
            ",", "#", "\"", "'", "1", "_", "é", "\n", "]", "s",
        ]
        var random = SeededGenerator(state: 36)
        var hidden = 0
        for round in 0..<20_000 {
            let text = (0..<Int.random(in: 1...14, using: &random)).map { _ in parts.randomElement(using: &random)! }
                .joined()
            let expected = Self.reference(text)
            #expect(Redaction.text(text) == expected, "round \(round): \(text)")
            if expected != text { hidden += 1 }
        }
        #expect(hidden > 4_000, "the texts drawn hold secrets to hide")
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
