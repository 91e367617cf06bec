import Foundation

/// The one error type of the Haul library.
///
/// Every failure carries a ``Code`` and as much context as is known: the URL, the file
/// path, the HTTP status and the underlying cause. ``description`` is one readable line
/// saying what failed and, where there is something to do about it, what to do.
public struct HaulError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is. Compare with the static members, e.g. `error.code == .httpStatus`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Hashable, Sendable {
            case invalidURL
            case unsupportedScheme
            case unsupportedRedirect
            case tooManyRedirects
            case httpStatus
            case connection
            case hostNotFound
            case tls
            case proxy
            case invalidResponse
            case representationChanged
            case checksumMismatch
            case destinationExists
            case fileSystem
            case diskFull
            case corruptResumeData
            case unsupportedResumeDataVersion
            case invalidArgument
            case notFound
            case store
            case cancelled
            case paused
            case busy
            case revoked
        }

        fileprivate let base: Base
        fileprivate init(_ base: Base) { self.base = base }

        /// The URL could not be parsed or has no host.
        public static let invalidURL = Code(.invalidURL)
        /// The URL's scheme is not `http` or `https`.
        public static let unsupportedScheme = Code(.unsupportedScheme)
        /// A redirect pointed at a scheme other than `http` or `https`.
        public static let unsupportedRedirect = Code(.unsupportedRedirect)
        /// More redirects than the configured maximum.
        public static let tooManyRedirects = Code(.tooManyRedirects)
        /// The server answered with an HTTP status that means failure.
        public static let httpStatus = Code(.httpStatus)
        /// The connection failed, timed out, or closed before the body was complete.
        public static let connection = Code(.connection)
        /// The server's host name does not exist (the name server has no address for it).
        public static let hostNotFound = Code(.hostNotFound)
        /// The TLS handshake failed: the server's certificate is not trusted or not for its
        /// name, or the two sides share no protocol. ``HaulError/network`` says which.
        public static let tls = Code(.tls)
        /// The proxy refused or failed the request, or wants credentials.
        public static let proxy = Code(.proxy)
        /// The server's response broke the protocol (for example a body longer than promised).
        public static let invalidResponse = Code(.invalidResponse)
        /// The file on the server changed while the download was under way, more often than allowed.
        public static let representationChanged = Code(.representationChanged)
        /// The downloaded bytes do not match the expected checksum.
        public static let checksumMismatch = Code(.checksumMismatch)
        /// A finished file already exists at the destination.
        public static let destinationExists = Code(.destinationExists)
        /// A file-system operation failed (permissions, missing directory, I/O error).
        public static let fileSystem = Code(.fileSystem)
        /// The disk is full.
        public static let diskFull = Code(.diskFull)
        /// Resume data could not be decoded.
        public static let corruptResumeData = Code(.corruptResumeData)
        /// Resume data was written by a newer, unknown format version.
        public static let unsupportedResumeDataVersion = Code(.unsupportedResumeDataVersion)
        /// An argument given to the library is not valid (for example a malformed checksum).
        public static let invalidArgument = Code(.invalidArgument)
        /// No task has the id given.
        public static let notFound = Code(.notFound)
        /// The SQLite store failed.
        public static let store = Code(.store)
        /// The download was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The download was paused; ``HaulError/resumeData`` continues it.
        public static let paused = Code(.paused)
        /// Another process is running the same download.
        public static let busy = Code(.busy)
        /// The manager's claim on the task in a shared queue (daemons sharing one store) was revoked —
        /// it ran out, or the task was paused, cancelled or taken over elsewhere: its transfer
        /// stopped and wrote nothing more; whoever holds the task now, if anyone, continues it.
        public static let revoked = Code(.revoked)

        public var description: String { base.rawValue }

        /// The code whose ``description`` is `name`, e.g. as a daemon's error response says it.
        public init?(name: String) {
            guard let base = Base(rawValue: name) else { return nil }
            self.base = base
        }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence saying what failed. The secrets of URLs in it are hidden (``Redaction``).
    public var message: String {
        get { redactedMessage }
        set { redactedMessage = Redaction.text(newValue) }
    }
    private var redactedMessage: String
    /// The URL being downloaded, when known.
    public var url: URL?
    /// The file involved, when known.
    public var path: String?
    /// The HTTP status the server answered with, when the failure is about one.
    public var status: Int?
    /// What the user can do about it, when there is something; URL secrets hidden too.
    public var hint: String? {
        get { redactedHint }
        set { redactedHint = newValue.map(Redaction.text) }
    }
    private var redactedHint: String?
    /// The error that caused this one.
    public var underlying: (any Error)?
    /// For failures that leave a resumable download behind: the data to continue it.
    public var resumeData: ResumeData?
    /// How long the server asked us to wait before retrying (`Retry-After`), when it did.
    public var retryAfter: Duration?
    /// For failures below HTTP (the name, the connection, TLS, the proxy): what happened.
    public var network: NetworkFailure?
    /// Set when retrying was considered and given up on (a wait longer than allowed):
    /// the failure is then final whatever its kind.
    var isFinal = false

    /// Creates an error.
    public init(
        _ code: Code,
        _ message: String,
        url: URL? = nil,
        path: String? = nil,
        status: Int? = nil,
        hint: String? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.redactedMessage = Redaction.text(message)
        self.url = url
        self.path = path
        self.status = status
        self.redactedHint = hint.map(Redaction.text)
        self.underlying = underlying
    }

    /// Whether trying again from the last checkpoint has a chance of succeeding:
    /// connection failures, timeouts, 5xx, 408 and 429.
    public var isRetryable: Bool {
        if isFinal { return false }
        if let network { return network.isTransient }
        switch code.base {
        case .connection: return true
        case .httpStatus:
            guard let status else { return false }
            return RetryPolicy.isTransient(status: status)
        default: return false
        }
    }

    /// One line: the message, the URL and path when it does not name them, the cause, the
    /// hint; URL secrets hidden throughout.
    public var description: String {
        var line = message
        if let url, !message.contains(Redaction.url(url)) { line += " (\(Redaction.url(url)))" }
        if let path, !message.contains(path) { line += " [\(path)]" }
        if let underlying {
            let cause = HaulError.describe(underlying)
            if !cause.isEmpty, !line.contains(cause) { line += ": \(cause)" }
        }
        if let hint { line += ". \(hint)" }
        return Redaction.text(line)
    }

    /// A short readable description of any error, used for causes.
    static func describe(_ error: any Error) -> String {
        if let error = error as? HaulError { return error.description }
        if let error = error as? POSIXError { return String(cString: strerror(error.code.rawValue)) }
        let text = String(describing: error)
        return text
    }
}

