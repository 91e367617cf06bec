import ArgumentParser
import Foundation
import Haul

/// How downloads reach their servers: proxies, TLS trust and identity. `haul get` and
/// `haul add` share them; the names and the environment variables are curl's.
struct ConnectionOptions: ParsableArguments {
    @Option(
        name: .customLong("proxy"),
        help: ArgumentHelp(
            "Send requests through this proxy: http://[user:password@]host[:port], socks5:// or socks5h:// ('' for none).",
            discussion: "Without it: http_proxy, https_proxy, all_proxy (as curl reads them)."
        )
    )
    var proxy: String?

    @Option(
        name: .customLong("noproxy"),
        help: "Reach these hosts directly: a comma-separated list of domains, IPs, CIDR blocks, or * (also: no_proxy)."
    )
    var noProxy: String?

    @Option(
        name: [.customShort("u"), .customLong("user")],
        help: "The user and password for the server, USER:PASSWORD (sent to the URL's host only)."
    )
    var user: String?

    @Flag(name: .customLong("netrc"), help: "Look hosts up in ~/.netrc (or $NETRC) for their user and password.")
    var netrc = false

    @Option(name: .customLong("netrc-file"), help: "Look hosts up in this netrc file.")
    var netrcFile: String?

    @Option(
        name: [.customShort("b"), .customLong("cookie")],
        help: "Start with these cookies: a Netscape cookie file, or 'NAME=VALUE; NAME2=VALUE2'."
    )
    var cookie: String?

    @Option(name: [.customShort("c"), .customLong("cookie-jar")], help: "Save the cookies to this file at the end.")
    var cookieJar: String?

    @Flag(name: .customLong("no-cookies"), help: "Neither keep nor send cookies servers set.")
    var noCookies = false

    @Flag(
        name: .customLong("no-metered"),
        help: "Never use a metered network (mobile broadband): wait for another one."
    )
    var noMetered = false

    @Option(
        name: .customLong("cacert"),
        help: "Trust the certificate authorities in this PEM file instead of the system's (also: SSL_CERT_FILE)."
    )
    var caFile: String?

    @Option(
        name: .customLong("capath"),
        help: "Also trust the PEM certificates in this directory (also: SSL_CERT_DIR)."
    )
    var caDirectory: String?

    @Flag(
        name: [.customShort("k"), .customLong("insecure")],
        help: "Do not check servers' certificates (anyone on the way can then read and change the download)."
    )
    var insecure = false

    @Option(name: .customLong("cert"), help: "Present this client certificate (PEM; it may hold the key too).")
    var clientCertificate: String?

    @Option(name: .customLong("key"), help: "The private key of --cert, when it is in a file of its own (PEM).")
    var clientKey: String?

    /// The TLS options these flags and the environment give: a flag wins over its variable.
    func tls(environment: [String: String] = ProcessInfo.processInfo.environment) -> TLSOptions {
        var options = TLSOptions.fromEnvironment(environment)
        if let caFile { options.certificateAuthorities = Destination.absolute(caFile) }
        if let caDirectory { options.certificateDirectory = Destination.absolute(caDirectory) }
        options.verifiesCertificates = !insecure
        options.clientCertificate = clientCertificate.map(Destination.absolute)
        options.clientKey = clientKey.map(Destination.absolute)
        return options
    }

    /// The proxies these flags and the environment give: `--proxy` replaces every variable's
    /// proxy (an empty one means none), `--noproxy` replaces `no_proxy`.
    func proxies(environment: [String: String] = ProcessInfo.processInfo.environment) -> ProxySettings {
        var settings = ProxySettings.fromEnvironment(environment)
        if let proxy {
            let given = proxy.trimmingCharacters(in: .whitespaces)
            settings.http = given.isEmpty ? nil : given
            settings.https = settings.http
            settings.all = settings.http
        }
        if let noProxy { settings.noProxy = ProxySettings.list(noProxy) }
        return settings
    }

    /// The credentials `-u`, `--netrc` and `--netrc-file` give.
    func credentials(environment: [String: String] = ProcessInfo.processInfo.environment) -> Credentials {
        var credentials = user.map(Credentials.init(userAndPassword:)) ?? .none
        if let netrcFile {
            credentials.netrcFile = Destination.absolute(netrcFile)
        } else if netrc {
            credentials.netrcFile = Credentials.defaultNetrcFile(environment)
        }
        return credentials
    }

    /// What to do with cookies: `-b` is a file unless it holds `=` and no such file exists.
    func cookies() -> CookieOptions {
        var options = CookieOptions(enabled: !noCookies)
        if let cookie {
            if cookie.contains("="), !FileManager.default.fileExists(atPath: cookie) {
                options.header = cookie
            } else {
                options.load = Destination.absolute(cookie)
            }
        }
        // Not resolved: the jar is written to a new file renamed into place, so a symbolic link
        // there is replaced, and the file it points to is neither written nor made 0600.
        options.save = cookieJar.map(Destination.absoluteKeepingLinks)
        return options
    }

