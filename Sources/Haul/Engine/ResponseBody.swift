import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// The bytes of a response body on their way from the event loop that reads them to the task
/// that consumes them.
///
/// The event loop reads ahead up to ``Limits/bound`` bytes, then waits for room
/// (backpressure). The consumer takes everything that has arrived at once; when it has to
/// wait, it is woken once ``Limits/batch`` bytes have piled up, ``Limits/delay`` after the
/// first of them (a slow link still shows its progress), or at the end — not for every read.
/// AsyncHTTPClient's own body stream holds one buffer: its event loop stops after each read and
/// wakes the consumer, which wakes the loop again, tens of thousands of times a gigabyte.
final class BodyPipe: Sendable {
    struct Limits: Sendable {
        /// A waiting consumer is woken once this many bytes have arrived.
        var batch = 256 << 10
        /// The event loop reads no further while this many bytes wait.
        var bound = 256 << 10
        /// A waiting consumer is woken this long after the first bytes at the latest.
        var delay = TimeAmount.milliseconds(20)
    }

    typealias Batch = CircularBuffer<ByteBuffer>

    private struct State {
        var pending = Batch()
        var bytes = 0
        /// How the body ended: nil while more may come.
        var end: Result<Void, any Error>?
        var consumer: CheckedContinuation<Batch?, any Error>?
        /// The event loop's wait for room.
        var room: EventLoopPromise<Void>?
        var timer: Scheduled<Void>?
        /// The consumer was cancelled or went away: what arrives is dropped.
        var abandoned = false
        var cancelRequest: (@Sendable () -> Void)?

        /// What a consumer gets now: all that waits, else the end; nil when it must wait. The
        /// event loop's wait for room, if any, is over.
        mutating func ready(_ followup: inout Followup) -> Result<Batch?, any Error>? {
            if !pending.isEmpty {
                defer {
                    pending = Batch()
                    bytes = 0
                }
                followup.room = room
                room = nil
                return .success(pending)
            }
            switch end {
            case .success: return .success(nil)
            case .failure(let error): return .failure(error)
            case nil: return nil
            }
        }
    }

    /// What to do once the lock is released.
    private struct Followup {
        var wake: (CheckedContinuation<Batch?, any Error>, Result<Batch?, any Error>)?
        var room: EventLoopPromise<Void>?
        var timer: Scheduled<Void>?
        var cancelRequest: (@Sendable () -> Void)?

        func run() {
            timer?.cancel()
            room?.succeed()
            if let (consumer, result) = wake { consumer.resume(with: result) }
            cancelRequest?()
        }
    }

    let limits: Limits
    private let state = Mutex(State())

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// How to stop the request when the consumer goes away or is cancelled.
    func onAbandon(_ cancel: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.abandoned { return state.end == nil }
            state.cancelRequest = cancel
            return false
        }
        if now { cancel() }
    }

    // MARK: The event loop's side

    /// A buffer read from the connection; the future completes when the loop may read more.
    func receive(_ buffer: ByteBuffer, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        var followup = Followup()
        let room = state.withLock { state -> EventLoopPromise<Void>? in
            guard !state.abandoned, state.end == nil else { return nil }
            state.pending.append(buffer)
            state.bytes += buffer.readableBytes
            if let consumer = state.consumer {
                if state.bytes >= limits.batch {
                    state.consumer = nil
                    followup.timer = state.timer
                    state.timer = nil
                    followup.wake = (consumer, .success(state.pending))
                    (state.pending, state.bytes) = (Batch(), 0)
                    return nil
                }
                if state.timer == nil {
                    state.timer = eventLoop.scheduleTask(in: limits.delay) { self.delayPassed() }
                }
            }
            guard state.bytes >= limits.bound else { return nil }
            let room = eventLoop.makePromise(of: Void.self)
            state.room = room
            return room
        }
        followup.run()
        return room?.futureResult ?? eventLoop.makeSucceededVoidFuture()
    }

    /// The end of the body: `.success` after its last byte, or the error that broke it.
    func finish(_ result: Result<Void, any Error>) {
        var followup = Followup()
        state.withLock { state in
            guard state.end == nil else { return }
            state.end = result
            followup.room = state.room
            followup.timer = state.timer
            (state.room, state.timer) = (nil, nil)
            if let consumer = state.consumer {
                state.consumer = nil
                followup.wake = (consumer, state.ready(&followup) ?? .success(nil))
            }
        }
        followup.run()
    }

    private func delayPassed() {
        var followup = Followup()
        state.withLock { state in
            state.timer = nil
            guard let consumer = state.consumer, let ready = state.ready(&followup) else { return }
            state.consumer = nil
            followup.wake = (consumer, ready)
        }
        followup.run()
    }

    // MARK: The consumer's side

    /// Everything that has arrived (waiting until something has), or nil at the end of the
    /// body; throws the error that broke it once what came before it has been taken.
    func next() async throws -> Batch? {
        if let ready = take() { return try ready.get() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                var followup = Followup()
                state.withLock { state in
                    if let ready = state.ready(&followup) {
                        followup.wake = (continuation, ready)
                    } else if state.abandoned {
                        followup.wake = (continuation, .failure(CancellationError()))
                    } else {
                        state.consumer = continuation
                    }
                }
                followup.run()
            }
        } onCancel: {
            abandon(resuming: CancellationError())
        }
    }

    private func take() -> Result<Batch?, any Error>? {
        var followup = Followup()
        let ready = state.withLock { $0.ready(&followup) }
        followup.run()
        return ready
    }

    /// The consumer stopped reading (cancelled, or the body dropped): the request is stopped
    /// unless it has ended, and what arrives from now on is dropped.
    func abandon(resuming error: (any Error)? = nil) {
        var followup = Followup()
        state.withLock { state in
            guard !state.abandoned else { return }
            state.abandoned = true
            state.pending = Batch()
            state.bytes = 0
            followup.room = state.room
            followup.timer = state.timer
            (state.room, state.timer) = (nil, nil)
            if let consumer = state.consumer {
                state.consumer = nil
                followup.wake = (consumer, .failure(error ?? CancellationError()))
            }
            if state.end == nil { followup.cancelRequest = state.cancelRequest }
        }
        followup.run()
    }

    /// Whether the consumer waits for bytes (for tests).
    var isConsumerWaiting: Bool { state.withLock { $0.consumer != nil } }

    /// How many bytes wait for the consumer.
    var pendingBytes: Int { state.withLock { $0.bytes } }

    /// Whether the event loop has stopped reading until the consumer takes what waits.
    var isFull: Bool { pendingBytes >= limits.bound }
}

