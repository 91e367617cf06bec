import Foundation
import Haul
import HaulWire
import HaulWireMapping
import NIOPosix

// MARK: - aria2's methods over the download manager

extension Aria2RPC {
    /// The methods Haul answers (`system.listMethods`); any other is "No such method".
    static let methods = [
        "aria2.addUri", "aria2.addTorrent", "aria2.addMetalink", "aria2.getPeers", "aria2.remove", "aria2.forceRemove",
        "aria2.pause", "aria2.pauseAll",
        "aria2.forcePause", "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll", "aria2.tellStatus",
        "aria2.getUris", "aria2.getFiles", "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting",
        "aria2.tellStopped", "aria2.changePosition", "aria2.changeUri", "aria2.changeOption", "aria2.getOption",
        "aria2.getGlobalOption",
        "aria2.changeGlobalOption", "aria2.getGlobalStat", "aria2.purgeDownloadResult", "aria2.removeDownloadResult",
        "aria2.getVersion", "aria2.getSessionInfo", "aria2.shutdown", "aria2.forceShutdown", "aria2.saveSession",
        "system.multicall", "system.listMethods", "system.listNotifications",
    ]

    /// The session aria2's downloads go to, apart from `haul add`'s.
    static let session = "aria2"

    func callMethod(_ method: String, _ params: Parameters) async throws -> JSONValue {
        if let answer = try await sessionMethod(method, params) { return answer }
        if let answer = try await statusMethod(method, params) { return answer }
        if let answer = try await controlMethod(method, params) { return answer }
        if let answer = try await optionMethod(method, params) { return answer }
        throw Failure.failed("No such method: \(method)")
    }

    /// The daemon and adding downloads: version, session, shutdown, addUri, addMetalink;
    /// nil for another method.
    private func sessionMethod(_ method: String, _ params: Parameters) async throws -> JSONValue? {
        switch method {
        case "aria2.getVersion":
            return [
                "version": .string(HaulVersion.current), "enabledFeatures": ["HTTPS", "Message Digest", "Metalink"],
            ]
        case "aria2.getSessionInfo":
            // One per run of the daemon, as aria2's is per run.
            return ["sessionId": .string(core.runID.uuidString.lowercased().replacingOccurrences(of: "-", with: ""))]
        case "aria2.saveSession":
            return "OK"  // Every change is in the store as it happens.
        case "aria2.shutdown", "aria2.forceShutdown":
            Task { await core.requestShutdown() }
            return "OK"
        case "aria2.addUri":
            return try await addURI(params)
        case "aria2.addMetalink":
            return try await addMetalink(params)
        case "aria2.addTorrent":
            throw Failure.failed("Haul does not download BitTorrent: add the files' HTTP(S) URLs with aria2.addUri")
        default:
            return nil
        }
    }

    /// What downloads are: tellStatus, the tell* lists, their URIs, files, servers and
    /// peers; nil for another method.
    private func statusMethod(_ method: String, _ params: Parameters) async throws -> JSONValue? {
        let manager = core.manager
        switch method {
        case "aria2.getPeers":
            // Peers are BitTorrent's; an HTTP download has none.
            _ = try await task(try params.string(0))
            return []
        case "aria2.tellStatus":
            let info = try await task(try params.string(0))
            return Aria2Status.json(info, progress: await manager.progress(of: info.id), keys: try params.keys(1))
        case "aria2.getUris":
            return .array(Aria2Status.uris(try await task(try params.string(0))))
        case "aria2.getFiles":
            let info = try await task(try params.string(0))
            let progress = await manager.progress(of: info.id)
            guard case .object(let status) = Aria2Status.json(info, progress: progress),
                let files = status["files"]
            else { return [] }
            return files
        case "aria2.getServers":
            let info = try await task(try params.string(0))
            guard info.state == .running else { throw Failure.failed("No active download for GID#\(GID.of(info.id))") }
            let speed = Int64(await manager.progress(of: info.id)?.bytesPerSecond ?? 0)
            let servers: [JSONValue] = Aria2Status.uris(info).compactMap { $0.object?["uri"] }.map {
                ["uri": $0, "currentUri": $0, "downloadSpeed": .number(speed)]
            }
            return [["index": "1", "servers": .array(servers)]]
        case "aria2.tellActive":
            return try await active(keys: try params.keys(0))
        case "aria2.tellWaiting":
            return try await window(params, states: Self.waitingStates)
        case "aria2.tellStopped":
            return try await window(params, states: [.completed, .failed, .cancelled])
        default:
            return nil
        }
    }

