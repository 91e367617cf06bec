import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Whom a download trusts over TLS, and how it proves who it is.
///
/// The default trusts the system's certificate authorities and checks every certificate.
/// The names follow curl's options, which the command line takes as they are.
///
/// ```swift
/// var request = DownloadRequest(url: url, destination: .directory("/data"))
/// request.tls.certificateAuthorities = "/etc/company/ca.pem"   // --cacert
/// ```
public struct TLSOptions: Sendable, Hashable, Codable {
    /// A PEM file of certificate authorities that replaces the system's (curl's `--cacert`,
    /// the `SSL_CERT_FILE` variable).
    public var certificateAuthorities: String?
    /// A directory of PEM certificate authorities (`*.pem`, `*.crt`, `*.cer`), trusted as well
    /// as the system's — or as well as ``certificateAuthorities`` when that is set (curl's
    /// `--capath`, the `SSL_CERT_DIR` variable).
    public var certificateDirectory: String?
    /// Whether the server's certificate is checked: false only when the user explicitly
    /// said so (`-k/--insecure`).
    public var verifiesCertificates: Bool
    /// A PEM file with this client's certificate (and its chain), for servers that ask for
    /// one (mutual TLS; curl's `--cert`). It may hold the private key too.
    public var clientCertificate: String?
    /// The PEM private key of ``clientCertificate`` when it is in a file of its own (`--key`).
    public var clientKey: String?

    public init(
        certificateAuthorities: String? = nil,
        certificateDirectory: String? = nil,
        verifiesCertificates: Bool = true,
        clientCertificate: String? = nil,
        clientKey: String? = nil
    ) {
        self.certificateAuthorities = certificateAuthorities
        self.certificateDirectory = certificateDirectory
        self.verifiesCertificates = verifiesCertificates
        self.clientCertificate = clientCertificate
        self.clientKey = clientKey
    }

    private enum CodingKeys: String, CodingKey {
        case certificateAuthorities, certificateDirectory, verifiesCertificates, clientCertificate, clientKey
    }

