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

    /// Says on stderr, once per run, what `--insecure` gives up.
    func warnIfInsecure() {
        guard insecure else { return }
        Output.error(
            "haul: warning: --insecure: servers' certificates are not checked; anyone on the way can read and change the downloads\n"
        )
    }
}
