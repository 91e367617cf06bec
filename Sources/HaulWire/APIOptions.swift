import Foundation

/// The values API bodies and events carry, as the wire has them: plain `Codable` values of
/// version 1 of the API (``API/prefix``), each field optional where the daemon has a
/// default, independent of the library's types (HaulWireMapping maps between the two).
extension API {
    /// A task's state (`haul list`'s STATE).
    public enum TaskState: String, Codable, Sendable, CaseIterable {
        case queued, running, paused, completed, failed, retrying, waitingForNetwork, cancelled
    }

    /// Why a task's state changed.
    public enum StateChangeReason: String, Codable, Sendable, CaseIterable {
        case started, paused, yielded, storeRefused, revoked, completed, failed, resumed, cancelled, recovered
        case retryLater, retryDue, noRoute, metered, networkAvailable, networkWaitExpired
    }

    /// When a hook runs: a download completed, or failed.
    public enum HookMoment: String, Codable, Sendable {
        case complete, error
    }

    /// One request header.
    public struct Header: Codable, Sendable, Equatable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Whom a download trusts over TLS; paths as the daemon sees them.
    public struct TLS: Codable, Sendable, Equatable {
        /// A PEM file of the authorities to trust instead of the system's.
        public var certificateAuthorities: String?
        /// A directory of PEM files of authorities to trust.
        public var certificateDirectory: String?
        /// false: certificates are not checked (`--insecure`); absent: they are.
        public var verifiesCertificates: Bool?
        /// A PEM client certificate (mutual TLS), possibly with its key.
        public var clientCertificate: String?
        /// The client certificate's PEM key, when in a file of its own.
        public var clientKey: String?

        public init(
            certificateAuthorities: String? = nil,
            certificateDirectory: String? = nil,
            verifiesCertificates: Bool? = nil,
            clientCertificate: String? = nil,
            clientKey: String? = nil
        ) {
            self.certificateAuthorities = certificateAuthorities
            self.certificateDirectory = certificateDirectory
            self.verifiesCertificates = verifiesCertificates
            self.clientCertificate = clientCertificate
            self.clientKey = clientKey
        }
    }

    /// The proxies a download goes through; `{}` for none.
    public struct Proxy: Codable, Sendable, Equatable {
        public var http: String?
        public var https: String?
        public var all: String?
        /// Hosts, domains, addresses and blocks reached directly.
        public var noProxy: [String]?

        public init(http: String? = nil, https: String? = nil, all: String? = nil, noProxy: [String]? = nil) {
            self.http = http
            self.https = https
            self.all = all
            self.noProxy = noProxy
        }
    }

    /// The user and password (or a netrc file, as the daemon sees it) for a server.
    public struct Credentials: Codable, Sendable, Equatable {
        public var user: String?
        public var password: String?
        public var netrcFile: String?

        public init(user: String? = nil, password: String? = nil, netrcFile: String? = nil) {
            self.user = user
            self.password = password
            self.netrcFile = netrcFile
        }
    }

    /// What a download does with cookies.
    public struct Cookies: Codable, Sendable, Equatable {
        /// false: no cookies at all; absent: kept across the download's redirects.
        public var enabled: Bool?
        /// A cookie file to read (Netscape format).
        public var load: String?
        /// A `Cookie` header's value to send.
        public var header: String?
        /// A cookie file to write what the servers set.
        public var save: String?

        public init(enabled: Bool? = nil, load: String? = nil, header: String? = nil, save: String? = nil) {
            self.enabled = enabled
            self.load = load
            self.header = header
            self.save = save
        }
    }

    /// Programs run when a download ends.
    public struct Hooks: Codable, Sendable, Equatable {
        public var onComplete: String?
        public var onError: String?

        public init(onComplete: String? = nil, onError: String? = nil) {
            self.onComplete = onComplete
            self.onError = onError
        }
    }

    /// How bodies and event lines are written and read: sorted keys, unescaped slashes,
    /// ISO 8601 dates.
    public enum JSON {
        public static func encoder(pretty: Bool = false) -> JSONEncoder {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            if pretty { encoder.outputFormatting.insert(.prettyPrinted) }
            encoder.dateEncodingStrategy = .iso8601
            return encoder
        }

        public static var decoder: JSONDecoder {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return decoder
        }
    }
}
