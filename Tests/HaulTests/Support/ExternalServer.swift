import Foundation
import Testing

/// A real HTTP server (nginx or Python's http.server) started for one test on a free
/// loopback port in a temporary directory, and stopped by its PID.
final class ExternalServer: Sendable {
    let port: Int
    let root: String
    let directory: TemporaryDirectory
    private let process: Process

    /// Whether the tests run in CI, where a missing server is a failure rather than a skip.
    static var isCI: Bool { ProcessInfo.processInfo.environment["CI"].map { !$0.isEmpty } ?? false }

    static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") + [
            "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/usr/local/sbin", "/sbin",
        ] {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    static var nginx: String? { findExecutable("nginx") }
    static var python: String? { findExecutable("python3") }

    private init(process: Process, port: Int, root: String, directory: TemporaryDirectory) {
        self.process = process
        self.port = port
        self.root = root
        self.directory = directory
    }

    /// Runs `body` with a started server and stops it afterwards, whether `body` throws or not.
    static func with(
        _ start: () async throws -> ExternalServer,
        _ body: (ExternalServer) async throws -> Void
    ) async throws {
        let server = try await start()
        do {
            try await body(server)
            await server.stop()
        } catch {
            await server.stop()
            throw error
        }
    }

    func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    func stop() async {
        kill(process.processIdentifier, SIGTERM)
        for _ in 0..<200 where process.isRunning {
            try? await Task.sleep(for: .milliseconds(10))
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// nginx with one plain location and `/slow/` limited to `slowRate` per connection. Its
    /// access log records the Range and If-Range each request carried.
    static func startNginx(slowRate: String = "4m") async throws -> ExternalServer {
        let nginx = try #require(ExternalServer.nginx, "nginx is not installed (apt-get install nginx-light)")
        let directory = try TemporaryDirectory()
        let root = try directory.directory("www")
        _ = try directory.directory("temp")
        let port = try freePort()
        let user = getuid() == 0 ? "user root;" : ""
        let config = """
            \(user)
            worker_processes 1;
            daemon off;
            pid \(directory.file("nginx.pid"));
            error_log \(directory.file("error.log")) warn;
            events { worker_connections 64; }
            http {
                log_format haul escape=none '$request_uri|$status|$http_range|$http_if_range|$body_bytes_sent';
                access_log \(directory.file("access.log")) haul;
                client_body_temp_path \(directory.file("temp"));
                proxy_temp_path \(directory.file("temp"));
                fastcgi_temp_path \(directory.file("temp"));
                uwsgi_temp_path \(directory.file("temp"));
                scgi_temp_path \(directory.file("temp"));
                types { application/octet-stream bin; }
                server {
                    listen 127.0.0.1:\(port);
                    root \(root);
                    location /slow/ { alias \(root)/; limit_rate \(slowRate); }
                }
            }
            """
        try config.write(toFile: directory.file("nginx.conf"), atomically: true, encoding: .utf8)
        return try await launch(
            nginx,
            ["-c", directory.file("nginx.conf"), "-p", directory.path, "-e", directory.file("error.log")],
            port: port,
            root: root,
            directory: directory
        )
    }

    /// Python's http.server: HTTP/1.0, no Range support, Last-Modified but no ETag.
    static func startPython() async throws -> ExternalServer {
        let python = try #require(ExternalServer.python, "python3 is not installed")
        let directory = try TemporaryDirectory()
        let root = try directory.directory("www")
        let port = try freePort()
        return try await launch(
            python,
            ["-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", root],
            port: port,
            root: root,
            directory: directory
        )
    }

    private static func launch(
        _ executable: String,
        _ arguments: [String],
        port: Int,
        root: String,
        directory: TemporaryDirectory
    ) async throws -> ExternalServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let server = ExternalServer(process: process, port: port, root: root, directory: directory)
        try await server.waitUntilListening()
        return server
    }

    /// Lines of nginx's access log: uri|status|range|if-range|bytes.
    func accessLog() -> [[String]] {
        let text = (try? String(contentsOfFile: directory.file("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map {
            $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
        }
    }

    private func waitUntilListening() async throws {
        for _ in 0..<500 {
            if ExternalServer.canConnect(port: port) { return }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        let log = (try? String(contentsOfFile: directory.file("error.log"), encoding: .utf8)) ?? ""
        await stop()
        throw POSIXError(.ECONNREFUSED, userInfo: [NSLocalizedDescriptionKey: "server did not start: \(log)"])
    }

    private static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A loopback port that was free a moment ago.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
