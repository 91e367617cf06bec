import ArgumentParser
import Haul

/// What every `haul` command's exit status says, by the class of what went wrong, so a
/// script can tell a 404 from a refused connection or a full disk (`man haul`, `haul --help`).
enum ExitStatus: Int32, CaseIterable {
    /// Everything asked for was done.
    case ok = 0
    /// Anything else: a task that failed in the daemon (`haul wait`), a download the daemon
    /// already has (`haul get`), resume data that cannot be read.
    case failure = 1
    /// The request: an unknown or malformed option or value (a URL that is not http(s), a CA
    /// file that is not PEM, a task id not known), or an operation the task's state does not
    /// allow (resuming a finished task).
    case usage = 2
    /// The local files: the destination exists, cannot be written, the disk is full, the store.
    case fileSystem = 3
    /// The network and the protocol: no such host, refused, unreachable, timed out, reset,
    /// a proxy, a malformed or changed response, too many redirects.
    case network = 4
    /// TLS: an untrusted certificate, one for another name, a failed handshake.
    case tls = 5
    /// The server answered with an HTTP error status (404, 403, 500 after its retries…).
    case httpStatus = 6
    /// The file did not match `--checksum`.
    case checksum = 7
    /// The daemon could not be reached or started.
    case daemon = 8

    /// The status for a failure with `error`.
    init(_ error: HaulError) {
        self.init(error.code)
    }

    /// The status for a failure of class `code`.
    init(_ code: HaulError.Code) {
        switch code {
        case .invalidURL, .unsupportedScheme, .invalidArgument: self = .usage
        case .destinationExists, .fileSystem, .diskFull, .store: self = .fileSystem
        case .connection, .hostNotFound, .proxy, .invalidResponse, .representationChanged, .unsupportedRedirect,
            .tooManyRedirects:
            self = .network
        case .tls: self = .tls
        case .httpStatus: self = .httpStatus
        case .checksumMismatch: self = .checksum
        default: self = .failure
        }
    }

    /// The status for several failures: their class when they share one, else 1.
    init(_ errors: [HaulError]) {
        let classes = Set(errors.map(ExitStatus.init))
        self = classes.count == 1 ? classes.first ?? .failure : .failure
    }

    /// The exit that ends the command with this status.
    var exit: ExitCode { ExitCode(rawValue) }

    /// What the status says, as the manual's EXIT STATUS section lists it (`scripts/man`
    /// writes that section; CommandDocsTests checks it says this).
    var meaning: String {
        switch self {
        case .ok: "Everything asked for was done."
        case .failure:
            "Any other failure: a task that failed in the daemon (haul wait), a download the daemon already has (haul get), resume data that cannot be read."
        case .usage:
            "The request: an unknown or malformed option or value (a URL that is not http or https, a CA file that is not PEM), an unknown task, an operation its state does not allow (resuming a finished task)."
        case .fileSystem:
            "Local files: the destination exists or cannot be written, the disk is full, the store cannot be used."
        case .network:
            "The network or the protocol: no such host; refused, unreachable, timed out or reset; a proxy; a malformed or changed response; too many redirects."
        case .tls: "TLS: an untrusted certificate, one for another name, a failed handshake."
        case .httpStatus: "The server answered with an HTTP error status (404, 403, or 500 after the retries)."
        case .checksum: "The file did not match --checksum."
        case .daemon: "The daemon could not be reached or started."
        }
    }

    /// The statuses a signal ends `haul` with, and what they say, after ``meaning``'s in the manual.
    static let signalMeanings: [(status: Int32, meaning: String)] = [
        (130, "Interrupted by Ctrl-C (SIGINT): the downloads are paused; the same command continues them."),
        (141, "The reader of the output went away (SIGPIPE)."),
        (143, "Stopped by SIGTERM: the downloads are paused; the same command continues them."),
    ]

    /// The table `--help` shows.
    static let summary = """
        Exit status: 0 done; 1 other failures; 2 the request (an unknown or malformed option or value, a bad \
        URL, an unknown task, an operation its state does not allow); \
        3 local files (the destination exists, cannot be written, the disk is full); 4 network \
        (no such host, refused, timed out, reset, a proxy, a malformed response); 5 TLS; 6 an HTTP \
        error status; 7 a checksum mismatch; 8 the daemon could not be reached; 130 and 143 after \
        Ctrl-C and SIGTERM (the downloads are paused, resumable); 141 when the reader of the output went away.
        """
}
