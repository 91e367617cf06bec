import Foundation
import Haul
import Testing

/// A SOCKS5 proxy (no authentication, CONNECT only) in Python, for one test: it records each
/// target it was asked to connect to, as the name or address the client sent.
package final class SOCKSProxy: Sendable {
    package let port: Int
    package let directory: TemporaryDirectory
    private let process: ChildProcess

    private init(port: Int, directory: TemporaryDirectory, process: ChildProcess) {
        self.port = port
        self.directory = directory
        self.process = process
    }

    package static func start() async throws -> SOCKSProxy {
        let python = try #require(ExternalServer.python, "python3 is not installed")
        let directory = try TemporaryDirectory()
        let port = try LoopbackPort.free()
        let script = """
            import socket, socketserver, struct, sys, threading
            log = open(sys.argv[2], "a")
            lock = threading.Lock()
            def pipe(a, b):
                try:
                    while True:
                        data = a.recv(65536)
                        if not data:
                            break
                        b.sendall(data)
                except OSError:
                    pass
                finally:
                    try: b.shutdown(socket.SHUT_WR)
                    except OSError: pass
            class Handler(socketserver.BaseRequestHandler):
                def handle(self):
                    c = self.request
                    version, count = c.recv(2)
                    c.recv(count)
                    c.sendall(b"\\x05\\x00")
                    _, command, _, kind = c.recv(4)
                    if kind == 1:
                        host = socket.inet_ntoa(c.recv(4))
                    elif kind == 3:
                        host = c.recv(c.recv(1)[0]).decode()
                    else:
                        host = socket.inet_ntop(socket.AF_INET6, c.recv(16))
                    port = struct.unpack(">H", c.recv(2))[0]
                    with lock:
                        log.write("%s:%d\\n" % (host, port)); log.flush()
                    try:
                        upstream = socket.create_connection((host, port))
                    except OSError:
                        c.sendall(b"\\x05\\x05\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00")
                        return
                    c.sendall(b"\\x05\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00")
                    t = threading.Thread(target=pipe, args=(upstream, c), daemon=True)
                    t.start()
                    pipe(c, upstream)
                    t.join()
            class Server(socketserver.ThreadingTCPServer):
                daemon_threads = True
                allow_reuse_address = True
            Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
            """
        try script.write(toFile: directory.file("socks.py"), atomically: true, encoding: .utf8)
        let process = try ChildProcess(
            "/usr/bin/env",
            arguments: [
                "--default-signal=TERM", python, directory.file("socks.py"), String(port), directory.file("log"),
            ],
            standardOutput: .null,
            standardError: .null
        )
        let proxy = SOCKSProxy(port: port, directory: directory, process: process)
        // Python can take seconds to start on a loaded machine: bounded at a minute, which
        // only turns a hang into a failure (it ends at once if the proxy exits).
        _ = try await waitUntil(timeout: .seconds(60), every: .milliseconds(20)) {
            proxy.listening() || !process.isRunning
        }
        try #require(proxy.listening(), "the SOCKS proxy did not start")
        return proxy
    }

    private func listening() -> Bool {
        let text = (try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8)) ?? ""
        let hex = String(format: ":%04X ", port)
        // State 0A is LISTEN.
        return text.split(separator: "\n").contains { $0.contains("0100007F" + hex) && $0.contains(" 0A ") }
    }

    /// The targets asked for, as `host:port`.
    package func targets() -> [String] {
        let text = (try? String(contentsOfFile: directory.file("log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    package func stop() {
        process.signal(SIGTERM)
        process.waitUntilExit()
    }
}
