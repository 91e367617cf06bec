import Foundation
import Testing

/// Certificates made by openssl for one test: a certificate authority, a server certificate
/// it signed for 127.0.0.1 and localhost, a client certificate it signed, and a second,
/// unrelated authority.
package struct TestPKI: Sendable {
    package let directory: TemporaryDirectory
    package var caCertificate: String { directory.file("ca.pem") }
    package var serverCertificate: String { directory.file("server.pem") }
    package var serverKey: String { directory.file("server.key") }
    package var clientCertificate: String { directory.file("client.pem") }
    package var clientKey: String { directory.file("client.key") }
    /// The client's certificate and key in one file, as curl's --cert takes them.
    package var clientBundle: String { directory.file("client-bundle.pem") }
    package var otherCACertificate: String { directory.file("other-ca.pem") }
    /// A directory holding only ca.pem, for --capath and SSL_CERT_DIR.
    package var caDirectory: String { directory.file("cadir") }

    package static var openssl: String? { ExternalServer.findExecutable("openssl") }

    package static func make() async throws -> TestPKI {
        let openssl = try #require(TestPKI.openssl, "openssl is not installed (apt-get install openssl)")
        let directory = try TemporaryDirectory()
        let pki = TestPKI(directory: directory)
        func run(_ arguments: [String]) async throws {
            let (status, output) = try await Command.run(openssl, arguments, in: directory.path)
            try #require(status == 0, "openssl \(arguments.joined(separator: " ")) failed: \(output)")
        }
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for name in ["ca", "other-ca"] {
            try await run(
                ["req", "-x509"] + key + [
                    "-keyout", "\(name).key", "-out", "\(name).pem", "-days", "2", "-subj", "/CN=Haul test \(name)",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                ]
            )
        }
        let extensions: [(String, String)] = [
            ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ]
        for (name, text) in extensions {
            try (text + "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n").write(
                toFile: directory.file("\(name).ext"),
                atomically: true,
                encoding: .utf8
            )
            try await run(["req"] + key + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"])
            try await run([
                "x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "\(name).pem", "-days", "2", "-extfile", "\(name).ext",
            ])
        }
        let bundle =
            try String(contentsOfFile: pki.clientCertificate, encoding: .utf8)
            + String(contentsOfFile: pki.clientKey, encoding: .utf8)
        try bundle.write(toFile: pki.clientBundle, atomically: true, encoding: .utf8)
        _ = try directory.directory("cadir")
        try FileManager.default.copyItem(atPath: pki.caCertificate, toPath: pki.caDirectory + "/test-ca.pem")
        return pki
    }
}
