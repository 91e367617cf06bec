import Foundation

/// Server-Sent Events (the `text/event-stream` format of the HTML standard), as the
/// daemon writes them and the client reads them.
package enum ServerSentEvents {
    /// One event: `id:` (logged events only), `event:` the kind, `data:` the JSON record.
    package static func format(_ record: EventRecord) -> String {
        var text = ""
        if let id = record.eventID { text += "id: \(id)\n" }
        return text + "event: \(record.kind.rawValue)\ndata: \(record.jsonLine())\n\n"
    }

    /// A comment line: ignored by readers, it keeps the connection busy and detects a gone client.
    package static let heartbeat = ": heartbeat\n\n"

    /// One received event.
    package struct Message: Equatable {
        /// The `id:` of this event (not carried over to the next, unlike a browser's last event id).
        package var id: String?
        package var event: String?
        package var data: String
    }

    /// Reads the stream line by line, across chunk boundaries.
    package struct Parser {
        package init() {}

        private var buffer: [UInt8] = []
        private var id: String?
        private var event: String?
        private var data: [String] = []

        /// The messages completed by `bytes`.
        package mutating func feed(_ bytes: some Sequence<UInt8>) -> [Message] {
            buffer.append(contentsOf: bytes)
            var messages: [Message] = []
            var start = 0
            while let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                var line = buffer[start..<newline]
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                start = newline + 1
                if let message = handle(String(decoding: line, as: UTF8.self)) { messages.append(message) }
            }
            buffer.removeFirst(start)
            return messages
        }

        private mutating func handle(_ line: String) -> Message? {
            if line.isEmpty {
                defer {
                    id = nil
                    event = nil
                    data = []
                }
                guard !data.isEmpty else { return nil }
                return Message(id: id, event: event, data: data.joined(separator: "\n"))
            }
            if line.hasPrefix(":") { return nil }
            let field: Substring
            var value: Substring
            if let colon = line.firstIndex(of: ":") {
                field = line[..<colon]
                value = line[line.index(after: colon)...]
                if value.hasPrefix(" ") { value = value.dropFirst() }
            } else {
                field = line[...]
                value = ""
            }
            switch field {
            case "id": id = String(value)
            case "event": event = String(value)
            case "data": data.append(String(value))
            default: break
            }
            return nil
        }
    }
}
