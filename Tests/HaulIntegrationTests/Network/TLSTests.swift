import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// nginx over TLS with a certificate authority the test makes (openssl): the system's
/// authorities do not know it, so only what the user says makes it trusted.
@Suite(
    "TLS trust and client certificates",
    .serialized,
    .tags(.process, .nginx),
    .leftOutOfFastLoop,
    .timeLimit(.minutes(10))
)
struct TLSTests {
    static let usable = (ExternalServer.nginx != nil && TestPKI.openssl != nil) || ExternalServer.isCI
    static let size = 4 << 20

    /// An nginx over TLS serving big.bin (4 MiB), and the certificates.
    static func withServer(
        slowRate: String = "4m",
        _ body: (ExternalServer, TestPKI, String) async throws -> Void
    ) async throws {
        let pki = try await TestPKI.make()
        try await ExternalServer.with(try await ExternalServer.startNginx(slowRate: slowRate, tls: pki)) { server in
            let bytes = TestContent.bytes(count: size, seed: 21)
            try Data(bytes).write(to: URL(fileURLWithPath: server.root + "/big.bin"))
            try await body(server, pki, TestContent.sha256(bytes))
        }
    }

    @Test(
        "an untrusted certificate fails at once, names the host, suggests --cacert, and writes nothing",
        .enabled(if: usable)
    )
    func untrusted() async throws {
        try await Self.withServer { server, _, _ in
            let temp = try TemporaryDirectory()
            let started = ContinuousClock.now
            let result = try await HaulProcess.get([server.url("/big.bin").absoluteString], in: temp)
            #expect(result.status == 5)
            #expect(ContinuousClock.now - started < .seconds(30))  // Generous: at once, on a loaded machine.
            #expect(!result.stderr.contains("retrying"), "\(result.stderr)")
            #expect(
                result.stderr.contains("haul: error: The certificate of 127.0.0.1:\(server.port) is not trusted"),
                "\(result.stderr)"
            )
            #expect(result.stderr.contains("--cacert FILE"), "\(result.stderr)")
            FailureSpeedTests.expectNoDumps(result.stderr)
            #expect(try FileManager.default.contentsOfDirectory(atPath: temp.path) == ["home"])
            // nginx saw handshakes only: no request reached it.
            #expect(server.accessLog().isEmpty)
        }
    }

    @Test("a certificate signed by another authority than --cacert's is refused too", .enabled(if: usable))
    func wrongAuthority() async throws {
        try await Self.withServer { server, pki, _ in
            let temp = try TemporaryDirectory()
            let result = try await HaulProcess.get(
                ["--cacert", pki.otherCACertificate, server.url("/big.bin").absoluteString],
                in: temp
            )
            #expect(result.status == 5)
            #expect(result.stderr.contains("is not trusted"), "\(result.stderr)")
        }
    }

    @Test("--cacert, SSL_CERT_FILE, --capath and SSL_CERT_DIR each make the authority trusted", .enabled(if: usable))
    func trustedAuthorities() async throws {
        try await Self.withServer { server, pki, digest in
            let url = server.url("/big.bin").absoluteString
            let cases: [(String, [String], [String: String?])] = [
                ("--cacert", ["--cacert", pki.caCertificate], [:]),
                ("SSL_CERT_FILE", [], ["SSL_CERT_FILE": pki.caCertificate]),
                ("--capath", ["--capath", pki.caDirectory], [:]),
                ("SSL_CERT_DIR", [], ["SSL_CERT_DIR": pki.caDirectory]),
            ]
            for (name, flags, environment) in cases {
                let temp = try TemporaryDirectory()
                let result = try await HaulProcess.get(
                    flags + ["-o", "big.bin", url],
                    in: temp,
                    environment: environment
                )
                #expect(result.status == 0, "\(name): \(result.stderr)")
                #expect(sha256(file: temp.file("big.bin")) == digest, "\(name)")
                #expect(!result.stderr.contains("warning"), "\(name): \(result.stderr)")
            }
        }
    }

    @Test("--insecure downloads from the untrusted server and says what it gives up, every run", .enabled(if: usable))
    func insecure() async throws {
        try await Self.withServer { server, _, digest in
            let temp = try TemporaryDirectory()
            let result = try await HaulProcess.get(
                ["-k", "-o", "big.bin", server.url("/big.bin").absoluteString],
                in: temp
            )
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: temp.file("big.bin")) == digest)
            #expect(
                result.stderr.hasPrefix("haul: warning: --insecure: servers' certificates are not checked"),
                "\(result.stderr)"
            )
        }
    }

    @Test(
        "mutual TLS: without a client certificate 403; with --cert and --key, or one bundle, the file",
        .enabled(if: usable)
    )
    func clientCertificate() async throws {
        try await Self.withServer { server, pki, digest in
            let url = server.url("/mtls/big.bin").absoluteString
            let without = try await HaulProcess.get(["--cacert", pki.caCertificate, url], in: try TemporaryDirectory())
            #expect(without.status == 6)
            #expect(without.stderr.contains("HTTP 403"), "\(without.stderr)")
            for flags in [["--cert", pki.clientCertificate, "--key", pki.clientKey], ["--cert", pki.clientBundle]] {
                let temp = try TemporaryDirectory()
                let result = try await HaulProcess.get(
                    ["--cacert", pki.caCertificate, "-o", "big.bin"] + flags + [url],
                    in: temp
                )
                #expect(result.status == 0, "\(flags): \(result.stderr)")
                #expect(sha256(file: temp.file("big.bin")) == digest)
            }
            let missing = try await HaulProcess.get(
                ["--cacert", pki.caCertificate, "--cert", pki.clientCertificate, url],
                in: try TemporaryDirectory()
            )
            #expect(missing.status == 2)
            #expect(missing.stderr.contains("holds no PEM private key"), "\(missing.stderr)")
        }
    }

    @Test("a CA file that is missing or not PEM is one sentence naming it", .enabled(if: usable))
    func badAuthorityFiles() async throws {
        try await Self.withServer { server, pki, _ in
            let url = server.url("/big.bin").absoluteString
            let missing = try await HaulProcess.get(
                ["--cacert", "/nonexistent/ca.pem", url],
                in: try TemporaryDirectory()
            )
            #expect(missing.status == 2)
            #expect(
                missing.stderr.contains(
                    "The certificate authorities file (--cacert) /nonexistent/ca.pem cannot be read"
                ),
                "\(missing.stderr)"
            )
            let notPEM = try await HaulProcess.get(["--cacert", pki.serverKey, url], in: try TemporaryDirectory())
            #expect(notPEM.status == 2)
            #expect(notPEM.stderr.contains("holds no PEM certificate"), "\(notPEM.stderr)")
        }
    }

    @Test(
        "kill -9 mid-download over TLS, run again: resumed with a range from the checkpoint, the right hash",
        .enabled(if: usable)
    )
    func resumeAfterKill() async throws {
        try await Self.withServer(slowRate: "1m") { server, pki, digest in
            let temp = try TemporaryDirectory()
            let arguments = [
                "get", "--cacert", pki.caCertificate, "-x", "1", "--checkpoint-interval", "0.1", "-o", "big.bin",
                server.url("/slow/big.bin").absoluteString,
            ]
            let first = try HaulProcess(arguments, home: temp.file("home"), directory: temp.path)
            let store = try Store(path: temp.file("home/haul.sqlite"))
            #expect(try await waitUntil { (try await store.infos().first?.bytesCommitted ?? 0) > 1 << 20 })
            first.kill(SIGKILL)
            _ = await first.finish()
            let committed = try #require(try await store.infos().first?.bytesCommitted)
            let second = try await HaulProcess.run(arguments, home: temp.file("home"), directory: temp.path)
            #expect(second.status == 0, "\(second.stderr)")
            #expect(sha256(file: temp.file("big.bin")) == digest)
            let last = try #require(server.accessLog().last)
            #expect(last[1] == "206")
            #expect(last[2] == resumeRange(from: committed))
        }
    }

    @Test("haul add --cacert: the daemon keeps the task's trust and completes it", .enabled(if: usable))
    func daemonKeepsTrust() async throws {
        try await Self.withServer { server, pki, digest in
            let temp = try TemporaryDirectory()
            let home = temp.file("home")
            let out = try temp.directory("out")
            let client = HaulClient(home: HaulHome(path: home))
            defer {
                Task {
                    _ = try? await HaulProcess.run(["daemon", "stop"], home: home)
                    try? await client.shutdown()
                }
            }
            let added = try await HaulProcess.run(
                ["add", "--cacert", pki.caCertificate, "-d", out, server.url("/big.bin").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            let waited = try await HaulProcess.run(["wait"], home: home)
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(sha256(file: out + "/big.bin") == digest)
            let stored = try await Store(path: home + "/haul.sqlite").allTasks()
            #expect(stored.first?.tls.certificateAuthorities == pki.caCertificate)
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }
}