    /// Moving downloads: pause, unpause, remove (one or all), their place, their results;
    /// nil for another method.
    private func controlMethod(_ method: String, _ params: Parameters) async throws -> JSONValue? {
        let manager = core.manager
        switch method {
        case "aria2.changePosition":
            return try await changePosition(params)
        case "aria2.changeUri":
            let change = try Aria2URIChange(params)
            return try await change.apply(to: try await task(try params.string(0)), manager)
        case "aria2.pause", "aria2.forcePause":
            return try await apply(.pause, to: try params.string(0))
        case "aria2.unpause":
            return try await apply(.resume, to: try params.string(0))
        case "aria2.remove", "aria2.forceRemove":
            return try await apply(.cancel, to: try params.string(0))
        case "aria2.pauseAll", "aria2.forcePauseAll":
            _ = try await core.apply(.pause, to: API.Selector(all: true))
            return "OK"
        case "aria2.unpauseAll":
            _ = try await core.apply(.resume, to: API.Selector(all: true))
            return "OK"
        case "aria2.removeDownloadResult":
            let info = try await task(try params.string(0))
            guard [.completed, .failed, .cancelled].contains(info.state) else {
                throw Failure.failed("Could not remove download result of GID#\(GID.of(info.id))")
            }
            try await manager.remove(info.id)
            return "OK"
        case "aria2.purgeDownloadResult":
            for info in try await manager.tasks() where [.completed, .failed, .cancelled].contains(info.state) {
                try await manager.remove(info.id)
            }
            return "OK"
        default:
            return nil
        }
    }

    /// The global statistics and options, and a download's options; nil for another method.
    private func optionMethod(_ method: String, _ params: Parameters) async throws -> JSONValue? {
        let manager = core.manager
        switch method {
        case "aria2.getGlobalStat":
            // The counts every other view shows (`haul status`, /metrics), counted by the
            // store: clients ask each second, and a queue of a million is not read for it.
            let counts = try await core.stateCounts()
            let overall = await manager.overallProgress()
            func count(_ states: [TaskState]) -> JSONValue {
                .number(states.reduce(0) { $0 + (counts[$1.rawValue] ?? 0) })
            }
            let stopped = count([.completed, .failed, .cancelled])
            return [
                "downloadSpeed": .number(Int64(overall.bytesPerSecond)), "uploadSpeed": "0",
                "numActive": count([.running]), "numWaiting": count(Array(Self.waitingStates)),
                "numStopped": stopped, "numStoppedTotal": stopped,
            ]
        case "aria2.getGlobalOption":
            let limits = await manager.limits
            return [
                "dir": .string(defaultDirectory),
                "max-concurrent-downloads": .number(limits.maxConcurrentDownloads),
                "max-connection-per-server": .number(limits.maxConnectionsPerHost),
                "max-overall-download-limit": .number(manager.overallRateLimit ?? 0),
                "max-download-limit": "0",
                "lowest-speed-limit": .number(manager.lowestSpeed?.bytesPerSecond ?? 0),
                "split": "1",
            ]
        case "aria2.changeGlobalOption":
            return try await changeGlobalOption(try params.options(0))
        case "aria2.getOption":
            let info = try await task(try params.string(0))
            var options: [String: JSONValue] = [
                "dir": .string(info.directory),
                "max-download-limit": .number(info.rateLimit ?? 0),
                "split": .number(info.connections ?? 1),
            ]
            if let path = info.path { options["out"] = .string((path as NSString).lastPathComponent) }
            return .object(options)
        case "aria2.changeOption":
            let info = try await task(try params.string(0))
            let options = try params.options(1)
            for name in options.keys where name != "max-download-limit" {
                throw Failure.failed("Haul cannot change the option \(name) of a download (only max-download-limit)")
            }
            if let limit = options["max-download-limit"] {
                let bytes = try Aria2Options.size(limit, option: "max-download-limit")
                try await manager.setRateLimit(bytes == 0 ? nil : bytes, for: [info.id])
            }
            return "OK"
        default:
            return nil
        }
    }

    /// The one task whose GID is `gid` or starts with it.
    func task(_ gid: String) async throws -> DownloadInfo {
        guard GID.isValid(gid) else { throw Failure.failed("Bad GID \(gid.prefix(40))") }
        let wanted = gid.lowercased()
        let matches = try await core.manager.tasks(idPrefix: wanted, limit: 2)
        guard let only = matches.first else { throw Failure.failed("GID \(gid) is not found") }
        guard matches.count == 1 else { throw Failure.failed("GID \(gid) is ambiguous") }
        return only
    }

