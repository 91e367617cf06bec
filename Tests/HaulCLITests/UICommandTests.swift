import AsyncHTTPClient
import Foundation
import HaulTestSupport
import NIOCore
import NIOHTTP1
import Testing

@testable import HaulCLI

/// `haul ui`: the login link from a running daemon, printed and handed to `$BROWSER`; the
/// link logs a browser in once; without a TCP listener, a sentence saying how to start one.
@Suite("haul ui", .tags(.process), .serialized, .timeLimit(.minutes(10)))
struct UICommandTests {
    @Test("prints a one-time link that logs in; opens it with $BROWSER; no TCP listener is one sentence")
    func loginLink() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let started = try await HaulProcess.run(["daemon", "--listen", "127.0.0.1:0"], home: home)
        #expect(started.status == 0, "\(started.stderr)")
        defer { Task { _ = try? await HaulProcess.run(["daemon", "stop"], home: home) } }

        let printed = try await HaulProcess.run(["ui", "--no-open"], home: home)
        #expect(printed.status == 0, "\(printed.stderr)")
        let url = printed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let pattern = ##/^http://127\.0\.0\.1:[0-9]+/#login=[0-9a-f]{64}$/##
        #expect(url.wholeMatch(of: pattern) != nil, "\(url)")

        // Opened with $BROWSER, where it says %s: a private file that sends the browser on to
        // the link, never the link itself (every user can read a program's arguments).
        let seen = temp.file("browser-saw")
        let browser = temp.file("browser.sh")
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" > \(seen)\n".write(toFile: browser, atomically: true, encoding: .utf8)
        chmod(browser, 0o755)
        let opened = try await HaulProcess(
            ["ui"],
            home: home,
            environment: ["BROWSER": "\(browser) --new-window %s", "DISPLAY": nil, "WAYLAND_DISPLAY": nil]
        ).finish()
        #expect(opened.status == 0, "\(opened.stderr)")
        #expect(opened.stderr.contains("Opened in \(browser)"))
        let link = opened.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await waitUntil { FileManager.default.fileExists(atPath: seen) })
        let arguments = try String(contentsOfFile: seen, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(arguments.count == 2 && arguments[0] == "--new-window", "\(arguments)")
        let code = String(link.split(separator: "=").last ?? "")
        #expect(!arguments.joined().contains(code), "the code is in the browser's arguments")
        let file = try #require(URL(string: arguments.last ?? "")).path
        #expect(arguments.last?.hasPrefix("file://\(home)/ui-login-") == true, "\(arguments)")
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let page = try String(contentsOfFile: file, encoding: .utf8)
        #expect(page.contains(#"<meta http-equiv="refresh" content="0;url=\#(link)">"#), "\(page)")

        // The printed link's code logs in once: a session, then a refusal.
        let port = try #require(link.wholeMatch(of: #/http://127\.0\.0\.1:([0-9]+)/.*/#)?.output.1)
        for expected in [HTTPResponseStatus.ok, .unauthorized] {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/login")
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: #"{"code":"\#(code)"}"#))
            let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            let body = try await answer.body.collect(upTo: 1 << 20)
            #expect(answer.status == expected, "\(String(buffer: body))")
            #expect(answer.headers["Set-Cookie"].isEmpty)
        }

        // A daemon without a TCP listener: nothing a browser could open.
        let other = temp.file("other")
        #expect(try await HaulProcess.run(["daemon"], home: other).status == 0)
        defer { Task { _ = try? await HaulProcess.run(["daemon", "stop"], home: other) } }
        let refused = try await HaulProcess.run(["ui", "--no-open"], home: other)
        #expect(refused.status != 0)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.contains("no TCP listener"), "\(refused.stderr)")
        #expect(refused.stderr.contains("haul daemon --listen 127.0.0.1:7800"), "\(refused.stderr)")
        #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
        for stopped in [home, other] {
            #expect(try await HaulProcess.run(["daemon", "stop"], home: stopped).status == 0)
        }
    }

    @Test(
        "the advice works: haul daemon --listen on a daemon without a listener says to restart it, and that gives haul ui its link"
    )
    func listenerAdviceWorks() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        #expect(try await HaulProcess.run(["daemon"], home: home).status == 0)
        defer { Task { _ = try? await HaulProcess.run(["daemon", "stop"], home: home) } }
        // Once ignored --listen and said "already running", exit 0, so haul ui failed again.
        let ignored = try await HaulProcess.run(["daemon", "--listen", "127.0.0.1:0"], home: home)
        #expect(ignored.status == 8, "\(ignored.stderr)")
        #expect(ignored.stderr.contains("without a TCP listener; --listen applies when it starts"), "\(ignored.stderr)")
        let advice = "haul daemon stop && haul daemon --listen 127.0.0.1:0"
        #expect(ignored.stderr.contains(advice), "\(ignored.stderr)")
        // Doing what it says.
        #expect(try await HaulProcess.run(["daemon", "stop"], home: home).status == 0)
        let restarted = try await HaulProcess.run(["daemon", "--listen", "127.0.0.1:0"], home: home)
        #expect(restarted.status == 0, "\(restarted.stderr)")
        let link = try await HaulProcess.run(["ui", "--no-open"], home: home)
        #expect(link.status == 0, "\(link.stderr)")
        #expect(link.stdout.hasPrefix("http://127.0.0.1:"))
        // The same --listen again: already running as asked, which is no error.
        let again = try await HaulProcess.run(["daemon", "--listen", "127.0.0.1:0"], home: home)
        #expect(again.status == 0)
        #expect(again.stderr.contains("already running") && again.stderr.contains("listening on 127.0.0.1:"))
        // Stopped here, not only by the deferred task, which may not run before the process ends.
        #expect(try await HaulProcess.run(["daemon", "stop"], home: home).status == 0)
    }

    @Test("a --listen address that is taken fails the start with the reason, instead of saying it started")
    func listenAddressTaken() async throws {
        let temp = try TemporaryDirectory()
        let taken = try RefusingPort()
        let started = try await HaulProcess.run(
            ["daemon", "--listen", "127.0.0.1:\(taken.port)"],
            home: temp.file("home")
        )
        defer { Task { _ = try? await HaulProcess.run(["daemon", "stop"], home: temp.file("home")) } }
        #expect(started.status == 8, "\(started.stderr)")
        #expect(started.stderr.contains("Address already in use"), "\(started.stderr)")
        #expect(!started.stderr.contains("Started"))
        withExtendedLifetime(taken) {}
    }

    @Test("the browser: $BROWSER's program, else xdg-open with a display, else none; %s takes the link")
    func browserChoice() throws {
        let temp = try TemporaryDirectory()
        let program = temp.file("open-it")
        try "#!/bin/sh\n".write(toFile: program, atomically: true, encoding: .utf8)
        chmod(program, 0o755)
        let chosen = try #require(HaulCommand.UI.browser(environment: ["BROWSER": "\(program) -x"]))
        #expect(chosen.program == program && chosen.arguments == ["-x"])
        // An xdg-open in PATH counts only with a display.
        let xdg = temp.file("xdg-open")
        try "#!/bin/sh\n".write(toFile: xdg, atomically: true, encoding: .utf8)
        chmod(xdg, 0o755)
        #expect(HaulCommand.UI.browser(environment: ["PATH": temp.path]) == nil)
        #expect(HaulCommand.UI.browser(environment: ["PATH": temp.path, "DISPLAY": ":0"])?.program == xdg)
        #expect(HaulCommand.UI.browser(environment: ["BROWSER": "/no/such/browser", "PATH": "/nonexistent"]) == nil)
        #expect(HaulCommand.UI.arguments(["--new-window"], url: "U") == ["--new-window", "U"])
        #expect(HaulCommand.UI.arguments(["--app=%s"], url: "U") == ["--app=U"])
    }
}
