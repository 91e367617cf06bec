import ArgumentParser

/// `haul get`'s words read from a table of its options, without ArgumentParser's parse.
///
/// ArgumentParser learns a command's options by reflecting its properties at every run: for
/// `get`'s fifty options that is about 2 ms of a 1 KiB download's 12. This reads the usual
/// command lines — options by their names (`-x 8`, `--limit-rate 1M`, `--limit-rate=1M`),
/// URLs, `--` — and builds the same ``HaulCommand/Get`` ArgumentParser would, through the
/// property wrappers' setters. Anything else (help, `--version`, `-qv`, an unknown option, an
/// option given twice, a value that is not of its kind or fails a check) gives nil, and the
/// whole command line goes to ArgumentParser, which parses it or says what is wrong as ever.
/// `GetParseTests` holds the two parses to the same result for every name in the table.
enum GetCommandLine {
    typealias Get = HaulCommand.Get

    /// What a name does to the command being built.
    enum Action {
        /// Sets a flag to this value.
        case flag(WritableKeyPath<Get, Bool>, Bool)
        /// Reads the next word (or the text after `=`); false when it is not of the kind.
        case value((inout Get, String) -> Bool)
        /// As `value`, and may be given again: each value is added.
        case list(WritableKeyPath<Get, [String]>)

        var repeatable: Bool {
            if case .list = self { true } else { false }
        }
    }

    /// `get`'s command line, `get` itself left out; nil when ArgumentParser should read it.
    static func parse(_ words: some Collection<String>) -> Get? {
        let actions = table()
        var get = defaults()
        var given: Set<String> = []  // the options given, by their first name
        var index = words.startIndex
        while index < words.endIndex {
            let word = words[index]
            words.formIndex(after: &index)
            if word == "--" {
                get.downloads.urls += words[index...]
                break
            }
            guard word.hasPrefix("-"), word != "-" else {
                get.downloads.urls.append(word)
                continue
            }
            // `--name=value`: the value may start with a dash.
            let equals = word.hasPrefix("--") ? word.firstIndex(of: "=") : nil
            let name = equals.map { String(word[..<$0]) } ?? word
            guard let (first, action) = actions[name] else { return nil }
            var value: String? = equals.map { String(word[word.index(after: $0)...]) }
            if case .flag = action {
                guard value == nil else { return nil }
            } else if value == nil {
                // The next word, unless it is an option (ArgumentParser's `.next`).
                guard index < words.endIndex, !words[index].hasPrefix("-") || words[index] == "-" else { return nil }
                value = words[index]
                words.formIndex(after: &index)
            }
            guard action.repeatable || given.insert(first).inserted else { return nil }
            guard apply(action, value, to: &get) else { return nil }
        }
        return valid(get) ? get : nil
    }

    private static func apply(_ action: Action, _ value: String?, to get: inout Get) -> Bool {
        switch action {
        case .flag(let path, let state): get[keyPath: path] = state
        case .value(let read): return read(&get, value ?? "")
        case .list(let path): get[keyPath: path].append(value ?? "")
        }
        return true
    }

    /// The checks ArgumentParser makes after a parse: each group's and the command's.
    private static func valid(_ get: Get) -> Bool {
        do {
            try get.downloads.validate()
            try get.timing.validate()
            try get.validate()
            return true
        } catch {
            return false
        }
    }

    /// `get` with every option at its declared default, as ArgumentParser starts it. Each
    /// property is set: one left at its definition could not be read.
    static func defaults() -> Get {
        var connection = ConnectionOptions()
        (connection.proxy, connection.noProxy, connection.user, connection.netrcFile) = (nil, nil, nil, nil)
        (connection.cookie, connection.cookieJar, connection.caFile, connection.caDirectory) = (nil, nil, nil, nil)
        (connection.clientCertificate, connection.clientKey) = (nil, nil)
        (connection.netrc, connection.noCookies, connection.noMetered, connection.insecure) = (
            false, false, false, false
        )
        var downloads = DownloadOptions()
        (downloads.urls, downloads.headers, downloads.mirrors) = ([], [], [])
        (downloads.inputFile, downloads.metalink, downloads.output, downloads.directory) = (nil, nil, nil, nil)
        (downloads.checksum, downloads.onComplete, downloads.onError) = (nil, nil, nil)
        (downloads.connections, downloads.maxConnectionsPerServer) = (nil, nil)
        (downloads.minSplit, downloads.limitRate) = (nil, nil)
        (downloads.followMetalink, downloads.force, downloads.timestamping) = (true, false, false)
        downloads.continueExisting = false
        downloads.connection = connection
        var timing = TimingOptions()
        (timing.connectTimeout, timing.timeout, timing.retryMaxWait, timing.lowestSpeedTime) = (nil, nil, nil, nil)
        (timing.waitForNetwork, timing.lowestSpeedLimit) = (nil, nil)
        var get = Get()
        (get.downloads, get.timing) = (downloads, timing)
        (get.maxConcurrent, get.maxConnectionsPerHost, get.retries) = (3, nil, 5)
        (get.json, get.noRemoteTime, get.noXattr, get.quiet, get.verbose) = (false, false, false, false, false)
        (get.totalLimitRate, get.checkpointInterval) = (nil, nil)
        return get
    }