    private func apply(_ operation: TaskOperation, to gid: String) async throws -> JSONValue {
        let info = try await task(gid)
        do {
            _ = try await core.apply(operation, to: API.Selector(ids: [info.id]))
        } catch let error as HaulError where error.code == .invalidArgument || error.code == .notFound {
            let verb = operation == .cancel ? "removed" : operation == .pause ? "paused" : "unpaused"
            throw Failure.failed("GID#\(GID.of(info.id)) cannot be \(verb) now")
        }
        return .string(GID.of(info.id))
    }

    /// `tellActive(keys)`: the downloads running, read by their ids.
    private func active(keys: Set<String>?) async throws -> JSONValue {
        var statuses: [JSONValue] = []
        for info in try await core.manager.runningTasks() where info.state == .running {
            statuses.append(Aria2Status.json(info, progress: await core.manager.progress(of: info.id), keys: keys))
        }
        return .array(statuses)
    }

    /// `tellWaiting`/`tellStopped(offset, num, keys)`: `[offset, offset + num)` of the tasks
    /// in `states`, or with a negative offset counted from the end, in reverse order (aria2's
    /// rule). Read from the store a page at a time in queue order (from its index, a window
    /// at the front of a million tasks reads its own), each shown as the manager shows it:
    /// one that left `states` meanwhile (a run just started) is left out, and the window
    /// filled from the next.
    private func window(_ params: Parameters, states: Set<TaskState>) async throws -> JSONValue {
        let offset = try params.integer(0)
        let count = try params.integer(1)
        guard count >= 0 else { throw Failure.failed("The parameter at 1 must be 0 or more") }
        let keys = try params.keys(2)
        // -1 is the last: from the end, skipping none.
        let skip = offset >= 0 ? offset : -(offset + 1)
        let wanted = Int(clamping: count)
        var page = try TaskPage(
            limit: max(1, min(wanted, TaskPage.maxLimit)),
            offset: Int(clamping: skip),
            states: states,
            fromEnd: offset < 0
        )
        var statuses: [JSONValue] = []
        while statuses.count < wanted {
            let infos = try await core.manager.tasks(page: page)
            for info in infos where states.contains(info.state) && statuses.count < wanted {
                statuses.append(Aria2Status.json(info, progress: await core.manager.progress(of: info.id), keys: keys))
            }
            guard infos.count == page.limit, let last = infos.last else { break }
            page.after = last.id
            page.offset = 0
        }
        return .array(statuses)
    }

    /// The states aria2 lists among the waiting (`tellWaiting`): queued and paused tasks, and
    /// those waiting to try again or for the network.
    static let waitingStates: Set<TaskState> = [.queued, .retrying, .waitingForNetwork, .paused]

    /// Whether aria2 lists a task in this state among the waiting (``waitingStates``).
    static func isWaiting(_ state: TaskState) -> Bool { waitingStates.contains(state) }

    /// `aria2.changePosition(gid, pos, how)`: moves a waiting or paused download in the
    /// waiting list — to `pos` (`POS_SET`), by `pos` (`POS_CUR`), or to `pos` from the end
    /// (`POS_END`, 0 the last), kept within the list. Its new position.
    private func changePosition(_ params: Parameters) async throws -> JSONValue {
        let info = try await task(try params.string(0))
        let pos = try params.integer(1)
        let how = try params.string(2)
        var waiting = try await core.manager.tasks().filter { Self.isWaiting($0.state) }
        guard let current = waiting.firstIndex(where: { $0.id == info.id }) else {
            throw Failure.failed("GID#\(GID.of(info.id)) not found in the waiting queue.")
        }
        let base: Int64
        switch how {
        case "POS_SET": base = 0
        case "POS_CUR": base = Int64(current)
        case "POS_END": base = Int64(waiting.count - 1)
        default: throw Failure.failed("Illegal argument: how must be POS_SET, POS_CUR or POS_END.")
        }
        let (sum, overflow) = base.addingReportingOverflow(pos)
        let wanted = overflow ? (pos > 0 ? Int64.max : Int64.min) : sum
        let target = Int(max(0, min(Int64(waiting.count - 1), wanted)))
        waiting.insert(waiting.remove(at: current), at: target)
        try await core.manager.reorder(waiting.map(\.id))
        return .int(Int64(target))
    }

