/// One key of the configuration file: an option of `haul get`, `haul add` or `haul daemon`.
struct ConfigKey: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        /// `key = "text"` or a number: the option with that value.
        case value
        /// `key = true|false`: the flag for each, if any (`remote-time = false` is `--no-remote-time`).
        case toggle(on: String?, off: String?)
        /// `key = ["a", "b"]` (or one string): the option once per item.
        case list

        var expected: String {
            switch self {
            case .value: "a string or a number"
            case .toggle: "true or false"
            case .list: "a string or an array of strings"
            }
        }
    }

    /// The name in the file: the option's long name without its dashes.
    let name: String
    /// The option a value becomes (for `value` and `list`).
    let option: String
    /// Every spelling of the option on a command line (a file's value yields to any of them).
    let spellings: Set<String>
    let kind: Kind
    let commands: Set<ConfigFile.Command>
    /// What it does, and its default.
    let help: String
    /// The default when neither the file nor the command line says, in words.
    let fallback: String

    init(
        _ name: String,
        short: String? = nil,
        also: [String] = [],
        kind: Kind = .value,
        _ commands: Set<ConfigFile.Command>,
        fallback: String,
        help: String
    ) {
        self.name = name
        self.option = "--" + name
        var spellings: Set<String> = ["--" + name]
        if let short { spellings.insert(short) }
        spellings.formUnion(also)
        if case .toggle(let on, let off) = kind {
            spellings.formUnion([on, off].compactMap { $0 })
        }
        self.spellings = spellings
        self.kind = kind
        self.commands = commands
        self.fallback = fallback
        self.help = help
    }

    /// The command-line arguments a value in the file stands for.
    func arguments(for value: ConfigFile.Value) -> [String] {
        switch (kind, value) {
        // `--name=value`, so a value that starts with a dash (-1) is the option's value,
        // not taken for another option.
        case (.value, .text(let text)): ["\(option)=\(text)"]
        case (.toggle(let on, let off), .toggle(let state)): [(state ? on : off)].compactMap { $0 }
        case (.list, .list(let items)): items.map { "\(option)=\($0)" }
        default: []
        }
    }

    static func == (lhs: ConfigKey, rhs: ConfigKey) -> Bool { lhs.name == rhs.name }
    func hash(into hasher: inout Hasher) { hasher.combine(name) }

    /// Every key, in the order `haul config show` lists them.
    static let all: [ConfigKey] = [
        // Where and how each file is fetched.
        ConfigKey(
            "directory",
            short: "-d",
            [.get, .add],
            fallback: "the current directory",
            help: "-d: where files go"
        ),
        ConfigKey("connections", short: "-x", [.get, .add], fallback: "4", help: "-x: connections per file"),
        ConfigKey("min-split", [.get, .add], fallback: "4M", help: "the smallest segment, e.g. 4M"),
        ConfigKey("limit-rate", [.get, .add], fallback: "none", help: "each file's speed limit, e.g. 10M"),
        ConfigKey("header", short: "-H", kind: .list, [.get, .add], fallback: "none", help: "extra request headers"),
        ConfigKey(
            "force",
            kind: .toggle(on: "--force", off: nil),
            [.get, .add],
            fallback: "false",
            help: "replace files already at the destination"
        ),
        ConfigKey(
            "timestamping",
            short: "-N",
            also: ["--check-newer"],
            kind: .toggle(on: "--timestamping", off: nil),
            [.get, .add],
            fallback: "false",
            help: "-N: check files at the destination for a newer version"
        ),
        ConfigKey(
            "continue",
            kind: .toggle(on: "--continue", off: nil),
            [.get, .add],
            fallback: "false",
            help: "continue partial files other tools left"
        ),
        ConfigKey(
            "follow-metalink",
            kind: .toggle(on: "--follow-metalink", off: "--no-follow-metalink"),
            [.get, .add],
            fallback: "true",
            help: "download the files a downloaded Metalink describes"
        ),
        ConfigKey(
            "on-complete",
            [.get, .add, .daemon],
            fallback: "none",
            help: "a program run when a file is complete"
        ),
        ConfigKey("on-error", [.get, .add, .daemon], fallback: "none", help: "a program run when a download fails"),
        // The network.
        ConfigKey("proxy", [.get, .add], fallback: "direct", help: "the proxy URL"),
        ConfigKey("noproxy", [.get, .add], fallback: "none", help: "hosts reached directly, comma-separated"),
        ConfigKey("cacert", [.get, .add], fallback: "the system's", help: "trusted authorities (PEM file)"),
        ConfigKey("capath", [.get, .add], fallback: "the system's", help: "a directory of trusted authorities"),
        ConfigKey(
            "insecure",
            short: "-k",
            kind: .toggle(on: "--insecure", off: nil),
            [.get, .add],
            fallback: "false",
            help: "skip certificate checks (warned on every run)"
        ),
        ConfigKey("cert", [.get, .add], fallback: "none", help: "a client certificate (PEM)"),
        ConfigKey("key", [.get, .add], fallback: "none", help: "the client certificate's key (PEM)"),
        ConfigKey(
            "netrc",
            kind: .toggle(on: "--netrc", off: nil),
            [.get, .add],
            fallback: "false",
            help: "look hosts up in ~/.netrc"
        ),
        ConfigKey("netrc-file", [.get, .add], fallback: "none", help: "a netrc file to look hosts up in"),
        ConfigKey(
            "cookies",
            kind: .toggle(on: nil, off: "--no-cookies"),
            [.get, .add],
            fallback: "true",
            help: "keep the cookies servers set across redirects"
        ),
        ConfigKey(
            "metered",
            kind: .toggle(on: nil, off: "--no-metered"),
            [.get, .add],
            fallback: "true",
            help: "allow metered networks"
        ),
        // The process.
        ConfigKey("max-concurrent", short: "-j", [.get, .daemon], fallback: "3", help: "-j: files at once"),
        ConfigKey("max-per-host", [.daemon], fallback: "8", help: "downloads at once per host"),
        ConfigKey(
            "max-connections-per-host",
            [.get, .daemon],
            fallback: "16 (haul get: -j × -x)",
            help: "connections at once per host, over its downloads"
        ),
        ConfigKey("total-limit-rate", [.get, .daemon], fallback: "none", help: "all files together, e.g. 20M"),
        ConfigKey("retries", [.get, .daemon], fallback: "5", help: "quick retries in a row without progress"),
        ConfigKey("connect-timeout", [.get, .daemon], fallback: "30", help: "seconds to wait for a connection"),
        ConfigKey(
            "timeout",
            [.get, .daemon],
            fallback: "60",
            help: "seconds of silence before a connection is broken"
        ),
        ConfigKey("retry-max-wait", [.get, .daemon], fallback: "600", help: "the longest Retry-After honoured"),
        ConfigKey(
            "lowest-speed-limit",
            [.get, .daemon],
            fallback: "none",
            help: "break a connection slower than this, e.g. 1K"
        ),
        ConfigKey(
            "lowest-speed-time",
            [.get, .daemon],
            fallback: "30",
            help: "seconds under the lowest speed before it is broken"
        ),
        ConfigKey(
            "wait-for-network",
            [.get, .daemon],
            fallback: "10m (get), unlimited (daemon)",
            help: "how long to wait for the network"
        ),
        ConfigKey(
            "remote-time",
            kind: .toggle(on: nil, off: "--no-remote-time"),
            [.get, .daemon],
            fallback: "true",
            help: "the server's Last-Modified as the file's time"
        ),
        ConfigKey(
            "xattr",
            kind: .toggle(on: nil, off: "--no-xattr"),
            [.get, .daemon],
            fallback: "true",
            help: "record the URL in user.xdg.origin.url"
        ),
        ConfigKey("session", [.add], fallback: "default", help: "the session tasks join"),
        ConfigKey("priority", [.add], fallback: "0", help: "higher starts sooner"),
        ConfigKey(
            "listen",
            [.daemon],
            fallback: "none (the Unix socket only)",
            help: "a TCP address, e.g. 127.0.0.1:7800"
        ),
        ConfigKey("log-level", [.daemon], fallback: "info", help: "trace, debug, info, notice, warning, error"),
    ]
}
