import Foundation
import Haul
import Testing

/// A real HTTP server (nginx or Python's http.server) started for one test on a free
/// loopback port in a temporary directory, and stopped by its PID.
package final class ExternalServer: Sendable {
    package let port: Int
    package let root: String
    package let directory: TemporaryDirectory
    /// `http`, or `https` for a server started with TLS.
    package let scheme: String
    /// The address it listens on.
    package let host: String
    private let process: ChildProcess

    /// Whether the tests run in CI, where a missing server is a failure rather than a skip.
    package static var isCI: Bool { ProcessInfo.processInfo.environment["CI"].map { !$0.isEmpty } ?? false }

    package static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") + [
            "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/usr/local/sbin", "/sbin",
        ] {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    package static var nginx: String? { findExecutable("nginx") }
    package static var python: String? { findExecutable("python3") }
    package static var apache: String? { findExecutable("apache2") ?? findExecutable("httpd") }
    package static var lighttpd: String? { findExecutable("lighttpd") }
    /// Where Debian keeps Apache's loadable modules.
    package static let apacheModules = "/usr/lib/apache2/modules"

    private init(
        process: ChildProcess,
        port: Int,
        root: String,
        directory: TemporaryDirectory,
        scheme: String,
        host: String
    ) {
        self.scheme = scheme
        self.host = host
        self.process = process
        self.port = port
        self.root = root
        self.directory = directory
    }

    /// Runs `body` with a started server and stops it afterwards, whether `body` throws or not.
    package static func with(
        _ start: @autoclosure () async throws -> ExternalServer,
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

    package func url(_ path: String) -> URL { URL(string: "\(scheme)://\(host):\(port)\(path)")! }

    package func stop() async {
        process.signal(SIGTERM)
        if await process.exited(within: .seconds(2)) == nil {
            process.signal(SIGKILL)
            _ = await process.exited()
        }
    }

    /// The user and password nginx's `/auth/` asks for (HTTP Basic).
    package static let basicUser = "haul"
    package static let basicPassword = "pa55-w0rd"

    /// nginx with one plain location and `/slow/` limited to `slowRate` per connection. Its
    /// access log records the Range and If-Range each request carried, the Basic user and
    /// the cookies. `/auth/` asks for ``basicUser`` and ``basicPassword``; `/login` sets the
    /// cookie `session=s3ssion` on a 302 to `/private/big.bin`, which answers 403 without it;
    /// `/to-localhost-auth` redirects to `/auth/big.bin` on the host `localhost`.
    ///
    /// With `tls`, it speaks only TLS with `pki`'s server certificate, and asks for a client
    /// certificate signed by `pki`'s authority: `/mtls/` answers 403 without one.
    /// With `namespace`, it runs in that network namespace (`ip netns exec`), listening on `host`.
    package static func startNginx(
        slowRate: String = "4m",
        tls pki: TestPKI? = nil,
        host: String = "127.0.0.1",
        namespace: String? = nil
    ) async throws -> ExternalServer {
        let nginx = try #require(ExternalServer.nginx, "nginx is not installed (apt-get install nginx-light)")
        let directory = try TemporaryDirectory()
        let root = try directory.directory("www")
        _ = try directory.directory("temp")
        let port = try LoopbackPort.free()
        let user = getuid() == 0 ? "user root;" : ""
        var tlsDirectives = ""
        var mutualLocation = ""
        if let pki {
            tlsDirectives = """
                ssl_certificate \(pki.serverCertificate);
                        ssl_certificate_key \(pki.serverKey);
                        ssl_client_certificate \(pki.caCertificate);
                        ssl_verify_client optional;
                """
            mutualLocation = """
                location /mtls/ {
                            alias \(root)/;
                            if ($ssl_client_verify != SUCCESS) { return 403; }
                        }
                """
        }
        let config = """
            \(user)
            worker_processes 1;
            daemon off;
            pid \(directory.file("nginx.pid"));
            error_log \(directory.file("error.log")) warn;
            events { worker_connections 64; }
            http {
                log_format haul escape=none '$request_uri|$status|$http_range|$http_if_range|$body_bytes_sent|$remote_user|$http_cookie|$http_if_none_match|$http_if_modified_since|$http_host|$msec|$request_time';
                access_log \(directory.file("access.log")) haul;
                client_body_temp_path \(directory.file("temp"));
                proxy_temp_path \(directory.file("temp"));
                fastcgi_temp_path \(directory.file("temp"));
                uwsgi_temp_path \(directory.file("temp"));
                scgi_temp_path \(directory.file("temp"));
                types { application/octet-stream bin; }
                server {
                    listen \(host):\(port)\(pki == nil ? "" : " ssl");
                    \(tlsDirectives)
                    root \(root);
                    location /slow/ { alias \(root)/; limit_rate \(slowRate); }
                    location /auth/ { alias \(root)/; auth_basic "haul"; auth_basic_user_file \(directory.file("htpasswd")); }
                    location = /login { add_header Set-Cookie "session=s3ssion; Path=/"; return 302 /private/big.bin; }
                    location /private/ { alias \(root)/; if ($cookie_session != "s3ssion") { return 403; } }
                    location = /to-localhost-auth { return 302 \(pki == nil ? "http" : "https")://localhost:\(port)/auth/big.bin; }
                    \(mutualLocation)
                }
            }
            """
        try config.write(toFile: directory.file("nginx.conf"), atomically: true, encoding: .utf8)
        try "\(ExternalServer.basicUser):{PLAIN}\(ExternalServer.basicPassword)\n".write(
            toFile: directory.file("htpasswd"),
            atomically: true,
            encoding: .utf8
        )
        let arguments = ["-c", directory.file("nginx.conf"), "-p", directory.path, "-e", directory.file("error.log")]
        if let namespace {
            return try await launch(
                try #require(VethPair.ip),
                ["netns", "exec", namespace, nginx] + arguments,
                port: port,
                root: root,
                directory: directory,
                scheme: pki == nil ? "http" : "https",
                host: host
            )
        }
        return try await launch(
            nginx,
            arguments,
            port: port,
            root: root,
            directory: directory,
            scheme: pki == nil ? "http" : "https",
            host: host
        )
    }

    /// Apache httpd (Debian's `apache2`) from a minimal config of its own: ETags of size and
    /// mtime (weak for a file modified within the last second), ranges, If-Range, and
    /// `/slow/` limited by mod_ratelimit to `slowKiB` KiB/s per connection. As root its
    /// workers run as www-data, so the document root is made world-readable.
    package static func startApache(slowKiB: Int = 4096) async throws -> ExternalServer {
        let apache = try #require(ExternalServer.apache, "Apache httpd is not installed (apt-get install apache2)")
        let directory = try TemporaryDirectory()
        let root = try directory.directory("www")
        chmod(directory.path, 0o755)
        chmod(root, 0o755)
        let port = try LoopbackPort.free()
        let user = getuid() == 0 ? "User www-data\nGroup www-data" : ""
        let modules = ["mpm_event", "authz_core", "alias", "env", "ratelimit", "mime"].map {
            "LoadModule \($0)_module \(apacheModules)/mod_\($0).so"
        }.joined(separator: "\n")
        let config = """
            ServerRoot \(directory.path)
            ServerName 127.0.0.1
            Listen 127.0.0.1:\(port)
            PidFile \(directory.file("apache.pid"))
            DefaultRuntimeDir \(directory.path)
            Mutex file:\(directory.path) default
            ErrorLog \(directory.file("error.log"))
            \(modules)
            \(user)
            TypesConfig /dev/null
            LogFormat "%U|%>s|%{Range}i|%{If-Range}i|%B" haul
            CustomLog \(directory.file("access.log")) haul
            DocumentRoot \(root)
            <Directory \(root)>
                Require all granted
            </Directory>
            Alias /slow/ \(root)/
            <Location /slow/>
                SetOutputFilter RATE_LIMIT
                SetEnv rate-limit \(slowKiB)
            </Location>
            """
        try config.write(toFile: directory.file("httpd.conf"), atomically: true, encoding: .utf8)
        chmod(directory.file("httpd.conf"), 0o644)
        return try await launch(
            apache,
            ["-f", directory.file("httpd.conf"), "-DFOREGROUND"],
            port: port,
            root: root,
            directory: directory
        )
    }

    /// lighttpd from a minimal config: ETags and Last-Modified, ranges, and `/slow/` limited
    /// to `slowKiB` KiB/s per connection.
    package static func startLighttpd(slowKiB: Int = 4096) async throws -> ExternalServer {
        let lighttpd = try #require(ExternalServer.lighttpd, "lighttpd is not installed (apt-get install lighttpd)")
        let directory = try TemporaryDirectory()
        let root = try directory.directory("www")
        let port = try LoopbackPort.free()
        let config = """
            server.document-root = "\(root)"
            server.bind = "127.0.0.1"
            server.port = \(port)
            server.errorlog = "\(directory.file("error.log"))"
            server.modules = ("mod_alias", "mod_accesslog")
            accesslog.filename = "\(directory.file("access.log"))"
            accesslog.format = "%U|%>s|%{Range}i|%{If-Range}i|%b"
            mimetype.assign = (".bin" => "application/octet-stream")
            alias.url = ("/slow/" => "\(root)/")
            $HTTP["url"] =~ "^/slow/" { connection.kbytes-per-second = \(slowKiB) }
            """
        try config.write(toFile: directory.file("lighttpd.conf"), atomically: true, encoding: .utf8)
        return try await launch(
            lighttpd,
            ["-D", "-f", directory.file("lighttpd.conf")],
            port: port,
            root: root,
            directory: directory
        )
    }

    /// Python's http.server: HTTP/1.0, no Range support, Last-Modified but no ETag. With
    /// `bytesPerSecond`, its handler's copy loop is throttled (the same server, slower).
    package static func startPython(bytesPerSecond: Int? = nil) async throws -> ExternalServer {
        let python = try #require(ExternalServer.python, "python3 is not installed")
        let directory = try TemporaryDirectory()
        let root = try directory.directory("www")
        let port = try LoopbackPort.free()
        guard let bytesPerSecond else {
            return try await launch(
                python,
                ["-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", root],
                port: port,
                root: root,
                directory: directory
            )
        }
        let script = """
            import functools, http.server, sys, time
            class Throttled(http.server.SimpleHTTPRequestHandler):
                def copyfile(self, source, output):
                    while True:
                        block = source.read(65536)
                        if not block:
                            break
                        output.write(block)
                        time.sleep(len(block) / \(bytesPerSecond))
            handler = functools.partial(Throttled, directory=sys.argv[2])
            http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
            """
        try script.write(toFile: directory.file("serve.py"), atomically: true, encoding: .utf8)
        return try await launch(
            python,
            [directory.file("serve.py"), String(port), root],
            port: port,
            root: root,
            directory: directory
        )
    }

    package static var aria2c: String? { findExecutable("aria2c") }

    /// aria2's own RPC server (`aria2c --enable-rpc`) with `secret`, downloading into its
    /// temporary directory: the reference Haul's `/jsonrpc` is compared with.
    package static func startAria2RPC(secret: String) async throws -> ExternalServer {
        guard let aria2c else { throw POSIXError(.ENOENT, userInfo: [NSLocalizedDescriptionKey: "aria2c not found"]) }
        let directory = try TemporaryDirectory()
        let port = try LoopbackPort.free()
        return try await launch(
            aria2c,
            [
                "--no-conf", "--enable-rpc", "--rpc-listen-port=\(port)", "--rpc-secret=\(secret)",
                "--dir=\(directory.path)", "--save-session=\(directory.file("session.txt"))", "--quiet",
                "--log=\(directory.file("error.log"))", "--log-level=warn",
            ],
            port: port,
            root: directory.path,
            directory: directory
        )
    }

    private static func launch(
        _ executable: String,
        _ arguments: [String],
        port: Int,
        root: String,
        directory: TemporaryDirectory,
        scheme: String = "http",
        host: String = "127.0.0.1"
    ) async throws -> ExternalServer {
        // Through `env --default-signal`: a disposition of SIG_IGN survives exec, and this
        // test process ignores SIGTERM once a daemon test has run (swift-service-lifecycle
        // handles it itself) — a server started with it ignored would never stop on SIGTERM
        // (Python), or be killed before it could stop its workers (Apache).
        let process = try ChildProcess(
            "/usr/bin/env",
            arguments: ["--default-signal=TERM,INT,HUP", executable] + arguments,
            standardOutput: .null,
            standardError: .null
        )
        let server = ExternalServer(
            process: process,
            port: port,
            root: root,
            directory: directory,
            scheme: scheme,
            host: host
        )
        try await server.waitUntilListening()
        return server
    }

    /// Lines of the access log (nginx, Apache, lighttpd): uri|status|range|if-range|bytes;
    /// nginx's go on: user|cookie|if-none-match|if-modified-since|host|end (s)|duration (s).
    package func accessLog() -> [[String]] {
        let text = (try? String(contentsOfFile: directory.file("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map {
            $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
        }
    }

    private func waitUntilListening() async throws {
        for _ in 0..<500 {
            if ExternalServer.canConnect(host: host, port: port) { return }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        let log = (try? String(contentsOfFile: directory.file("error.log"), encoding: .utf8)) ?? ""
        await stop()
        throw POSIXError(.ECONNREFUSED, userInfo: [NSLocalizedDescriptionKey: "server did not start: \(log)"])
    }

    private static func canConnect(host: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr(host)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
