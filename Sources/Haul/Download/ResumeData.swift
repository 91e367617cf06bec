import Foundation

/// Everything needed to continue a paused or interrupted download, in this process or another.
///
/// A versioned, Codable value, serialised as JSON by ``encoded()``. Decoding rejects
/// unknown future versions with ``HaulError/Code/unsupportedResumeDataVersion`` rather than
/// guessing, and anything malformed with ``HaulError/Code/corruptResumeData``.
public struct ResumeData: Codable, Sendable, Equatable {
    /// The format version this library writes and reads.
    public static let currentVersion = 1

    /// One byte range of the part file and how much of it is safely on disk.
    public struct Segment: Codable, Sendable, Equatable {
        /// First byte of the range.
        public var start: Int64
        /// One past the last byte, or nil while the total length is unknown.
        public var end: Int64?
        /// Bytes in `start..<committed` are on disk.
        public var committed: Int64

        public init(start: Int64, end: Int64?, committed: Int64) {
            self.start = start
            self.end = end
            self.committed = committed
        }
    }

    /// The format version.
    public var version: Int
    /// The task this continues.
    public var taskID: UUID
    /// The URL the download was asked for.
    public var url: URL
    /// The URL the last response came from, after redirects.
    public var finalURL: URL?
    /// Extra request headers.
    public var headers: [HTTPHeaderField]
    /// The server's validators from the first response.
    public var validators: Validators
    /// Where the file goes.
    public var destination: Destination
    /// The expected digest, if one was given.
    public var checksum: Checksum?
    /// Whether an existing file at the destination may be replaced.
    public var overwrite: Bool
    /// The part file holding the bytes so far, when the destination is known.
    public var partPath: String?
    /// The committed byte ranges.
    public var segments: [Segment]
    /// The session the task belonged to (absent in resume data of older versions).
    public var session: String?
    /// The download's TLS options, when they are not the defaults.
    public var tls: TLSOptions?
    /// For a download with mirrors: the URL and each mirror, with the bytes each delivered
    /// and why any was dropped (absent without mirrors, and in resume data of older
    /// versions). A download resumed from it checks each mirror again before giving it work.
    public var sources: [DownloadSource]?
    /// The most connections to any one source, when the request said.
    public var maxConnectionsPerServer: Int?
    /// The hash of every piece, when the download has them (absent otherwise, and in resume
    /// data of older versions). Which pieces were verified is not carried: a download resumed
    /// from it in another store checks every piece it has not verified itself before the file
    /// is placed.
    public var pieces: PieceHashes?

    /// Bytes safely on disk.
    public var bytesCommitted: Int64 { segments.reduce(0) { $0 + ($1.committed - $1.start) } }

    /// The JSON form, to store or hand to another process.
    public func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Encoding plain values cannot fail.
        return (try? encoder.encode(self)) ?? Data()
    }

    /// Decodes resume data produced by ``encoded()``.
    public init(decoding data: Data) throws {
        struct VersionProbe: Decodable { var version: Int }
        let decoder = JSONDecoder()
        let probe: VersionProbe
        do {
            probe = try decoder.decode(VersionProbe.self, from: data)
        } catch {
            throw HaulError(
                .corruptResumeData,
                "Resume data is corrupt (not a Haul resume-data document)",
                underlying: error
            )
        }
        guard probe.version <= ResumeData.currentVersion, probe.version >= 1 else {
            throw HaulError(
                .unsupportedResumeDataVersion,
                "Resume data has format version \(probe.version); this Haul reads version \(ResumeData.currentVersion)",
                hint: "Use the Haul version that produced it"
            )
        }
        do {
            self = try decoder.decode(ResumeData.self, from: data)
        } catch {
            throw HaulError(.corruptResumeData, "Resume data is corrupt", underlying: error)
        }
        try validate()
    }

    init(
        taskID: UUID,
        url: URL,
        finalURL: URL?,
        headers: [HTTPHeaderField],
        validators: Validators,
        destination: Destination,
        checksum: Checksum?,
        overwrite: Bool,
        partPath: String?,
        segments: [Segment]
    ) {
        self.version = ResumeData.currentVersion
        self.taskID = taskID
        self.url = url
        self.finalURL = finalURL
        self.headers = headers
        self.validators = validators
        self.destination = destination
        self.checksum = checksum
        self.overwrite = overwrite
        self.partPath = partPath
        self.segments = segments
    }

    /// The resume data of a task as the store records it.
    init(record: TaskRecord, segments: [SegmentRecord]) {
        self.init(
            taskID: record.id,
            url: record.url,
            finalURL: record.finalURL,
            headers: record.requestHeaders,
            validators: record.validators,
            destination: Destination(directory: record.directory, fileName: record.fileName),
            checksum: record.checksum,
            overwrite: record.overwrite,
            partPath: record.partPath,
            segments: segments.map { .init(start: $0.start, end: $0.end, committed: $0.committed) }
        )
        self.session = record.session
        self.tls = record.tls.isDefault ? nil : record.tls
        self.sources = record.sources.isEmpty ? nil : record.sources
        self.maxConnectionsPerServer = record.maxConnectionsPerServer
        // The store's piece hashes when they were read with the task, else the request's.
        self.pieces = record.storedPieces.flatMap { $0?.hashes } ?? record.pieces
    }

    /// Rejects values that cannot describe a real download, whoever produced them.
    private func validate() throws {
        func corrupt(_ why: String) -> HaulError { HaulError(.corruptResumeData, "Resume data is corrupt: \(why)") }
        try DownloadRequest.validate(url)
        let layout = segments.map { (start: $0.start, end: $0.end, committed: $0.committed) }
        if let problem = SegmentRecord.layoutProblem(layout, totalLength: validators.totalLength) {
            throw corrupt(problem)
        }
        if let name = destination.fileName, !FileNaming.isPlainName(name) {
            throw corrupt("the file name '\(name)' is not a safe name")
        }
        do {
            try tls?.validate()
        } catch {
            throw corrupt("its TLS options name a file by a path that is not absolute")
        }
        if let sources {
            guard sources.count >= 2, sources.first?.url == url else {
                throw corrupt("its sources do not begin with its URL, or name no mirror")
            }
            do {
                try DownloadSource.validate(sources)
            } catch let error as HaulError {
                throw corrupt(error.message)
            }
        }
        if let cap = maxConnectionsPerServer, !(1...DownloadRequest.maxConnections).contains(cap) {
            throw corrupt("its connections per server are not 1 to \(DownloadRequest.maxConnections)")
        }
    }
}