    /// Every name `get` takes, with what it does and its first name (one option's names share it).
    static func table() -> [String: (String, Action)] {
        let entries: [([String], Action)] = [
            (["-i", "--input-file"], value(\.downloads.inputFile)),
            (["-M", "--metalink"], value(\.downloads.metalink)),
            (["--follow-metalink"], .flag(\.downloads.followMetalink, true)),
            (["--no-follow-metalink"], .flag(\.downloads.followMetalink, false)),
            (["-o", "--output"], value(\.downloads.output)),
            (["-d", "--directory"], value(\.downloads.directory)),
            (["--checksum"], value(\.downloads.checksum)),
            (["-H", "--header"], .list(\.downloads.headers)),
            (["--force"], .flag(\.downloads.force, true)),
            (["-N", "--timestamping", "--check-newer"], .flag(\.downloads.timestamping, true)),
            (["--continue"], .flag(\.downloads.continueExisting, true)),
            (["--on-complete"], value(\.downloads.onComplete)),
            (["--on-error"], value(\.downloads.onError)),
            (["-x", "--connections"], value(\.downloads.connections)),
            (["--mirror"], .list(\.downloads.mirrors)),
            (["--max-connections-per-server"], value(\.downloads.maxConnectionsPerServer)),
            (["--min-split"], value(\.downloads.minSplit)),
            (["--limit-rate"], value(\.downloads.limitRate)),
            (["--proxy"], value(\.downloads.connection.proxy)),
            (["--noproxy"], value(\.downloads.connection.noProxy)),
            (["-u", "--user"], value(\.downloads.connection.user)),
            (["--netrc"], .flag(\.downloads.connection.netrc, true)),
            (["--netrc-file"], value(\.downloads.connection.netrcFile)),
            (["-b", "--cookie"], value(\.downloads.connection.cookie)),
            (["-c", "--cookie-jar"], value(\.downloads.connection.cookieJar)),
            (["--no-cookies"], .flag(\.downloads.connection.noCookies, true)),
            (["--no-metered"], .flag(\.downloads.connection.noMetered, true)),
            (["--cacert"], value(\.downloads.connection.caFile)),
            (["--capath"], value(\.downloads.connection.caDirectory)),
            (["-k", "--insecure"], .flag(\.downloads.connection.insecure, true)),
            (["--cert"], value(\.downloads.connection.clientCertificate)),
            (["--key"], value(\.downloads.connection.clientKey)),
            (["-j", "--max-concurrent"], value(\.maxConcurrent)),
            (["--max-connections-per-host"], value(\.maxConnectionsPerHost)),
            (["--json"], .flag(\.json, true)),
            (["--total-limit-rate"], value(\.totalLimitRate)),
            (["--retries"], value(\.retries)),
            (["--connect-timeout"], value(\.timing.connectTimeout)),
            (["--timeout"], value(\.timing.timeout)),
            (["--retry-max-wait"], value(\.timing.retryMaxWait)),
            (["--wait-for-network"], value(\.timing.waitForNetwork)),
            (["--lowest-speed-limit"], value(\.timing.lowestSpeedLimit)),
            (["--lowest-speed-time"], value(\.timing.lowestSpeedTime)),
            (["--no-remote-time"], .flag(\.noRemoteTime, true)),
            (["--no-xattr"], .flag(\.noXattr, true)),
            (["-q", "--quiet"], .flag(\.quiet, true)),
            (["-v", "--verbose"], .flag(\.verbose, true)),
            (["--checkpoint-interval"], value(\.checkpointInterval)),
        ]
        var table: [String: (String, Action)] = [:]
        for (names, action) in entries {
            // --follow-metalink and --no-follow-metalink are one option: given both, ArgumentParser decides.
            let first = names[0].hasPrefix("--no-follow") ? "--follow-metalink" : names[0]
            for name in names { table[name] = (first, action) }
        }
        return table
    }

    /// An option whose value is read as ArgumentParser reads it (`init?(argument:)`).
    private static func value<Value: ExpressibleByArgument>(_ path: WritableKeyPath<Get, Value>) -> Action {
        .value { get, text in
            guard let value = Value(argument: text) else { return false }
            get[keyPath: path] = value
            return true
        }
    }

    private static func value<Value: ExpressibleByArgument>(_ path: WritableKeyPath<Get, Value?>) -> Action {
        .value { get, text in
            guard let value = Value(argument: text) else { return false }
            get[keyPath: path] = value
            return true
        }
    }
}
