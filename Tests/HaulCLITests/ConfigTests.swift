import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul
@testable import HaulCLI

/// The configuration file: defaults for `haul get`, `haul add` and `haul daemon`, the
/// command line winning, as wget's `.wgetrc` and aria2's `aria2.conf`.
@Suite("Configuration file", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct ConfigTests {
    static func write(_ text: String, to path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true
        )
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test("a rate limit in the file is lifted for one command by 0: --limit-rate 0 and --total-limit-rate 0 mean none")
    func zeroLiftsALimit() async throws {
        let temp = try TemporaryDirectory()
        let config = temp.file("haul.toml")
        // Limits the file sets, high enough that the download ends whatever happens to them:
        // what shows the per-file one lifted is the task's record, not a speed.
        try Self.write("limit-rate = \"1G\"\n\n[get]\ntotal-limit-rate = \"1G\"\n", to: config)
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 200_000, seed: 5))
            server.set("/g.bin", .init(size: 200_000, seed: 6))
            let lifted = try await HaulProcess.get(
                ["--limit-rate", "0", "--total-limit-rate", "0", "-d", temp.path, server.url("/f.bin").absoluteString],
                in: temp,
                environment: ["HAUL_CONFIG": config]
            )
            #expect(lifted.status == 0, "\(lifted.stderr)")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            // The file's limit without the override, for comparison: recorded with the task.
            let kept = try await HaulProcess.get(
                ["-d", temp.path, server.url("/g.bin").absoluteString],
                in: temp,
                environment: ["HAUL_CONFIG": config]
            )
            #expect(kept.status == 0, "\(kept.stderr)")
            let tasks = try await Store(path: temp.file("home/haul.sqlite")).allTasks()
            let limits = Dictionary(uniqueKeysWithValues: tasks.map { ($0.url.lastPathComponent, $0.rateLimit) })
            #expect(limits["f.bin"] == .some(nil), "--limit-rate 0 leaves the task without a limit: \(limits)")
            #expect(limits["g.bin"] == .some(1 << 30), "the file's limit applies without it: \(limits)")
        }
    }

    @Test("the file's defaults apply; an option on the command line wins over them")
    func precedence() async throws {
        let temp = try TemporaryDirectory()
        let config = temp.file("haul.toml")
        try Self.write(
            """
            # Every download: one connection, this header, the time of writing.
            connections = 1
            header = ["X-Config: yes"]
            remote-time = false

            [get]
            directory = "\(temp.file("from-config"))"
            """,
            to: config
        )
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 100_000, lastModified: Date(timeIntervalSince1970: 1_500_000_000)))
            server.set("/b.bin", .init(size: 100_000, seed: 2))
            let started = Date().addingTimeInterval(-2)
            let first = try await HaulProcess.get(
                [server.url("/a.bin").absoluteString],
                in: temp,
                environment: ["HAUL_CONFIG": config]
            )
            #expect(first.status == 0, "\(first.stderr)")
            #expect(sha256(file: temp.file("from-config/a.bin")) == server.sha256("/a.bin"), "-d from the file")
            #expect(server.requests(for: "/a.bin").first?.header("X-Config") == "yes")
            let modified =
                try FileManager.default.attributesOfItem(atPath: temp.file("from-config/a.bin"))[
                    .modificationDate
                ] as? Date
            #expect(modified.map { $0 >= started } == true, "remote-time = false: the time of writing")

            let second = try await HaulProcess.get(
                ["-d", temp.file("from-cli"), "-H", "X-Cli: 1", server.url("/b.bin").absoluteString],
                in: temp,
                environment: ["HAUL_CONFIG": config]
            )
            #expect(second.status == 0, "\(second.stderr)")
            #expect(sha256(file: temp.file("from-cli/b.bin")) == server.sha256("/b.bin"), "-d on the command line wins")
            let seen = try #require(server.requests(for: "/b.bin").first)
            #expect(seen.header("X-Cli") == "1")
            #expect(seen.header("X-Config") == nil, "-H on the command line replaces the file's headers")
        }
    }

    @Test("haul config show: each setting, its value and its source; the XDG location")
    func show() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try Self.write(
            """
            limit-rate = "5M"
            [add]
            session = "nightly"
            """,
            to: home + "/config/haul/config.toml"
        )
        let result = try await HaulProcess(
            ["config", "show", "--json"],
            home: home,
            environment: ["https_proxy": "http://alice:s3cret@proxy.corp:3128"]
        ).finish()
        #expect(result.status == 0, "\(result.stderr)")
        struct Listing: Decodable {
            struct Row: Decodable, Equatable {
                var command, key, value, source: String
            }
            var file: String
            var fileChosenBy: String
            var fileExists: Bool
            var settings: [Row]
        }
        let listing = try JSONDecoder().decode(Listing.self, from: Data(result.stdout.utf8))
        #expect(listing.file == home + "/config/haul/config.toml")
        #expect(listing.fileChosenBy == "XDG_CONFIG_HOME" && listing.fileExists)
        func row(_ command: String, _ key: String) -> Listing.Row? {
            listing.settings.first { $0.command == command && $0.key == key }
        }
        #expect(row("get", "limit-rate") == .init(command: "get", key: "limit-rate", value: "5M", source: "config"))
        #expect(row("add", "session")?.source == "config [add]")
        #expect(row("add", "session")?.value == "nightly")
        #expect(row("get", "session") == nil, "session is not an option of haul get")
        #expect(row("get", "connections")?.source == "default")
        #expect(row("get", "proxy")?.source == "environment https_proxy")
        #expect(row("get", "proxy")?.value.contains("s3cret") == false, "no secrets shown")
        #expect(row("daemon", "proxy") == nil)
        let text = try await HaulProcess.run(["config", "show"], home: home)
        #expect(text.stdout.contains("limit-rate"), "\(text.stdout)")
    }

    @Test("haul add takes [add]'s defaults: its tasks join the file's session")
    func addTakesItsTable() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try Self.write("[add]\nsession = \"nightly\"\npriority = 7\n", to: home + "/config/haul/config.toml")
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 50_000))
            let added = try await HaulProcess.run(
                ["add", "--json", "-d", temp.path, server.url("/a.bin").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            let tasks = try JSONSerialization.jsonObject(with: Data(added.stdout.utf8)) as? [[String: Any]]
            #expect(tasks?.first?["session"] as? String == "nightly", "\(added.stdout)")
            #expect(tasks?.first?["priority"] as? Int == 7, "\(added.stdout)")
            _ = try await HaulProcess.run(["wait"], home: home)
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }

    @Test(arguments: [
        ("bogus = 1\n", "unknown key 'bogus'"),
        ("[get]\nsession = \"x\"\n", "session is not an option of haul get"),
        ("connections = true\n", "connections must be a string or a number, not bool"),
        ("connections = \"lots\"\n", "The value 'lots' is invalid for '--connections"),
        ("connections = [\n", "line 1"),
        // Issue 32: a NUL ended the file without a word, an escaped one cut a value short;
        // values checked only once the download began were refused without the file's name;
        // a negative number was taken for an option.
        ("connections = 4\n\u{0}\nbogus = 1\n", "line 2: a control character (U+0000)"),
        ("directory = \"/tmp/a\\u0000b\"\n", "line 1: the escape \\u0000 stands for a control character"),
        ("header = \"bad\"\n", "Invalid header 'bad'"),
        ("proxy = \"ftp://proxy.example\"\n", "has the scheme 'ftp'"),
        ("on-complete = \"/nonexistent/hook\"\n", "--on-complete /nonexistent/hook: no executable file there"),
        ("max-concurrent = -1\n", "--max-concurrent must be from 1 to 1000"),
        ("retry-max-wait = 1e308\n", "--retry-max-wait must be from 0 to 31536000 seconds"),
    ])
    func badFile(text: String, message: String) async throws {
        let temp = try TemporaryDirectory()
        try Self.write(text, to: temp.file("haul.toml"))
        let result = try await HaulProcess.get(
            ["http://127.0.0.1:1/x"],
            in: temp,
            environment: ["HAUL_CONFIG": temp.file("haul.toml")]
        )
        #expect(result.status == 2)
        #expect(result.stderr.contains(temp.file("haul.toml")), "the file is named: \(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test(
        "escapes that stand for control characters are found as the regular expression found them, in 20,000 drawn texts"
    )
    func controlEscapesScanned() {
        let parts = [
            "\\", "\\u00", "\\U0000", "\\U000000", "u", "U", "0", "1", "7", "7F", "7f", "1f", "0a", "f", "F", "a", "g",
            "00",
            "\n", "\"", "é",
        ]
        var random = SeededGenerator(state: 32)
        var found = 0
        for round in 0..<20_000 {
            let text = (0..<Int.random(in: 1...12, using: &random)).map { _ in parts.randomElement(using: &random)! }
                .joined()
            // TOML's \U takes eight digits: the expression of before took six, and refused
            // \U00000041 ("A") and \U000001F6 ("Ƕ") as control characters.
            let expected = text.firstMatch(of: #/\\(u00[01][0-9A-Fa-f]|u007[Ff]|U000000[01][0-9A-Fa-f]|U0000007[Ff])/#)
                .map { (String($0.output.0), text[..<$0.range.lowerBound].filter { $0 == "\n" }.count + 1) }
            let scanned = ConfigFile.controlEscape(in: text)
            #expect(
                scanned?.escape == expected?.0 && scanned?.line == expected?.1,
                "round \(round): \(text.debugDescription)"
            )
            if expected != nil { found += 1 }
        }
        #expect(found > 2_000, "the texts drawn hold such escapes")
        #expect(ConfigFile.controlEscape(in: "a = \"\\U00000041\\U000001F6\"") == nil)
        #expect(ConfigFile.controlEscape(in: "a = 1\nb = \"\\U0000007f\"")! == ("\\U0000007f", 2))
    }

    @Test func missingNamedFile() async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.get(
            ["http://127.0.0.1:1/x"],
            in: temp,
            environment: ["HAUL_CONFIG": temp.file("nope.toml")]
        )
        #expect(result.status == 2)
        #expect(result.stderr.contains("HAUL_CONFIG names \(temp.file("nope.toml")), which does not exist"))
    }
}
