import Foundation
import Haul
import NIOSSL
import PostgresNIO

/// Where fleet mode's database is: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, as
/// `haul daemon --store` and `HAUL_STORE` take it (libpq's URI form; `postgresql://` too).
///
/// `?sslmode=` says how TLS is used: `disable`, `prefer` (the default: TLS when the server
/// offers it) or `require`. Whenever TLS is used the server's certificate is verified
/// against the system's trust roots — stricter than libpq's `require`, which does not
/// verify. Shown (``description``) without its password.
public struct PostgresLocation: Sendable, CustomStringConvertible {
    public enum TLSMode: String, Sendable { case disable, prefer, require }

    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    /// Reads a location, refusing anything that is not one in one sentence (the password
    /// never shown).
    /// - Throws: ``HaulError/Code/invalidArgument``.
    public init(parsing text: String) throws {
        func refuse(_ why: String) -> HaulError {
            HaulError(
                .invalidArgument,
                "The store '\(Redaction.text(text))' is not a PostgreSQL URL: \(why)",
                hint: "Give postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            )
        }
        guard text.utf8.count <= 2048 else { throw refuse("it is longer than 2048 bytes") }
        guard let components = URLComponents(string: text) else { throw refuse("it cannot be read as a URL") }
        guard let scheme = components.scheme?.lowercased(), scheme == "postgres" || scheme == "postgresql" else {
            throw refuse("its scheme is not postgres://")
        }
        guard let host = components.host, !host.isEmpty else { throw refuse("it names no host") }
        guard let user = components.user, !user.isEmpty else { throw refuse("it names no user") }
        let port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw refuse("its port is not from 1 to 65535") }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let database = path.removingPercentEncoding ?? path
        guard !database.isEmpty, !database.contains("/") else { throw refuse("it names no database (/DATABASE)") }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw refuse("sslmode must be disable, prefer or require")
                }
                tls = mode
            default:
                throw refuse("Haul does not know the parameter '\(item.name.prefix(40))'")
            }
        }
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.port = port
        self.user = user.removingPercentEncoding ?? user
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database
        self.tls = tls
    }

    /// The location with its password hidden.
    public var description: String {
        let credentials = password == nil ? user : "\(user):***"
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "postgres://\(credentials)@\(shownHost):\(port)/\(database)"
    }

    /// The client's configuration: these credentials, TLS as `tls` says (always verified).
    var configuration: PostgresClient.Configuration {
        let tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        let mode: PostgresClient.Configuration.TLS
        switch tls {
        case .disable: mode = .disable
        case .prefer: mode = .prefer(tlsConfiguration)
        case .require: mode = .require(tlsConfiguration)
        }
        return PostgresClient.Configuration(
            host: host,
            port: port,
            username: user,
            password: password,
            database: database,
            tls: mode
        )
    }

    /// The configuration of node `node`'s client, whose leases last `leaseDuration`.
    func configuration(node: String, leaseDuration: Duration) -> PostgresClient.Configuration {
        var configuration = configuration
        // A node stalled inside a transaction (SIGSTOP, a pause of its machine) must not hold
        // a task's row locked past its lease: the server ends such a transaction then, so
        // another node can take the task over (its fenced writes would fail anyway).
        let milliseconds =
            leaseDuration.components.seconds * 1000 + leaseDuration.components.attoseconds / 1_000_000_000_000_000
        configuration.options.additionalStartupParameters.append(
            ("idle_in_transaction_session_timeout", "\(max(100, milliseconds))")
        )
        // Which node each server connection serves, for `pg_stat_activity` (and the tests).
        configuration.options.additionalStartupParameters.append(("application_name", "haul \(node)"))
        return configuration
    }
}

extension Downloader.StoreLocation {
    /// Fleet mode's PostgreSQL store, already connected (``PostgresStore/connect(to:logger:)``).
    public static func postgres(_ store: PostgresStore) -> Downloader.StoreLocation { .engine(store) }
}
