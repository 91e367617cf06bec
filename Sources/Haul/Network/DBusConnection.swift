import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension DBus {
    /// A blocking connection to a bus, used by one thread: it connects, authenticates
    /// (EXTERNAL, as the process's user), says Hello, then calls methods and waits for
    /// signals. Every wait has a deadline or a wake descriptor, so a silent bus never holds
    /// its thread past what the caller allows.
    final class Connection {
        /// Owns the socket: it is closed exactly once, when the last reference goes — also
        /// when the connection's initializer fails part way (a second close could close a
        /// descriptor another thread has opened since).
        private final class Socket {
            let descriptor: Int32
            init(_ descriptor: Int32) { self.descriptor = descriptor }
            deinit { close(descriptor) }
        }

        private let handle: Socket
        private var descriptor: Int32 { handle.descriptor }
        private var inbox: [UInt8] = []
        private var lastSerial: UInt32 = 0
        /// A signal arrived while a call waited for its reply.
        private(set) var signalArrived = false

        /// The well-known name, path and interface of the bus itself.
        static let bus = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")

        /// Connects to the first Unix-socket address in `address` (`unix:path=…` or
        /// `unix:abstract=…`, several separated by `;`), within `timeout`.
        init(address: String, timeout: Duration = .seconds(5)) throws(Failure) {
            let deadline = ContinuousClock.now + timeout
            guard let target = Connection.socketAddress(address) else {
                throw Failure(message: "no Unix socket in the bus address")
            }
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw Failure(message: "cannot open a socket: \(String(cString: strerror(errno)))") }
            handle = Socket(fd)
            var storage = sockaddr_un()
            storage.sun_family = sa_family_t(AF_UNIX)
            let capacity = MemoryLayout.size(ofValue: storage.sun_path)
            let path = Array(target.path.utf8)
            guard path.count + (target.abstract ? 1 : 0) < capacity else {
                throw Failure(message: "the bus socket path is too long")
            }
            withUnsafeMutableBytes(of: &storage.sun_path) { raw in
                raw.copyBytes(from: (target.abstract ? [0] : []) + path)
            }
            let length = socklen_t(
                MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + path.count + (target.abstract ? 1 : 0)
            )
            let connected = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) == 0 }
            }
            guard connected else {
                throw Failure(message: "cannot connect to the bus: \(String(cString: strerror(errno)))")
            }
            try authenticate(until: deadline)
            _ = try call(Connection.bus.0, Connection.bus.1, Connection.bus.2, "Hello", until: deadline)
        }

        /// The socket named by a bus address, or nil when it names none Haul can use.
        static func socketAddress(_ address: String) -> (path: String, abstract: Bool)? {
            for candidate in address.split(separator: ";") {
                guard candidate.hasPrefix("unix:") else { continue }
                for pair in candidate.dropFirst(5).split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2, let value = String(parts[1]).removingPercentEncoding, !value.isEmpty
                    else { continue }
                    if parts[0] == "path" { return (value, false) }
                    if parts[0] == "abstract" { return (value, true) }
                }
            }
            return nil
        }

        // MARK: Calls

        /// Calls a method and returns its reply's body; an error reply throws with its name.
        @discardableResult
        func call(
            _ destination: String,
            _ path: String,
            _ interface: String,
            _ member: String,
            _ arguments: [Value] = [],
            until deadline: ContinuousClock.Instant
        ) throws(Failure) -> [Value] {
            lastSerial &+= 1
            if lastSerial == 0 { lastSerial = 1 }
            let serial = lastSerial
            try write(Message.call(destination, path, interface, member, arguments, serial: serial).encoded())
            while true {
                guard let message = try receive(until: deadline, wake: nil) else {
                    throw Failure(message: "no answer to \(member) in time")
                }
                switch message.kind {
                case .signal:
                    signalArrived = true
                case .methodReturn where message.replySerial == serial:
                    return message.body
                case .error where message.replySerial == serial:
                    throw Failure(
                        errorName: message.errorName ?? "org.freedesktop.DBus.Error.Failed",
                        message: message.body.first?.string ?? "no message"
                    )
                default:
                    continue  // A reply to nothing Haul waits for, or a call it does not serve.
                }
            }
        }

        /// Waits for a signal (or takes one that arrived during a call), until `deadline`
        /// (nil: for ever) or a byte on `wake`. False when the deadline passed or `wake` woke it.
        func waitForSignal(until deadline: ContinuousClock.Instant?, wake: Int32) throws(Failure) -> Bool {
            if signalArrived {
                signalArrived = false
                return true
            }
            while let message = try receive(until: deadline, wake: wake) {
                if message.kind == .signal { return true }
            }
            return false
        }

        // MARK: The wire

        private func authenticate(until deadline: ContinuousClock.Instant) throws(Failure) {
            let uid = Array(String(getuid()).utf8).map { String(format: "%02x", $0) }.joined()
            try write([0] + Array("AUTH EXTERNAL \(uid)\r\n".utf8))
            let answer = try line(until: deadline)
            guard answer.hasPrefix("OK ") else {
                throw Failure(message: "the bus refused authentication (\(answer.prefix(80)))")
            }
            try write(Array("BEGIN\r\n".utf8))
        }

        /// One line of the authentication exchange, without its CR LF.
        private func line(until deadline: ContinuousClock.Instant) throws(Failure) -> String {
            while true {
                if let end = inbox.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: inbox[..<end], as: UTF8.self)
                    inbox.removeSubrange(...end)
                    return line.hasSuffix("\r") ? String(line.dropLast()) : line
                }
                guard inbox.count < 1024 else { throw Failure(message: "an authentication line longer than 1 KiB") }
                guard try fill(until: deadline, wake: nil) else {
                    throw Failure(message: "no answer from the bus in time")
                }
            }
        }

        private func write(_ bytes: [UInt8]) throws(Failure) {
            var sent = 0
            while sent < bytes.count {
                let count = bytes[sent...].withUnsafeBytes {
                    send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else {
                    throw Failure(message: "the bus connection broke: \(String(cString: strerror(errno)))")
                }
                sent += count
            }
        }

        /// The next whole message, or nil when `deadline` passed or `wake` became readable.
        private func receive(until deadline: ContinuousClock.Instant?, wake: Int32?) throws(Failure) -> Message? {
            while true {
                if inbox.count >= 16 {
                    let size = try Message.size(ofMessageStartingWith: inbox.prefix(16))
                    if inbox.count >= size {
                        let bytes = Array(inbox[..<size])
                        inbox.removeSubrange(..<size)
                        return try Message(decoding: bytes)
                    }
                }
                guard try fill(until: deadline, wake: wake) else { return nil }
            }
        }

        /// Reads what the bus sent; false when `deadline` passed or `wake` became readable first.
        private func fill(until deadline: ContinuousClock.Instant?, wake: Int32?) throws(Failure) -> Bool {
            var polls = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
            if let wake { polls.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0)) }
            while true {
                var timeout: Int32 = -1
                if let deadline {
                    let left = deadline - ContinuousClock.now
                    guard left > .zero else { return false }
                    let milliseconds =
                        left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                    timeout = Int32(min(milliseconds + 1, 60_000))
                }
                let ready = poll(&polls, nfds_t(polls.count), timeout)
                if ready < 0, errno == EINTR { continue }
                guard ready >= 0 else {
                    throw Failure(message: "cannot wait for the bus: \(String(cString: strerror(errno)))")
                }
                if polls.count > 1, polls[1].revents != 0 { return false }
                if ready == 0 { continue }  // The deadline is looked at again.
                var buffer = [UInt8](repeating: 0, count: 16384)
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { throw Failure(message: "the bus closed the connection") }
                inbox.append(contentsOf: buffer[..<count])
                return true
            }
        }
    }
}
