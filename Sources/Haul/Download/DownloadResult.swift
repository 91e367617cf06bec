import Foundation

/// What a finished download produced.
public struct DownloadResult: Sendable, Equatable {
    /// The task that ran.
    public var taskID: UUID
    /// The path of the finished, verified file.
    public var path: String
    /// The file's size.
    public var bytes: Int64
    /// Bytes fetched over the network by this run.
    public var bytesFetched: Int64
    /// The offset this run continued from, when it resumed earlier work.
    public var resumedFrom: Int64?
    /// True when the file was already complete and nothing was fetched: no request was made,
    /// or (with ``notModified``) the server was asked and had nothing newer.
    public var alreadyComplete: Bool
    /// True when ``DownloadRequest/checkNewer`` asked the server, and it had no newer version
    /// than the file in place.
    public var notModified = false
    /// Wall time of this run.
    public var elapsed: Duration
    /// False when the server never said how long the file is and, asked for what follows
    /// the last byte received, could not confirm that nothing does: the file may be
    /// truncated. True for every file whose length was known or confirmed.
    public var lengthConfirmed: Bool
    /// The URL and its mirrors, with the bytes each delivered and why any was dropped;
    /// empty for a download without mirrors.
    public var sources: [DownloadSource] = []
    /// With piece hashes: the pieces hashed in this run (a resumed download does not count
    /// those verified before), and those fetched again because they did not match.
    public var piecesChecked = 0
    public var piecesRefetched = 0
    /// What the file's bytes were checked against, beyond the length and validators every
    /// download is held to: `checksum` (the one given), `pieceHashes`, the header a server
    /// sent a digest of the whole file in (`Repr-Digest`, `Digest`, `Content-Digest`,
    /// `Content-MD5`), or, for a file from several sources with none of these, `sampled`:
    /// each stretch a mirror wrote was compared with the URL's bytes in one 64 KiB window,
    /// which cannot prove the rest. Nil when the file came from one source and nothing was
    /// checked.
    public var verifiedAgainst: String?
    /// Whether the file is a Metalink: served as `application/metalink4+xml` or
    /// `application/metalink+xml`, or named `.meta4` or `.metalink`.
    public var isMetalink = false
    /// For a Metalink a ``DownloadManager`` followed: the tasks it added for the files the
    /// Metalink describes, in its order.
    public var followed: [UUID] = []
    /// For a Metalink that could not be followed: why, in one sentence (the Metalink itself
    /// is in place).
    public var followFailure: String?

    public init(
        taskID: UUID,
        path: String,
        bytes: Int64,
        bytesFetched: Int64,
        resumedFrom: Int64?,
        alreadyComplete: Bool,
        elapsed: Duration = .zero,
        lengthConfirmed: Bool = true
    ) {
        self.taskID = taskID
        self.path = path
        self.bytes = bytes
        self.bytesFetched = bytesFetched
        self.resumedFrom = resumedFrom
        self.alreadyComplete = alreadyComplete
        self.elapsed = elapsed
        self.lengthConfirmed = lengthConfirmed
    }
}