extension HaulError {
    static func invalidURL(_ text: String, reason: String) -> HaulError {
        HaulError(.invalidURL, "Invalid URL '\(text)': \(reason)", hint: "Give a full http:// or https:// URL")
    }

    static func unsupportedScheme(_ url: URL) -> HaulError {
        HaulError(
            .unsupportedScheme,
            "Unsupported URL scheme '\(url.scheme ?? "")' in \(url.absoluteString)",
            url: url,
            hint: "Haul downloads http:// and https:// URLs only"
        )
    }

    /// A file is already where a download would place its own, and replacing it was not asked for.
    static func destinationExists(_ path: String, url: URL? = nil) -> HaulError {
        HaulError(
            .destinationExists,
            "\(path) already exists",
            url: url,
            path: path,
            hint: "Use --force to replace it, or -o to choose another name"
        )
    }

    static func httpStatus(_ status: Int, reason: String, url: URL, retryAfter: Duration? = nil) -> HaulError {
        var error = HaulError(
            .httpStatus,
            "HTTP \(status) \(reason) for \(url.absoluteString)",
            url: url,
            status: status
        )
        error.retryAfter = retryAfter
        switch status {
        case 401, 403: error.hint = "Check the URL and any credentials (-H 'Authorization: …')"
        case 404, 410: error.hint = "Check the URL"
        default: break
        }
        return error
    }

    /// How a download that stopped is continued, as hints say it to a foreground command's
    /// user; a daemon's manager says `haul resume ID` instead (``DownloadManager``).
    package static let rerunToResume = "run the same command again to resume"
    /// The same, for a download that kept nothing: there is nothing to resume, only to try again.
    package static let rerunToRetry = "run the same command again to try again"

    /// This error as a task that tries again by itself tells it: what went wrong and what to
    /// check, without the "Gave up after N retries" and the way to resume (a command to run
    /// again, `haul resume ID`) that a failure for good ends with.
    package var triesAgain: HaulError {
        guard let hint else { return self }
        let done = [HaulError.rerunToResume, HaulError.rerunToRetry]
        var parts = hint.components(separatedBy: "; ").filter { part in
            !part.hasPrefix("Gave up after") && !done.contains(part) && !part.hasPrefix("resume it with 'haul resume")
        }
        for phrase in done {
            parts = parts.map { $0.replacingOccurrences(of: " and \(phrase)", with: "") }
        }
        var error = self
        error.hint = parts.first.map { first in
            ([first.prefix(1).uppercased() + first.dropFirst()] + parts.dropFirst()).joined(separator: "; ")
        }
        return error
    }

    package static func fileSystem(_ operation: String, path: String, errno code: Int32) -> HaulError {
        if code == ENOSPC || code == EDQUOT {
            return HaulError(
                .diskFull,
                "No space left on device while trying to \(operation) \(path)",
                path: path,
                hint: "Free some space and \(HaulError.rerunToResume)"
            )
        }
        var hint: String?
        if code == EACCES || code == EPERM || code == EROFS {
            hint = "Choose a destination you can write to (-o or -d)"
        } else if code == ENOENT {
            hint = "Check that the directory exists"
        }
        return HaulError(
            .fileSystem,
            "Cannot \(operation) \(path): \(String(cString: strerror(code)))",
            path: path,
            hint: hint
        )
    }
}

extension String {
    /// This sentence continuing another (after a colon or a semicolon): its first letter in
    /// lower case when it starts an ordinary word ("Connection refused …" → "connection
    /// refused …"); "HTTP 503" and other acronyms stay as they are.
    package var continuingSentence: String {
        guard let first, first.isUppercase else { return self }
        let second = dropFirst().first
        guard second == nil || second?.isLowercase == true else { return self }
        return first.lowercased() + dropFirst()
    }
}

extension UUID {
    /// A task's id as Haul shows it to people, in messages, hooks and `haul add`: lower case,
    /// as `haul list` shows its first eight characters (commands take ids in any case).
    package var shown: String { uuidString.lowercased() }
}
