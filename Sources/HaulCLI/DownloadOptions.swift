import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping

/// What to download and where: the arguments `haul get` and `haul add` share.
struct DownloadOptions: ParsableArguments {
    @Argument(help: "The http:// or https:// URLs to download.")
    var urls: [String] = []

    @Option(
        name: [.customShort("i"), .long],
        help:
            "Read URLs from this file ('-' for stdin): one per line, mirrors after tabs, indented out= and checksum= lines (docs/cli.md)."
    )
    var inputFile: String?

    @Option(
        name: [.customShort("M"), .customLong("metalink")],
        help: ArgumentHelp(
            "Download the files a Metalink 4 or 3 file describes: each from its URLs at once, named as it says inside -d, checked against its hash.",
            valueName: "file"
        )
    )
    var metalink: String?

    @Flag(
        inversion: .prefixedNo,
        help: ArgumentHelp(
            "A file that turns out to be a Metalink (by its type, or a .meta4/.metalink name) brings the files it describes too (the default); --no-follow-metalink keeps it as a file."
        )
    )
    var followMetalink = true

    @Option(
        name: .shortAndLong,
        help: """
            Write the file to this path (relative to --directory if given). '-' streams it to \
            stdout: one connection, no part file, no resume, progress on stderr.
            """
    )
    var output: String?

    @Option(name: [.customShort("d"), .long], help: "Save into this directory (default: the current one).")
    var directory: String?

    @Option(help: "Verify the file before placing it: sha256=HEX (also sha512, sha1, md5).")
    var checksum: String?

    @Option(
        name: [.customShort("H"), .customLong("header")],
        help: "Send an extra header, 'Name: value'. Repeatable."
    )
    var headers: [String] = []

    @Flag(help: "Replace a file already at the destination.")
    var force = false

    @Flag(
        name: [.customShort("N"), .customLong("timestamping"), .customLong("check-newer")],
        help: """
            Check a file already at the destination against the server (If-None-Match with \
            its ETag, else If-Modified-Since): kept when the server has nothing newer, else \
            replaced by the new version once it is complete.
            """
    )
    var timestamping = false

    @Flag(
        name: .customLong("continue"),
        help: """
            Continue a file already at the destination (or a NAME.part left by another tool) \
            when its last 64 KiB and length match the server's: only the rest is fetched.
            """
    )
    var continueExisting = false

    @Option(
        name: .customLong("on-complete"),
        help: ArgumentHelp(
            "Run this program when a file is complete: without a shell, with the task id, the path and the URL as arguments, and HAUL_* variables.",
            valueName: "program"
        )
    )
    var onComplete: String?

    @Option(
        name: .customLong("on-error"),
        help: ArgumentHelp(
            "Run this program when a download fails for good, as --on-complete (HAUL_ERROR says why).",
            valueName: "program"
        )
    )
    var onError: String?

