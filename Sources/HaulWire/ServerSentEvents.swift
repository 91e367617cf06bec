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
    ///
    /// What it keeps is bounded: a line longer than ``maximumLine`` or an event whose data
    /// lines add up to more than ``maximumData`` (an event is a few hundred bytes) breaks the
    /// stream: ``isOverlong`` says so, and nothing more is read from it. Each byte is looked
    /// at once, however the stream is cut into reads.
    package struct Parser {
        /// The longest line kept.
        package static let maximumLine = 1 << 20
        /// The most data one event gathers.
        package static let maximumData = 4 << 20

        package init() {}

        private var buffer: [UInt8] = []
        /// How much of `buffer` is known to hold no line break.
        private var scanned = 0
        private var id: String?
        private var event: String?
        private var data: [String] = []
        private var dataBytes = 0

        /// A line or an event went past its bound: the stream is not one to read further.
        package private(set) var isOverlong = false

        /// The messages completed by `bytes`.
        package mutating func feed(_ bytes: some Sequence<UInt8>) -> [Message] {
            guard !isOverlong else { return [] }
            buffer.append(contentsOf: bytes)
            var messages: [Message] = []
            var start = 0
            var from = scanned
            // A whole line too long (one read can hold it) is past the bound as much as a part.
            while !isOverlong, let newline = buffer[from...].firstIndex(of: UInt8(ascii: "\n")) {
                var line = buffer[start..<newline]
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                start = newline + 1
                from = start
                if line.count > Self.maximumLine {
                    isOverlong = true
                } else if let message = handle(line) {
                    messages.append(message)
                }
                if dataBytes > Self.maximumData { isOverlong = true }
            }
            if isOverlong || buffer.count - start > Self.maximumLine {
                isOverlong = true
                (buffer, scanned, data, dataBytes) = ([], 0, [], 0)
            } else {
                buffer.removeFirst(start)
                scanned = buffer.count
            }
            return messages
        }

        /// One line, as bytes: fields are told apart by their bytes, and only values are
        /// made into text (50 followers of 10,000 downloads read 2 million of them).
        private mutating func handle(_ line: ArraySlice<UInt8>) -> Message? {
            if line.isEmpty {
                defer {
                    id = nil
                    event = nil
                    data = []
                    dataBytes = 0
                }
                guard !data.isEmpty else { return nil }
                return Message(id: id, event: event, data: data.count == 1 ? data[0] : data.joined(separator: "\n"))
            }
            if line.first == UInt8(ascii: ":") { return nil }
            let field: ArraySlice<UInt8>
            var value: ArraySlice<UInt8>
            if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
                field = line[..<colon]
                value = line[(colon + 1)...]
                if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
            } else {
                field = line
                value = []
            }
            if field.elementsEqual("data".utf8) {
                dataBytes += value.count
                data.append(String(decoding: value, as: UTF8.self))
            } else if field.elementsEqual("event".utf8) {
                event = String(decoding: value, as: UTF8.self)
            } else if field.elementsEqual("id".utf8) {
                id = String(decoding: value, as: UTF8.self)
            }
            return nil
        }
    }
}