/// The body of a response as an `AsyncSequence` of the buffers read, taken from a
/// ``BodyPipe`` a batch at a time. Dropping it, or its iterator, before the end stops the request.
struct ResponseBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    private let pipe: BodyPipe
    private let holder: Holder

    init(_ pipe: BodyPipe) {
        self.pipe = pipe
        holder = Holder(pipe)
    }

    func makeAsyncIterator() -> Iterator {
        Iterator(pipe: pipe, holder: Holder(pipe), body: holder)
    }

    struct Iterator: AsyncIteratorProtocol {
        let pipe: BodyPipe
        /// Dropping the iterator abandons the body...
        let holder: Holder
        /// ...and the sequence's own holder lives as long as the iterator does.
        let body: Holder
        var batch = BodyPipe.Batch()

        mutating func next() async throws -> ByteBuffer? {
            if let buffer = batch.popFirst() { return buffer }
            guard let more = try await pipe.next() else { return nil }
            batch = more
            return batch.popFirst()
        }
    }

    /// Abandons the pipe when the last holder goes.
    final class Holder: Sendable {
        let pipe: BodyPipe
        init(_ pipe: BodyPipe) { self.pipe = pipe }
        deinit { pipe.abandon() }
    }
}

/// Hands AsyncHTTPClient's response to Haul: the head to whoever waits for it, the body's
/// buffers and its end to a ``BodyPipe``.
final class BodyDelegate: HTTPClientResponseDelegate {
    typealias Response = Void
    let head = HeadHandoff()
    let pipe: BodyPipe

    init(pipe: BodyPipe) {
        self.pipe = pipe
    }

    /// Runs `request` on `client` and returns once its head has arrived, with where its body
    /// is read: the body is read ahead into a ``BodyPipe`` (AsyncHTTPClient's own response
    /// body holds one buffer at a time) on the request's event loop.
    static func execute(
        _ request: HTTPClientRequest,
        on client: HTTPClient,
        logger: Logger
    ) async throws
        -> (HTTPClientResponse, ReadSite)
    {
        let pipe = BodyPipe()
        let delegate = BodyDelegate(pipe: pipe)
        let task = client.execute(
            request: try HTTPClient.Request(
                url: request.url,
                method: request.method,
                headers: request.headers,
                tlsConfiguration: request.tlsConfiguration
            ),
            delegate: delegate,
            eventLoop: .indifferent,
            logger: logger
        )
        pipe.onAbandon { task.fail(reason: CancellationError()) }
        let head = try await withTaskCancellationHandler {
            try await delegate.head.wait()
        } onCancel: {
            task.fail(reason: CancellationError())
        }
        let response = HTTPClientResponse(
            version: head.version,
            status: head.status,
            headers: head.headers,
            body: .stream(ResponseBody(pipe))
        )
        return (response, ReadSite(loop: task.eventLoop, pipe: pipe))
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        self.head.deliver(.success(head))
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        pipe.receive(buffer, on: task.eventLoop)
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        head.deliver(.failure(error))
        pipe.finish(.failure(error))
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        pipe.finish(.success(()))
    }
}

/// Passes a response head from the event loop (or the task that reads it) to the caller, once.
final class HeadHandoff: Sendable {
    private enum State {
        case waiting
        case delivered(Result<HTTPResponseHead, any Error>)
        case awaited(CheckedContinuation<HTTPResponseHead, any Error>)
        case done
    }

    private let state = Mutex(State.waiting)

    func deliver(_ result: Result<HTTPResponseHead, any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<HTTPResponseHead, any Error>? in
            switch state {
            case .waiting:
                state = .delivered(result)
                return nil
            case .awaited(let continuation):
                state = .done
                return continuation
            case .delivered, .done:
                return nil
            }
        }
        waiter?.resume(with: result)
    }

    func wait() async throws -> HTTPResponseHead {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<HTTPResponseHead, any Error>? in
                switch state {
                case .delivered(let result):
                    state = .done
                    return result
                case .waiting:
                    state = .awaited(continuation)
                    return nil
                case .awaited, .done:
                    return .failure(CancellationError())
                }
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
