import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulWire
import HaulWireMapping

extension HaulCommand {
    /// `haul ui`: a one-time link into the daemon's web dashboard, opened in a browser when
    /// there is one.
    struct UI: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ui",
            abstract: "Open the daemon's web dashboard (prints a one-time login link).",
            discussion: """
                The daemon serves its dashboard on its TCP listener, so start it with one \
                (haul daemon --listen 127.0.0.1:7800; one already running without it: \
                haul daemon stop first, its downloads continue). The link logs one browser in; it works \
                once, within five minutes, and logs in that browser tab only. It is opened with \
                $BROWSER, or xdg-open when a display is there, through a private file in \
                $HAUL_HOME (never on the browser's command line, which every user can read); \
                otherwise open it yourself.
                """
                    + Examples.block([
                        ("haul ui", "print the link and open it"),
                        ("haul ui --no-open", "only print it (for another machine's browser over an SSH tunnel)"),
                    ])
        )

        @Flag(help: "Only print the link; do not start a browser.")
        var noOpen = false

        func run() async throws {
            try await withDaemon(autoStart: false) { client in
                let link = try await client.loginLink()
                print(link.url)
                guard !noOpen, let browser = UI.browser() else { return }
                do {
                    let opener = try LoginFile.write(link: link.url, in: HaulHome.resolve())
                    // Not waited for: the browser lives on after this command.
                    _ = try ChildProcess(
                        browser.program,
                        arguments: UI.arguments(browser.arguments, url: opener),
                        standardOutput: .null,
                        standardError: .null,
                        newSession: true
                    )
                    Output.error("Opened in \(browser.program); the link works once.\n")
                } catch {
                    Output.error("Could not start \(browser.program); open the link yourself.\n")
                }
            }
        }

        /// The browser's arguments with the link: where one says `%s` (as `$BROWSER` may), else last.
        static func arguments(_ arguments: [String], url: String) -> [String] {
            guard arguments.contains(where: { $0.contains("%s") }) else { return arguments + [url] }
            return arguments.map { $0.replacingOccurrences(of: "%s", with: url) }
        }

        /// `$BROWSER` (its first word a program), else xdg-open when there is a display; nil when neither.
        static func browser(
            environment: [String: String] = ProcessInfo.processInfo.environment
        )
            -> (program: String, arguments: [String])?
        {
            func find(_ name: String) -> String? {
                if name.contains("/") { return FileManager.default.isExecutableFile(atPath: name) ? name : nil }
                let path = environment["PATH"] ?? "/usr/bin:/bin"
                return path.split(separator: ":").map { "\($0)/\(name)" }.first {
                    FileManager.default.isExecutableFile(atPath: $0)
                }
            }
            if let given = environment["BROWSER"]?.split(separator: " ").map(String.init), let first = given.first,
                let program = find(first)
            {
                return (program, Array(given.dropFirst()))
            }
            let display = [environment["DISPLAY"], environment["WAYLAND_DISPLAY"]].contains { !($0 ?? "").isEmpty }
            guard display, let opener = find("xdg-open") else { return nil }
            return (opener, [])
        }
    }
}
