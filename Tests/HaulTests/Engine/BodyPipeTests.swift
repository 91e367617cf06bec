import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import Haul

/// The body pipe between the event loop and the task that writes: a waiting consumer is woken
/// once a batch has arrived or a moment after the first bytes (on the event loop's clock), the
/// loop waits for room past the bound, an error comes after the bytes before it, and a consumer
/// that goes away stops the request.
@Suite(.timeLimit(.minutes(1))) struct BodyPipeTests {
    private struct Broken: Error {}

    /// How often something happened, across threads.
    private final class Count: Sendable {
        private let value = Mutex(0)
        func add() { value.withLock { $0 += 1 } }
        var now: Int { value.withLock { $0 } }
    }

    private func bytes(_ count: Int, _ value: UInt8) -> ByteBuffer {
        ByteBuffer(repeating: value, count: count)
    }

    private func values(_ batch: BodyPipe.Batch?) -> [UInt8]? {
        batch.map { $0.flatMap { Array($0.readableBytesView) } }
    }

    /// A buffer handed to the pipe on the event loop, as AsyncHTTPClient hands it.
    @discardableResult
    private func feed(
        _ pipe: BodyPipe,
        _ buffer: ByteBuffer,
        on loop: NIOAsyncTestingEventLoop
    ) async throws
        -> EventLoopFuture<Void>
    {
        try await loop.executeInContext { pipe.receive(buffer, on: loop) }
    }

    private func waitUntilWaiting(_ pipe: BodyPipe) async {
        while !pipe.isConsumerWaiting { await Task.yield() }
    }

    @Test("a waiting consumer is woken once a batch has arrived, with all of it, in order")
    func wokenByABatch() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let pipe = BodyPipe(limits: .init(batch: 100, bound: 1000, delay: .seconds(1)))
        async let taken = pipe.next()
        await waitUntilWaiting(pipe)
        try await feed(pipe, bytes(40, 1), on: loop)
        try await feed(pipe, bytes(40, 2), on: loop)
        #expect(pipe.isConsumerWaiting)
        try await feed(pipe, bytes(40, 3), on: loop)
        #expect(
            try await values(taken) == Array(repeating: 1, count: 40) + Array(repeating: 2, count: 40)
                + Array(repeating: 3, count: 40)
        )
        #expect(pipe.pendingBytes == 0)
        try await loop.shutdownGracefully()
    }

    @Test("bytes short of a batch reach a waiting consumer after the delay, on the loop's clock")
    func wokenAfterTheDelay() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let pipe = BodyPipe(limits: .init(batch: 100, bound: 1000, delay: .milliseconds(20)))
        async let taken = pipe.next()
        await waitUntilWaiting(pipe)
        try await feed(pipe, bytes(10, 7), on: loop)
        await loop.advanceTime(by: .milliseconds(19))
        #expect(pipe.isConsumerWaiting)
        await loop.advanceTime(by: .milliseconds(1))
        #expect(try await values(taken) == Array(repeating: 7, count: 10))
        try await loop.shutdownGracefully()
    }

    @Test("a consumer that comes back takes what arrived meanwhile without waiting")
    func takesWhatWaits() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let pipe = BodyPipe(limits: .init(batch: 100, bound: 1000, delay: .seconds(1)))
        try await feed(pipe, bytes(5, 1), on: loop)
        try await feed(pipe, bytes(5, 2), on: loop)
        #expect(try await values(pipe.next()) == [1, 1, 1, 1, 1, 2, 2, 2, 2, 2])
        try await loop.shutdownGracefully()
    }

    @Test("past the bound the event loop waits for room, and reads on once the consumer takes")
    func backpressure() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let pipe = BodyPipe(limits: .init(batch: 100, bound: 200, delay: .seconds(1)))
        let first = try await feed(pipe, bytes(150, 1), on: loop)
        let second = try await feed(pipe, bytes(100, 2), on: loop)
        let roomGiven = Count()
        try await first.get()
        second.whenComplete { _ in roomGiven.add() }
        await loop.run()
        #expect(roomGiven.now == 0)
        #expect(try await pipe.next()?.count == 2)
        try await second.get()
        #expect(roomGiven.now == 1)
        try await loop.shutdownGracefully()
    }

    @Test("an error comes after the bytes that arrived before it, then again; the end is nil")
    func errorAfterBytes() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let pipe = BodyPipe()
        try await feed(pipe, bytes(3, 9), on: loop)
        pipe.finish(.failure(Broken()))
        #expect(try await values(pipe.next()) == [9, 9, 9])
        await #expect(throws: Broken.self) { try await pipe.next() }
        await #expect(throws: Broken.self) { try await pipe.next() }

        let ended = BodyPipe()
        try await feed(ended, bytes(2, 4), on: loop)
        ended.finish(.success(()))
        #expect(try await values(ended.next()) == [4, 4])
        #expect(try await ended.next() == nil)
        #expect(try await ended.next() == nil)
        try await loop.shutdownGracefully()
    }

    @Test("the end wakes a waiting consumer at once")
    func endWakes() async throws {
        let pipe = BodyPipe()
        async let taken = pipe.next()
        await waitUntilWaiting(pipe)
        pipe.finish(.success(()))
        #expect(try await taken == nil)
    }

    @Test("a body dropped before its end stops the request and frees what waits; one read to the end does not")
    func droppedStopsTheRequest() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let pipe = BodyPipe(limits: .init(batch: 100, bound: 1000, delay: .seconds(1)))
        let stopped = Count()
        pipe.onAbandon { stopped.add() }
        try await feed(pipe, bytes(10, 1), on: loop)
        try await feed(pipe, bytes(10, 2), on: loop)
        // A reader that breaks off while the response (and so its body) is still held.
        let body = ResponseBody(pipe)
        do {
            var reading = body.makeAsyncIterator()
            #expect(try await reading.next()?.readableBytes == 10)
            #expect(stopped.now == 0)
        }
        #expect(stopped.now == 1)
        withExtendedLifetime(body) {}
        #expect(pipe.pendingBytes == 0)
        try await feed(pipe, bytes(10, 3), on: loop)
        #expect(pipe.pendingBytes == 0)

        let whole = BodyPipe()
        let wholeStopped = Count()
        whole.onAbandon { wholeStopped.add() }
        try await feed(whole, bytes(10, 1), on: loop)
        whole.finish(.success(()))
        var count = 0
        for try await buffer in ResponseBody(whole) { count += buffer.readableBytes }
        #expect(count == 10)
        #expect(wholeStopped.now == 0)
        try await loop.shutdownGracefully()
    }

    @Test("a cancelled consumer gets CancellationError and the request is stopped")
    func cancelledConsumer() async throws {
        let pipe = BodyPipe()
        let stopped = Count()
        pipe.onAbandon { stopped.add() }
        let consumer = Task { try await pipe.next() }
        await waitUntilWaiting(pipe)
        consumer.cancel()
        await #expect(throws: CancellationError.self) { try await consumer.value }
        #expect(stopped.now == 1)
    }
}
