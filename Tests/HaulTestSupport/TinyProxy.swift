import Foundation
import Haul
import Testing

/// Debian's tinyproxy, started for one test on a free loopback port from a config in a
/// temporary directory, and stopped by its PID. It logs every request it is asked
/// (`GET http://…`, `CONNECT host:port`) and adds `Via` to what it forwards.
package final class TinyProxy: Sendable {
    package let port: Int
    package let directory: TemporaryDirectory
    private let process: ChildProcess

    package static var executable: String? { ExternalServer.findExecutable("tinyproxy") }
    package static var usable: Bool { executable != nil || ExternalServer.isCI }

    private init(port: Int, directory: TemporaryDirectory, process: ChildProcess) {
        self.port = port
        self.directory = directory
        self.process = process
    }

    /// `http://127.0.0.1:port`, with credentials when given.
    package func url(user: String? = nil, password: String? = nil) -> String {
        guard let user else { return "http://127.0.0.1:\(port)" }
        return "http://\(user):\(password ?? "")@127.0.0.1:\(port)"
    }

    /// Starts tinyproxy; with `credentials`, it asks for Basic authentication.
    package static func start(credentials: (user: String, password: String)? = nil) async throws -> TinyProxy {
        let executable = try #require(TinyProxy.executable, "tinyproxy is not installed (apt-get install tinyproxy)")
        let directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        let port = try LoopbackPort.free()
        var config = """
            Port \(port)
            Listen 127.0.0.1
            Timeout 60
            LogFile "\(directory.file("proxy.log"))"
            LogLevel Info
            MaxClients 100
            Allow 127.0.0.1
            """
        if getuid() == 0 { config += "\nUser root\nGroup root" }
        if let credentials { config += "\nBasicAuth \(credentials.user) \(credentials.password)" }
        try config.write(toFile: directory.file("tinyproxy.conf"), atomically: true, encoding: .utf8)
        let process = try ChildProcess(
            "/usr/bin/env",
            arguments: ["--default-signal=TERM", executable, "-d", "-c", directory.file("tinyproxy.conf")],
            standardOutput: .null,
            standardError: .null
        )
        let proxy = TinyProxy(port: port, directory: directory, process: process)
        for _ in 0..<500 {
            if proxy.logText().contains("Accepting connections") { break }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(process.isRunning, "tinyproxy did not start: \(proxy.logText())")
        return proxy
    }

    package static func with(
        credentials: (user: String, password: String)? = nil,
        _ body: (TinyProxy) async throws -> Void
    ) async throws {
        let proxy = try await start(credentials: credentials)
        defer { proxy.stop() }
        try await body(proxy)
    }

    private func logText() -> String {
        (try? String(contentsOfFile: directory.file("proxy.log"), encoding: .utf8)) ?? ""
    }

    /// The request lines it was asked, in order: `GET http://host:port/path HTTP/1.1`,
    /// `CONNECT host:port HTTP/1.1`.
    package func requests() -> [String] {
        logText().split(separator: "\n").compactMap { line in
            guard let range = line.range(of: "): ", options: .backwards), line.contains("Request (file descriptor")
            else { return nil }
            return String(line[range.upperBound...])
        }
    }

    package func stop() {
        process.signal(SIGTERM)
        process.waitUntilExit()
    }
}
