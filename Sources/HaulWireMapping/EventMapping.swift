import Foundation
import Haul
import HaulWire

// What the daemon tells its clients (``EventRecord``, task states, why they changed) from
// the library's events, and the library's states from the wire's.

extension EventRecord {
    /// The record of `event`.
    public init(_ event: DownloadEvent, session: String? = nil, time: Date? = Date()) {
        self.init(taskID: event.taskID, kind: .state, session: session ?? event.session, time: time)
        switch event {
        case .added(let info):
            kind = .added
            url = Redaction.url(info.url)
            state = API.TaskState(info.state)
            path = info.path
        case .stateChanged(_, let from, let to, let reason):
            kind = .state
            self.from = API.TaskState(from)
            self.to = API.TaskState(to)
            self.reason = API.StateChangeReason(reason)
        case .progress(_, let progress):
            kind = .progress
            received = progress.bytesReceived
            thisRun = progress.bytesThisRun
            total = progress.totalBytes
            bytesPerSecond = Int64(progress.bytesPerSecond)
            etaSeconds = progress.estimatedTimeRemaining?.components.seconds
        case .resumed(_, let offset, let total):
            kind = .resumed
            self.offset = offset
            self.total = total
        case .completed(_, let result):
            kind = .completed
            path = result.path
            bytes = result.bytes
            fetched = result.bytesFetched
            alreadyComplete = result.alreadyComplete
            notModified = result.notModified ? true : nil
            if !result.lengthConfirmed { lengthConfirmed = false }
            verifiedAgainst = result.verifiedAgainst
        case .failed(_, let error):
            kind = .failed
            self.error = error.description
            code = error.code.description
            status = error.status
            resumable = error.resumeData != nil
        case .hookFinished(_, let run):
            kind = .hook
            hook = API.HookMoment(run.moment)
            program = run.program
            exitStatus = run.exitStatus
            self.error = run.failure
        case .networkChanged(let network):
            kind = .network
            interface = network.defaultRoute?.interface
            address = network.defaultRoute?.sourceAddress
            connected = network.isConnected
            metered = network.isMetered
            allowMetered = network.allowsMetered
        }
    }
}

extension DownloadEvent {
    /// The session of an added task (the others' records are told in their task's session).
    var session: String? {
        if case .added(let info) = self { return info.session }
        return nil
    }
}

extension API.TaskState {
    public init(_ state: TaskState) {
        // The wire has every state the library has, by the same name.
        self = API.TaskState(rawValue: state.rawValue) ?? .failed
    }
}

extension TaskState {
    public init(_ wire: API.TaskState) {
        self = TaskState(rawValue: wire.rawValue) ?? .failed
    }
}

extension API.StateChangeReason {
    public init(_ reason: StateChangeReason) {
        self = API.StateChangeReason(rawValue: reason.rawValue) ?? .failed
    }
}

extension API.HookMoment {
    public init(_ moment: Hooks.Moment) {
        switch moment {
        case .complete: self = .complete
        case .error: self = .error
        }
    }
}

extension API.Selector {
    /// - Throws: ``HaulError/Code/invalidArgument`` unless exactly one of ids, session or
    ///   all is given, and a session is a valid name.
    package func validate() throws {
        let given = [ids != nil, session != nil, all == true].filter { $0 }.count
        guard given == 1 else {
            throw HaulError(.invalidArgument, "Name the tasks: give exactly one of ids, session, or all")
        }
        if let session { try DownloadRequest.validateSession(session) }
    }
}
