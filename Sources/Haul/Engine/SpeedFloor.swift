import Foundation

/// The lowest speed a connection may keep (`--lowest-speed-limit` and
/// `--lowest-speed-time`, as curl's `-Y`/`-y` and aria2's `--lowest-speed-limit`): a
/// connection whose bytes over the last ``LowestSpeed/time`` stay under
/// ``LowestSpeed/bytesPerSecond`` is broken, and tried again from its checkpoint like a
/// timeout, so a server that trickles a byte every few seconds (never silent long enough
/// for `--timeout`) is given up instead of waited on for ever.
public struct LowestSpeed: Sendable, Equatable {
    /// The speed, in bytes per second, a connection must keep.
    public var bytesPerSecond: Int64
    /// How long it may stay under it.
    public var time: Duration

    /// Creates a floor.
    /// - Throws: ``HaulError/Code/invalidArgument`` unless the speed is 1 byte per second or
    ///   more and the time is from 1 second to a day.
    public init(bytesPerSecond: Int64, time: Duration = .seconds(30)) throws {
        guard bytesPerSecond >= 1 else {
            throw HaulError(.invalidArgument, "--lowest-speed-limit must be at least 1 byte per second (0 for none)")
        }
        guard time >= .seconds(1), time <= .seconds(86400) else {
            throw HaulError(.invalidArgument, "--lowest-speed-time must be from 1 to 86400 seconds")
        }
        self.bytesPerSecond = bytesPerSecond
        self.time = time
    }
}

/// One connection's watch over its speed: fed the bytes as they arrive, with their time.
struct SpeedFloor {
    let floor: LowestSpeed
    /// When the current window began, and the bytes since.
    private var windowStart: Duration
    private var bytes: Int64 = 0

    /// - Parameter start: when the connection's response began, on the transfer's timeline.
    init(_ floor: LowestSpeed, start: Duration) {
        self.floor = floor
        self.windowStart = start
    }

    /// Counts `count` bytes arrived at `now`; true when a whole window has passed with fewer
    /// bytes than the floor asks for (the connection is too slow), else false (a window that
    /// has passed fast enough starts the next).
    mutating func record(_ count: Int, at now: Duration) -> Bool {
        bytes += Int64(count)
        let elapsed = now - windowStart
        guard elapsed >= floor.time else { return false }
        if Double(bytes) < Double(floor.bytesPerSecond) * elapsed.seconds { return true }
        windowStart = now
        bytes = 0
        return false
    }

    static let messagePrefix = "Too slow: "

    /// Whether `error` is a connection broken for being too slow.
    static func isTooSlow(_ error: HaulError) -> Bool {
        error.code == .connection && error.message.hasPrefix(messagePrefix)
    }

    /// The failure that breaks a connection found too slow.
    func failure(url: URL) -> HaulError {
        let seconds = floor.time.components.seconds
        return HaulError(
            .connection,
            "\(Self.messagePrefix)\(url.host ?? "the server") sent less than \(floor.bytesPerSecond) bytes per second for \(seconds) s (--lowest-speed-limit)",
            url: url,
            hint:
                "It is tried again from its checkpoint; lower --lowest-speed-limit or raise --lowest-speed-time to wait longer"
        )
    }
}