    /// Every field may be left out: an absent one takes its default.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        certificateAuthorities = try container.decodeIfPresent(String.self, forKey: .certificateAuthorities)
        certificateDirectory = try container.decodeIfPresent(String.self, forKey: .certificateDirectory)
        verifiesCertificates = try container.decodeIfPresent(Bool.self, forKey: .verifiesCertificates) ?? true
        clientCertificate = try container.decodeIfPresent(String.self, forKey: .clientCertificate)
        clientKey = try container.decodeIfPresent(String.self, forKey: .clientKey)
    }

    /// Whether these are the defaults: the system's authorities, every certificate checked,
    /// no client certificate.
    public var isDefault: Bool { self == TLSOptions() }

    /// The defaults as OpenSSL's variables change them, as curl, wget and aria2 read them:
    /// `SSL_CERT_FILE` replaces the system's authorities, `SSL_CERT_DIR` adds a directory
    /// (the first of a colon-separated list). Relative paths are taken from the current
    /// directory; empty values are ignored.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> TLSOptions {
        var options = TLSOptions()
        if let file = environment["SSL_CERT_FILE"], !file.isEmpty {
            options.certificateAuthorities = Destination.absolute(file)
        }
        if let list = environment["SSL_CERT_DIR"],
            let directory = list.split(separator: ":").first.map(String.init), !directory.isEmpty
        {
            options.certificateDirectory = Destination.absolute(directory)
        }
        return options
    }

    /// The longest path taken.
    static let maxPathLength = 4096

    /// Checks the paths' syntax (absolute, no NUL, not huge) and that a key comes with a
    /// certificate. Whether the files can be read and parsed is checked when a transfer
    /// starts (``configuration()``), where the daemon reads them.
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the option.
    func validate() throws {
        let paths: [(String, String?)] = [
            ("certificate authorities file (--cacert)", certificateAuthorities),
            ("certificate directory (--capath)", certificateDirectory),
            ("client certificate (--cert)", clientCertificate),
            ("client key (--key)", clientKey),
        ]
        for case let (what, path?) in paths {
            guard path.hasPrefix("/"), path.utf8.count <= TLSOptions.maxPathLength, !path.utf8.contains(0) else {
                throw HaulError(
                    .invalidArgument,
                    "The \(what) must be an absolute path without NUL, at most 4096 bytes",
                    hint: "Give the full path of the file"
                )
            }
        }
        if clientKey != nil, clientCertificate == nil {
            throw HaulError(
                .invalidArgument,
                "A client key (--key) was given without a client certificate (--cert)",
                hint: "Give the certificate with --cert FILE"
            )
        }
    }

    /// The client TLS configuration these options describe, reading the files they name
    /// (on the file threads, ``FileIO``: reading is blocking I/O). Loaded once per process and options,
    /// and again only when one of the files changes (its size or modification time), so a
    /// thousand downloads with the same `--cacert` read it once, and a daemon sees a
    /// replaced bundle at the next start of a task.
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the file that cannot be read or
    ///   holds no usable certificate or key.
    func configuration() async throws -> TLSConfiguration {
        // Options that name no file read nothing: no hop to a file thread.
        if certificateAuthorities == nil, certificateDirectory == nil, clientCertificate == nil, clientKey == nil {
            return try loadConfiguration()
        }
        return try await FileIO.run {
            let stamp = self.stamp()
            if let cached = TLSOptions.loaded.withLock({ $0[self] }), cached.stamp == stamp {
                return cached.configuration
            }
            let configuration = try self.loadConfiguration()
            TLSOptions.loaded.withLock { cache in
                if cache.count >= 64 { cache.removeAll() }
                cache[self] = (stamp, configuration)
            }
            return configuration
        }
    }

    /// Configurations already loaded, with the stamp of their files then.
    private static let loaded = Mutex<[TLSOptions: (stamp: [String], configuration: TLSConfiguration)]>([:])

    /// Size and modification time of every file and directory these options name.
    private func stamp() -> [String] {
        [certificateAuthorities, certificateDirectory, clientCertificate, clientKey].map { path in
            guard let path, let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return "-" }
            let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
            return "\(attributes[.size] as? Int ?? -1):\(modified)"
        }
    }

    func loadConfiguration() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if !verifiesCertificates { configuration.certificateVerification = .none }
        if let file = certificateAuthorities {
            configuration.trustRoots = .certificates(
                try TLSOptions.certificates(in: file, what: "certificate authorities file (--cacert)")
            )
        }
        if let directory = certificateDirectory {
            configuration.additionalTrustRoots = [.certificates(try TLSOptions.directoryCertificates(directory))]
        }
        if let file = clientCertificate {
            let chain = try TLSOptions.certificates(in: file, what: "client certificate (--cert)")
            configuration.certificateChain = chain.map { .certificate($0) }
            let keyFile = clientKey ?? file
            do {
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: keyFile, format: .pem))
            } catch {
                throw HaulError(
                    .invalidArgument,
                    "The client key \(keyFile) cannot be read or holds no PEM private key",
                    path: keyFile,
                    hint: clientKey == nil
                        ? "Give the key's own file with --key FILE" : "Check the file (PEM, unencrypted)"
                )
            }
        }
        return configuration
    }

    /// The PEM certificates in `file`.
    static func certificates(in file: String, what: String) throws -> [NIOSSLCertificate] {
        guard FileManager.default.isReadableFile(atPath: file) else {
            throw HaulError(
                .invalidArgument,
                "The \(what) \(file) cannot be read",
                path: file,
                hint: "Check the path and its permissions"
            )
        }
        let certificates = (try? NIOSSLCertificate.fromPEMFile(file)) ?? []
        guard !certificates.isEmpty else {
            throw HaulError(
                .invalidArgument,
                "The \(what) \(file) holds no PEM certificate",
                path: file,
                hint: "Give a file of '-----BEGIN CERTIFICATE-----' blocks"
            )
        }
        return certificates
    }

    /// Every certificate in the PEM files of `directory` (not its subdirectories).
    static func directoryCertificates(_ directory: String) throws -> [NIOSSLCertificate] {
        let what = "certificate directory (--capath)"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
            throw HaulError(
                .invalidArgument,
                "The \(what) \(directory) cannot be read",
                path: directory,
                hint: "Check the path and its permissions"
            )
        }
        var found: [NIOSSLCertificate] = []
        for name in names.sorted() {
            let lowered = name.lowercased()
            // Names as c_rehash makes them (`5ed36f99.0`) or as people save them.
            let hashed = lowered.split(separator: ".").last.map { $0.allSatisfy(\.isNumber) } ?? false
            guard lowered.hasSuffix(".pem") || lowered.hasSuffix(".crt") || lowered.hasSuffix(".cer") || hashed
            else { continue }
            found += (try? NIOSSLCertificate.fromPEMFile((directory as NSString).appendingPathComponent(name))) ?? []
        }
        guard !found.isEmpty else {
            throw HaulError(
                .invalidArgument,
                "The \(what) \(directory) holds no PEM certificate",
                path: directory,
                hint: "Put the authorities' certificates there as .pem or .crt files"
            )
        }
        return found
    }
}