    @Option(
        name: [.customShort("x"), .customLong("connections")],
        help: "Connections per file: a large file whose server allows ranges is split over them (default 4)."
    )
    var connections: Int?

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp(
            "Another URL of the same file: its pieces come from every source at once, each mirror checked against the others' bytes (repeat for more).",
            valueName: "url"
        )
    )
    var mirrors: [String] = []

    @Option(
        name: .customLong("max-connections-per-server"),
        help: ArgumentHelp("Connections to any one source of a file with mirrors (default 4).", valueName: "n")
    )
    var maxConnectionsPerServer: Int?

    @Option(name: .customLong("min-split"), help: "Never split a file into pieces smaller than this (default 4M).")
    var minSplit: ByteCount?

    @Option(
        name: .customLong("limit-rate"),
        help: "Limit each file's speed, e.g. 500K or 10M (bytes per second); 0 for none."
    )
    var limitRate: ByteCount?

    @OptionGroup(title: "Connections") var connection: ConnectionOptions

    func validate() throws {
        if let connections, !(1...DownloadRequest.maxConnections).contains(connections) {
            throw ValidationError("-x/--connections must be 1 to \(DownloadRequest.maxConnections)")
        }
        if let maxConnectionsPerServer, !(1...DownloadRequest.maxConnections).contains(maxConnectionsPerServer) {
            throw ValidationError("--max-connections-per-server must be 1 to \(DownloadRequest.maxConnections)")
        }
        if let minSplit, minSplit.bytes < DownloadRequest.smallestSplit {
            throw ValidationError("--min-split must be at least 64K")
        }
        guard !urls.isEmpty || inputFile != nil || metalink != nil else {
            throw ValidationError("Give a URL, -i FILE or -M FILE")
        }
        // Checked while parsing, not when downloading starts: a bad value from the
        // configuration file is then said with the file's name.
        do {
            _ = try headers.map(HTTPHeaderField.init(parsing:))
            try connection.proxies(environment: [:]).validate()
        } catch let error as HaulError {
            throw ValidationError(error.description)
        }
        // '-o with several URLs' is checked by requests(): checked here, it would be said
        // before an unknown option that made a URL of the option's value (`--bogus X -o f URL`).
    }

    /// `-o -`: the body goes to stdout as it arrives.
    var streamsToStandardOutput: Bool { output == "-" }

    /// Creates `-d`'s directory and its missing parents, as wget and aria2 do (mode 0777
    /// less the umask); one that exists is left as it is, and anything else at the path is
    /// left for the request's own check to name.
    static func createDirectory(_ path: String) throws {
        guard !path.isEmpty, !path.utf8.contains(0), path.utf8.count < PATH_MAX else { return }
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + component
            guard mkdir(prefix, 0o777) == 0 || errno == EEXIST else {
                throw HaulError.fileSystem("create the directory", path: prefix, errno: errno)
            }
        }
    }

    /// The requests the URLs and the input file describe.
    func requests(session: String = DownloadRequest.defaultSession) throws -> [DownloadRequest] {
        try checkCombinations()
        try DownloadRequest.validateSession(session)
        let base = directory ?? "."
        let headerFields = try headers.map(HTTPHeaderField.init(parsing:))
        let defaultChecksum = try checksum.map(Checksum.init(parsing:))
        let tls = connection.tls()
        let proxy = connection.proxies()
        let credentials = connection.credentials()
        let cookies = connection.cookies()
        // -d made absolute once, not once a URL (symbolic links resolved: a million lines, a million looks).
        let intoBase = Destination.directory(base)
        func request(
            _ text: String,
            out: String?,
            checksum: Checksum?,
            confined: Bool = false
        ) throws
            -> DownloadRequest
        {
            let url = try DownloadRequest.parseURL(text)
            let destination = try out.map { try Self.destination($0, confined: confined, in: base) } ?? intoBase
            return DownloadRequest(
                url: url,
                destination: destination,
                headers: headerFields,
                checksum: checksum,
                overwrite: force,
                session: session,
                connections: connections,
                minSplitSize: minSplit?.bytes,
                rateLimit: limitRate.flatMap { $0.bytes > 0 ? $0.bytes : nil },
                tls: tls,
                proxy: proxy,
                credentials: credentials,
                cookies: cookies
            )
        }
        var requests = try urls.map { try request($0, out: output, checksum: defaultChecksum) }
        if !mirrors.isEmpty { requests[0].mirrors = try mirrors.map(DownloadRequest.parseURL) }
        if let inputFile {
            for entry in try InputFile.read(inputFile).entries {
                var entryRequest = try request(
                    entry.url,
                    out: entry.out,
                    checksum: try entry.checksum.map(Checksum.init(parsing:)),
                    confined: true
                )
                entryRequest.mirrors = try entry.mirrors.map(DownloadRequest.parseURL)
                requests.append(entryRequest)
            }
        }
        var metalinkDirectories: Set<String> = []
        if let metalink {
            for file in try Metalink(contentsOf: metalink).files {
                var fileRequest = try request(
                    file.urls[0].absoluteString,
                    out: file.name,
                    checksum: file.hashes.first ?? defaultChecksum,
                    confined: true
                )
                fileRequest.mirrors = Array(file.urls.dropFirst())
                fileRequest.pieceHashes = file.pieces
                fileRequest.followsMetalink = false  // A Metalink's files are not followed in turn.
                metalinkDirectories.insert(fileRequest.destination.directory)
                requests.append(fileRequest)
            }
        }
        try finish(&requests, metalinkDirectories: metalinkDirectories)
        return requests
    }

    /// Refuses options that cannot go together.
    private func checkCombinations() throws {
        if output != nil, inputFile != nil {
            throw HaulError(
                .invalidArgument,
                "-o names one file and cannot go with -i",
                hint: "Use out= in the input file"
            )
        }
        if output != nil, urls.count > 1 {
            throw HaulError(
                .invalidArgument,
                "-o names one file, and \(urls.count) URLs were given",
                hint: "With several URLs use -d (and out= in an input file)"
            )
        }
        if output != nil, metalink != nil {
            throw HaulError(
                .invalidArgument,
                "-o names one file and cannot go with -M",
                hint: "The Metalink names its files; use -d for where they go"
            )
        }
        if !mirrors.isEmpty, urls.count != 1 || inputFile != nil || metalink != nil {
            throw HaulError(
                .invalidArgument,
                "--mirror names other URLs of one file, and \(inputFile != nil ? "-i gives several" : "\(urls.count) URLs were given")",
                hint: "Give one URL with its mirrors"
            )
        }
    }

    /// Where a download named `out` goes, under `base` (-d). A name
    /// from an input file or a Metalink (`confined`) stays inside `base`, whoever wrote it.
    private static func destination(_ out: String, confined: Bool, in base: String) throws -> Destination {
        if confined {
            // A name from an input file stays inside -d, whoever wrote the file.
            return try Destination.file(out, confinedTo: base)
        } else {
            guard !out.hasSuffix("/") else {
                throw HaulError(
                    .invalidArgument,
                    "-o needs a file path, not a directory: \(out)",
                    hint: "Use -d for a directory"
                )
            }
            return .file(out.hasPrefix("/") ? out : (base as NSString).appendingPathComponent(out))
        }
    }

    /// What every request of the command shares, set last, and the directories created: a
    /// command line or input file that is wrong creates nothing.
    private func finish(_ requests: inout [DownloadRequest], metalinkDirectories: Set<String>) throws {
        guard !requests.isEmpty else { throw HaulError(.invalidArgument, "No URLs to download") }
        // Last: a command line or input file that is wrong creates nothing. A stream to
        // stdout writes no file.
        if let directory, !streamsToStandardOutput { try DownloadOptions.createDirectory(directory) }
        // A Metalink's names may have directories (inside -d, checked above).
        for path in metalinkDirectories.sorted() { try DownloadOptions.createDirectory(path) }
        // Resolved here, in this PATH: a daemon runs the same program.
        let hooks = try Hooks(onComplete: onComplete, onError: onError).resolved()
        for index in requests.indices {
            requests[index].hooks = hooks
            if connection.noMetered { requests[index].allowsMeteredNetwork = false }
            requests[index].checkNewer = timestamping
            requests[index].continuesExistingFile = continueExisting
            requests[index].maxConnectionsPerServer = maxConnectionsPerServer
            // The files of a Metalink given with -M are followed as they are; a URL may be one.
            if requests[index].followsMetalink { requests[index].followsMetalink = followMetalink }
        }
    }
}
