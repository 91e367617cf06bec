import AsyncHTTPClient
import Foundation
import Testing

@testable import HaulCLI

/// `haul ui`: the login link from a running daemon, printed and handed to `$BROWSER`; the
/// link logs a browser in once; without a TCP listener, a sentence saying how to start one.
@Suite("haul ui", .tags(.process), .serialized)
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
        let pattern = #/^http://127\.0\.0\.1:[0-9]+/login\?code=[0-9a-f]{64}$/#
        #expect(url.wholeMatch(of: pattern) != nil, "\(url)")

        // Opened with $BROWSER, the link where it says %s.
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
        #expect(
            try await waitUntil {
                (try? String(contentsOfFile: seen, encoding: .utf8)) == "--new-window\n\(link)\n"
            }
        )

        // The printed link logs in once: a session cookie, then a refusal (redirects not
        // followed, to see the login's own answer).
        let http = HTTPClient(configuration: .init(redirectConfiguration: .disallow))
        do {
            let request = HTTPClientRequest(url: url)
            let first = try await http.execute(request, timeout: .seconds(30))
            _ = try await first.body.collect(upTo: 1 << 20)
            #expect(first.status == .seeOther)
            #expect(first.headers["Set-Cookie"].first?.hasPrefix("haul_session=") == true)
            let again = try await http.execute(request, timeout: .seconds(30))
            _ = try await again.body.collect(upTo: 1 << 20)
            #expect(again.status == .unauthorized)
            try await http.shutdown()
        } catch {
            try? await http.shutdown()
            throw error
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
