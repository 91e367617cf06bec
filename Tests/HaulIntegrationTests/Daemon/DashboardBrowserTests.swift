import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul
@testable import HaulDaemon

/// The dashboard in a real browser: headless Chromium (Debian's), driven by Selenium (PyPI)
/// through Tests/dashboard/drive.py against a daemon on TCP and nginx. The script logs in
/// with the link `haul ui` prints, adds a download, watches its bar move, pauses and resumes
/// it, adds another with the keyboard only, changes the global limits and removes all; this test judges
/// what the script saw against what the daemon did and what nginx served. Screenshots go to
/// .build/test-artifacts/dashboard.
@Suite("Dashboard in a browser", .serialized, .postgresServer, .quietNetwork, .timeLimit(.minutes(10)))
struct DashboardBrowserTests {
    static let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    static let chromedriver = ExternalServer.findExecutable("chromedriver")

    static let artifacts = TestPaths.file(".build/test-artifacts/dashboard")

    @Test(
        "log in, add, watch it move, pause, resume to 100 %, add by keyboard, change the limits, remove all; no console errors",
        arguments: StoreEngine.allCases
    )
    func drive(engine: StoreEngine) async throws {
        guard let python = TestPaths.python, let chromium = Self.chromium,
            let chromedriver = Self.chromedriver, ExternalServer.nginx != nil
        else {
            if ExternalServer.isCI {
                Issue.record(
                    "Chromium, chromedriver, nginx and selenium (.build/test-python) are needed; .ci/run installs them"
                )
            }
            return
        }
        try FileManager.default.createDirectory(atPath: Self.artifacts, withIntermediateDirectories: true)
        for name in ["progress", "paused", "completed", "dashboard", "phone", "failure"] {
            try? FileManager.default.removeItem(atPath: "\(Self.artifacts)/\(name).png")
        }
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        // 6 MiB at 512 KiB/s over one connection: twelve seconds to watch, pause and resume,
        // however slowly a loaded machine drives the browser.
        try await ExternalServer.with(try await ExternalServer.startNginx(slowRate: "512k")) { nginx in
            let big = TestContent.bytes(count: 6 << 20, seed: 61)
            let small = TestContent.bytes(count: 300_000, seed: 62)
            try Data(big).write(to: URL(fileURLWithPath: nginx.root + "/big.bin"))
            try Data(small).write(to: URL(fileURLWithPath: nginx.root + "/small.bin"))
            try await withDaemon(on: engine, home: temp.file("home"), listen: ("127.0.0.1", 0)) { client, _ in
                let link = try await client.loginLink()
                let script = TestPaths.file("Tests/dashboard/drive.py")
                let (status, output) = try await Command.run(
                    python,
                    [
                        script, link.url, nginx.url("/slow/big.bin").absoluteString,
                        nginx.url("/small.bin").absoluteString, out, Self.artifacts, chromium, chromedriver,
                    ]
                )
                #expect(status == 0, "\(output.suffix(4000))")
                let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(output)")
                let seen = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])

                // Logged in: the link led to the page, which knew the daemon's directory.
                #expect((seen["landed"] as? String)?.hasSuffix("/") == true, "the code left in the address bar")
                #expect(seen["cookies"] as? [String] == [], "a cookie every port of the host would receive")
                #expect(seen["sessionKept"] as? Bool == true)
                #expect(seen["prefilledDirectory"] as? String == (try await client.status().directory))
                // The bar moved through values between 0 and 100 before it reached 100.
                let percents = seen["percents"] as? [Int] ?? []
                #expect(percents.filter { $0 > 0 && $0 < 100 }.count >= 2, "\(percents)")
                #expect(percents.last == 100, "\(percents)")
                let states = seen["states"] as? [String] ?? []
                #expect(states.first == "running" || states.first == "queued", "\(states)")
                #expect(states.contains("paused") && states.last == "completed", "\(states)")
                let pausedAt = try #require(seen["pausedAt"] as? Int)
                // Paused with data on disk; on a loaded machine the click can land after the
                // last byte and before the check and rename, which is a pause too (the resume
                // then verifies without fetching the file again).
                #expect(pausedAt > 0 && pausedAt <= 100)
                #expect(seen["keyboardReachedURLs"] as? Bool == true)
                #expect(seen["keyboardReachedAdd"] as? Bool == true)
                #expect(seen["limitsShown"] as? [String] == ["2", "512"])
                #expect(seen["phoneOverflow"] as? Bool == false, "the page is wider than a phone")
                let peak = seen["graphPeak"] as? String ?? ""
                #expect(peak.hasPrefix("peak ") && !peak.hasPrefix("peak 0 B/s"), "\(peak)")
                let console = seen["console"] as? [Any] ?? ["not read"]
                #expect(console.isEmpty, "the page's console: \(console)")

                // What the daemon did: both downloads completed and then removed with "Remove
                // all", the files whole and kept, and the limits changed.
                let shown = seen["tasks"] as? [[Any]] ?? []
                #expect(shown.count == 2 && shown.allSatisfy { $0.first as? String == "completed" }, "\(shown)")
                #expect(seen["afterRemoveAll"] as? Int == 0)
                #expect(try await client.tasks().isEmpty)
                // The form's connections reached the daemon: one connection, so one request
                // before the pause and one ranged request after it.
                #expect(nginx.accessLog().filter { $0.first == "/slow/big.bin" }.count == 2)
                #expect(sha256(file: out + "/big.bin") == TestContent.sha256(big))
                #expect(sha256(file: out + "/small.bin") == TestContent.sha256(small))
                let settings = try await client.settings()
                #expect(settings.maxConcurrentDownloads == 2)
                #expect(settings.overallRateLimit == Int64(512 * 1024))
                // The resume continued: a ranged request from where the pause left it.
                let ranges = nginx.accessLog().filter { $0.first == "/slow/big.bin" }.map { $0[2] }
                #expect(ranges.contains { $0.hasPrefix("bytes=") && !$0.hasPrefix("bytes=0-") }, "\(ranges)")
                for name in ["progress", "paused", "completed", "dashboard", "phone"] {
                    let size = try FileManager.default.attributesOfItem(atPath: "\(Self.artifacts)/\(name).png")[.size]
                    #expect((size as? Int ?? 0) > 10_000, "\(name).png")
                }
            }
        }
    }

    @Test("in a fleet, the Fleet panel shows each node, and its Drain button drains the node: the daemon stops")
    func fleetPanel() async throws {
        guard let python = TestPaths.python, let chromium = Self.chromium, let chromedriver = Self.chromedriver else {
            if ExternalServer.isCI { Issue.record("Chromium, chromedriver and selenium are needed") }
            return
        }
        let temp = try TemporaryDirectory()
        try await withDaemon(on: .postgres, home: temp.file("home"), listen: ("127.0.0.1", 0)) { client, daemon in
            _ = try await client.update(API.Settings(fleet: API.FleetCaps(maxDownloadsPerHost: 4)))
            let link = try await client.loginLink()
            let script = TestPaths.file("Tests/dashboard/fleet.py")
            let (status, output) = try await Command.run(python, [script, link.url, chromium, chromedriver])
            #expect(status == 0, "\(output.suffix(4000))")
            let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(output)")
            let seen = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let rows = seen["rows"] as? [[String: Any]] ?? []
            #expect(rows.count == 1, "\(seen)")
            #expect(rows.first?["node"] as? String == "test" && rows.first?["state"] as? String == "running")
            let cells = rows.first?["cells"] as? [String] ?? []
            #expect(Array(cells.prefix(4)) == ["test (this)", "running", "0 of 3", "none"], "\(cells)")
            #expect(rows.first?["drain"] as? Bool == true)
            #expect(seen["caps"] as? String == "Caps over all nodes: 4 per host", "\(seen)")
            #expect(seen["limitsTitle"] as? String == "Limits of this node (test)", "\(seen)")
            #expect((seen["message"] as? String)?.hasPrefix("Node test drains") == true, "\(seen)")
            // Drained: the daemon stops by itself, and has left the fleet.
            #expect(
                try await waitUntil { (try? await client.status(timeout: .seconds(2))) == nil }
            )
        }
    }

    @Test(
        "the first paint shows true states: every card, no empty note, the live stream, no busy bar on a card that does not move"
    )
    func firstPaint() async throws {
        guard let python = TestPaths.python, let chromium = Self.chromium,
            let chromedriver = Self.chromedriver, ExternalServer.nginx != nil
        else {
            if ExternalServer.isCI { Issue.record("Chromium, chromedriver, nginx and selenium are needed") }
            return
        }
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let refusing = try RefusingPort()
        try await ExternalServer.with(try await ExternalServer.startNginx(slowRate: "64k")) { nginx in
            try Data(TestContent.bytes(count: 4 << 20, seed: 63)).write(
                to: URL(fileURLWithPath: nginx.root + "/big.bin")
            )
            try Data(TestContent.bytes(count: 1000, seed: 64)).write(
                to: URL(fileURLWithPath: nginx.root + "/small.bin")
            )
            try await withDaemon(
                home: temp.file("home"),
                maxConcurrent: 2,
                listen: ("127.0.0.1", 0),
                configure: {
                    // A refused connection goes straight to waiting for its next try.
                    $0.retriesPerRun = 0
                    $0.keepsTrying.firstDelay = .seconds(600)
                }
            ) { client, _ in
                func add(_ url: URL, as name: String) async throws -> UUID {
                    let request = DownloadRequest(url: url, destination: .file(out + "/" + name))
                    return try await client.add([request])[0].id
                }
                func reaches(_ id: UUID, _ state: TaskState) async throws -> Bool {
                    try await waitUntil(timeout: .seconds(60)) { (try? await client.info(id).state) == state }
                }
                let retrying = try await add(URL(string: "http://127.0.0.1:\(refusing.port)/gone.bin")!, as: "r.bin")
                #expect(try await reaches(retrying, .retrying))
                let failed = try await add(nginx.url("/missing.bin"), as: "f.bin")
                #expect(try await reaches(failed, .failed))
                for name in ["a.bin", "b.bin"] {
                    #expect(try await reaches(try await add(nginx.url("/slow/big.bin"), as: name), .running))
                }
                _ = try await add(nginx.url("/small.bin"), as: "q.bin")
                let paused = try await add(nginx.url("/small.bin"), as: "p.bin")
                _ = try await client.pause(.tasks([paused]))
                // What a client reads for the retrying task: what its try met, not "gave up".
                let note = try await client.info(retrying).errorMessage ?? ""
                #expect(!note.contains("Gave up") && !note.contains("haul resume"), "\(note)")

                let link = try await client.loginLink()
                let script = TestPaths.file("Tests/dashboard/first_paint.py")
                let (status, output) = try await Command.run(python, [script, link.url, chromium, chromedriver])
                #expect(status == 0, "\(output.suffix(4000))")
                let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(output)")
                let seen = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                let paint = try #require(seen?["firstPaint"] as? [String: Any], "\(output)")
                #expect(paint["emptyShown"] as? Bool == false, "\(paint)")
                #expect(paint["live"] as? String == "Live", "\(paint)")
                #expect((paint["counts"] as? String)?.hasPrefix("2 running · ") == true, "\(paint)")
                let cards = paint["cards"] as? [[String: Any]] ?? []
                let states = cards.compactMap { $0["state"] as? String }.sorted()
                #expect(states == ["failed", "paused", "queued", "retrying", "running", "running"], "\(cards)")
                // Sizes are known (nginx says them): no card's bar is the animated busy one.
                #expect(cards.allSatisfy { $0["indeterminate"] as? Bool == false }, "\(cards)")
                for card in cards {
                    let error = card["error"] as? String
                    let note = card["note"] as? String
                    switch card["state"] as? String {
                    case "failed": #expect(error?.contains("404") == true && note == nil, "\(card)")
                    case "retrying":
                        #expect(error == nil, "\(card)")
                        #expect(note?.hasPrefix("Last try: ") == true && note?.contains("Gave up") == false, "\(card)")
                    default: #expect(error == nil && note == nil, "\(card)")
                    }
                }
            }
        }
        withExtendedLifetime(refusing) {}
    }

    @Test("a queue longer than a page opens with its first page, and Show more loads the next until none is left")
    func pages() async throws {
        guard let python = TestPaths.python, let chromium = Self.chromium, let chromedriver = Self.chromedriver else {
            if ExternalServer.isCI { Issue.record("Chromium, chromedriver and selenium are needed") }
            return
        }
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            // The first holds: the rest wait in line, none changes while the page is read.
            server.set("/held", .init(size: 1 << 20, seed: 1, holdAt: 1_024))
            try await withDaemon(home: temp.file("home"), maxConcurrent: 1, listen: ("127.0.0.1", 0)) { client, _ in
                let requests = (0..<450).map {
                    DownloadRequest(url: server.url("/held"), destination: .file(out + "/f\($0).bin"))
                }
                _ = try await client.add(requests)
                let link = try await client.loginLink()
                let script = TestPaths.file("Tests/dashboard/pages.py")
                let (status, output) = try await Command.run(python, [script, link.url, chromium, chromedriver])
                #expect(status == 0, "\(output.suffix(4000))")
                let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(output)")
                let seen = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                let steps = seen?["steps"] as? [[String: Any]] ?? []
                #expect(steps.map { $0["cards"] as? Int } == [200, 400, 450], "\(steps)")
                #expect(steps.map { $0["more"] as? Bool } == [true, true, false], "\(steps)")
                #expect((steps.first?["note"] as? String)?.hasPrefix("Showing the first 200 downloads") == true)
                #expect(steps.last?["note"] is NSNull, "\(steps)")
                #expect((seen?["errors"] as? [String])?.isEmpty == true, "\(seen?["errors"] ?? "")")
                server.release()
            }
        }
    }
}