    /// Says on stderr, once per run, what `--insecure` gives up.
    func warnIfInsecure() {
        guard insecure else { return }
        Output.error(
            "haul: warning: --insecure: servers' certificates are not checked; anyone on the way can read and change the downloads\n"
        )
    }
}

/// Timeouts, the longest wait a server may ask for, and how long a download waits for the
/// network: the same options for `haul get` and `haul daemon` (which applies them to every
/// download it runs).
struct TimingOptions: ParsableArguments {
    @Option(name: .customLong("connect-timeout"), help: "Seconds to wait for a connection (default 30).")
    var connectTimeout: Double?

    @Option(help: "Seconds without data before a connection counts as failed (default 60).")
    var timeout: Double?

    @Option(
        name: .customLong("retry-max-wait"),
        help:
            "The longest wait a server may ask for (Retry-After) before a retry, in seconds; longer fails at once (default 600)."
    )
    var retryMaxWait: Double?

    @Option(
        name: .customLong("wait-for-network"),
        help:
            "How long a download whose server has no usable route (a link down, no network) waits for it, e.g. 10m, 1h (haul get: default 10m; the daemon: as long as it takes)."
    )
    var waitForNetwork: SpokenDuration?

    @Option(
        name: .customLong("lowest-speed-limit"),
        help:
            "Break a connection that stays under this speed (e.g. 1K, bytes per second) for --lowest-speed-time, and try again from its checkpoint; 0 for none (the default)."
    )
    var lowestSpeedLimit: ByteCount?

    @Option(
        name: .customLong("lowest-speed-time"),
        help: "Seconds a connection may stay under --lowest-speed-limit (default 30)."
    )
    var lowestSpeedTime: Double?

    func validate() throws {
        let year = 365.0 * 86400
        for value in [connectTimeout, timeout].compactMap({ $0 }) where !(value > 0 && value <= year) {
            throw ValidationError("Timeouts must be positive numbers of seconds, at most a year")
        }
        if let retryMaxWait, !(retryMaxWait >= 0 && retryMaxWait <= year) {
            throw ValidationError("--retry-max-wait must be from 0 to \(Int(year)) seconds (a year)")
        }
        if let waitForNetwork, waitForNetwork.seconds > KeepTrying.longestGiveUp.components.seconds {
            throw ValidationError("--wait-for-network must be at most 366 days")
        }
        if let lowestSpeedTime, !(lowestSpeedTime >= 1 && lowestSpeedTime <= 86400) {
            throw ValidationError("--lowest-speed-time must be from 1 to 86400 seconds")
        }
        if lowestSpeedTime != nil, lowestSpeed == nil {
            throw ValidationError("--lowest-speed-time goes with --lowest-speed-limit")
        }
    }

    /// The speed floor asked for; nil for none (no limit, or 0).
    var lowestSpeed: LowestSpeed? {
        guard let limit = lowestSpeedLimit?.bytes, limit > 0 else { return nil }
        return try? LowestSpeed(bytesPerSecond: limit, time: .milliseconds(Int64((lowestSpeedTime ?? 30) * 1000)))
    }

    var connect: Duration? { connectTimeout.map { .milliseconds(Int64($0 * 1000)) } }
    var read: Duration? { timeout.map { .milliseconds(Int64($0 * 1000)) } }
    var maxRetryAfter: Duration? { retryMaxWait.map { .milliseconds(Int64($0 * 1000)) } }

    /// Sets what was given on `downloader`.
    func apply(to downloader: inout Downloader.Configuration) {
        if let connect { downloader.connectTimeout = connect }
        if let read { downloader.readTimeout = read }
        if let maxRetryAfter { downloader.retry.maxRetryAfter = maxRetryAfter }
        if let lowestSpeed { downloader.lowestSpeed = lowestSpeed }
    }

    /// The options again, for a process started with them (the daemon in the background).
    var arguments: [String] {
        var arguments: [String] = []
        if let connectTimeout { arguments += ["--connect-timeout", "\(connectTimeout)"] }
        if let timeout { arguments += ["--timeout", "\(timeout)"] }
        if let retryMaxWait { arguments += ["--retry-max-wait", "\(retryMaxWait)"] }
        if let waitForNetwork { arguments += ["--wait-for-network", "\(waitForNetwork.seconds)s"] }
        if let lowestSpeedLimit { arguments += ["--lowest-speed-limit", "\(lowestSpeedLimit.bytes)"] }
        if let lowestSpeedTime { arguments += ["--lowest-speed-time", "\(lowestSpeedTime)"] }
        return arguments
    }
}