    /// The `position` of addUri and addMetalink, read before anything is added: nil when absent.
    private static func position(_ value: JSONValue?) throws -> Int64? {
        guard let value else { return nil }
        guard let index = value.integer, index >= 0 else {
            throw Failure.failed("position must be an integer, 0 or more.")
        }
        return index
    }

    /// Puts new downloads at `index` in the waiting list: past the end, or with no index,
    /// they stay at the end.
    private func place(_ ids: [UUID], at index: Int64?) async throws {
        guard let index else { return }
        var order = try await core.manager.tasks().filter { Self.isWaiting($0.state) && !ids.contains($0.id) }.map(\.id)
        guard index < order.count else { return }
        order.insert(contentsOf: ids, at: Int(index))
        try await core.manager.reorder(order)
    }

    /// `aria2.addUri(uris[, options[, position]])`: one file from its URIs (the first the
    /// URL, the others its mirrors).
    private func addURI(_ params: Parameters) async throws -> JSONValue {
        guard let uris = try params.required(0).array?.compactMap(\.string), !uris.isEmpty else {
            throw Failure.failed("No URI to download.")
        }
        let options = try params.options(1)
        let position = try Self.position(params.optional(2))
        var request = try Aria2Options.request(uris: uris, options: options, directory: defaultDirectory)
        request.session = Self.session
        try request.validate()
        // Added paused in the same transaction: it cannot start (or finish) first.
        let info = try await core.manager.download([request], paused: Aria2Options.flag(options["pause"]))[0]
        try await place([info.id], at: position)
        return .string(GID.of(info.id))
    }

    /// `aria2.addMetalink(metalink[, options[, position]])`: the files of a Metalink (Base64
    /// of the document), each from its URLs at once, checked against its strongest hash and
    /// its piece hashes, in `dir` (names kept inside it). Their GIDs, in the document's order.
    private func addMetalink(_ params: Parameters) async throws -> JSONValue {
        var text = try params.string(0).filter { !$0.isWhitespace }
        while text.utf8.count % 4 != 0 { text += "=" }
        guard text.utf8.count <= Metalink.maxDocumentBytes / 3 * 4 + 4, let data = Data(base64Encoded: text) else {
            throw Failure.failed("The metalink is not Base64 of a Metalink document")
        }
        let metalink = try Metalink(parsing: data, source: "the Metalink given to aria2.addMetalink")
        var options = try params.options(1)
        options["out"] = nil  // Each file has its own name.
        let position = try Self.position(params.optional(2))
        let directory = options["dir"]?.string ?? defaultDirectory
        let requests = try metalink.files.map { file in
            var request = try Aria2Options.request(
                uris: file.urls.map(\.absoluteString),
                options: options,
                directory: defaultDirectory
            )
            request.destination = try Destination.file(file.name, confinedTo: directory)
            if let hash = file.hashes.first, options["checksum"] == nil { request.checksum = hash }
            request.pieceHashes = file.pieces
            request.followsMetalink = false
            request.session = Self.session
            return request
        }
        // Every name is known to stay inside dir: its subdirectories are made (blocking: on
        // NIO's pool), then each request is checked whole.
        let directories = Set(requests.map(\.destination.directory)).sorted()
        try await NIOThreadPool.singleton.runIfActive {
            for directory in directories {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
        }
        for request in requests { try request.validate() }
        let infos = try await core.manager.download(requests, paused: Aria2Options.flag(options["pause"]))
        try await place(infos.map(\.id), at: position)
        return .array(infos.map { .string(GID.of($0.id)) })
    }

    private func changeGlobalOption(_ options: [String: JSONValue]) async throws -> JSONValue {
        var change = StoredLimits()
        for (name, value) in options {
            switch name {
            case "max-concurrent-downloads":
                change.maxConcurrentDownloads = Int(try Aria2Options.size(value, option: name))
            case "max-overall-download-limit":
                change.overallRateLimit = try Aria2Options.size(value, option: name)
            case "max-connection-per-server":
                // Connections to one server: Haul's are over all the downloads to it.
                change.maxConnectionsPerHost = Int(try Aria2Options.size(value, option: name))
            case "lowest-speed-limit":
                change.lowestSpeedLimit = try Aria2Options.size(value, option: name)
            default:
                throw Failure.failed(
                    "Haul cannot change the global option \(name.prefix(60)) (max-concurrent-downloads, max-overall-download-limit, max-connection-per-server, lowest-speed-limit)"
                )
            }
        }
        try await core.changeLimits(change)
        return "OK"
    }
}
