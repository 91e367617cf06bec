import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension DBus {
    /// One message: a method call, a method's return or error, or a signal.
    struct Message {
        enum Kind: UInt8 {
            case methodCall = 1
            case methodReturn = 2
            case error = 3
            case signal = 4
        }

        var kind: Kind
        var serial: UInt32
        var path: String?
        var interface: String?
        var member: String?
        var errorName: String?
        var replySerial: UInt32?
        var destination: String?
        var sender: String?
        var body: [Value] = []

        /// The largest message Haul reads: NetworkManager's answers are a few KiB.
        static let maximumSize = 1 << 20

        /// A method call to `member` of `interface` at `path` of `destination`.
        static func call(
            _ destination: String,
            _ path: String,
            _ interface: String,
            _ member: String,
            _ arguments: [Value] = [],
            serial: UInt32
        ) -> Message {
            var message = Message(kind: .methodCall, serial: serial)
            message.destination = destination
            message.path = path
            message.interface = interface
            message.member = member
            message.body = arguments
            return message
        }

        /// The message as it goes on the wire, little-endian.
        func encoded() -> [UInt8] {
            var body = Writer()
            for value in self.body { body.write(value) }
            var fields: [(UInt8, Value)] = []
            if let path { fields.append((1, .objectPath(path))) }
            if let interface { fields.append((2, .string(interface))) }
            if let member { fields.append((3, .string(member))) }
            if let errorName { fields.append((4, .string(errorName))) }
            if let replySerial { fields.append((5, .uint32(replySerial))) }
            if let destination { fields.append((6, .string(destination))) }
            let signature = self.body.map(\.signature).joined()
            if !signature.isEmpty { fields.append((8, .signature(signature))) }

            var header = Writer()
            for byte in [UInt8(ascii: "l"), kind.rawValue, 0, 1] { header.write(.byte(byte)) }
            header.uint32(UInt32(body.bytes.count))
            header.uint32(serial)
            var array = Writer()
            for (code, value) in fields {
                array.align(8)
                array.write(.byte(code))
                array.write(.variant(value))
            }
            // The array's elements start at offset 16, which is 8-aligned: their padding is as written.
            header.uint32(UInt32(array.bytes.count))
            var bytes = header.bytes + array.bytes
            while bytes.count % 8 != 0 { bytes.append(0) }
            return bytes + body.bytes
        }

        /// The total size of the message whose first 16 bytes are `fixed`.
        static func size(ofMessageStartingWith fixed: ArraySlice<UInt8>) throws(Failure) -> Int {
            guard fixed.count >= 16 else { throw .malformed("a header shorter than 16 bytes") }
            let start = fixed.startIndex
            let little: Bool
            switch fixed[start] {
            case UInt8(ascii: "l"): little = true
            case UInt8(ascii: "B"): little = false
            default: throw .malformed("an unknown byte order")
            }
            guard fixed[start + 3] == 1 else { throw .malformed("protocol version \(fixed[start + 3])") }
            var reader = Reader(Array(fixed.prefix(16)), littleEndian: little)
            _ = try reader.uint32()
            let bodyLength = Int(try reader.uint32())
            _ = try reader.uint32()
            let fieldsLength = Int(try reader.uint32())
            guard bodyLength <= maximumSize, fieldsLength <= maximumSize else {
                throw .malformed("a message larger than \(maximumSize) bytes")
            }
            let header = (16 + fieldsLength + 7) / 8 * 8
            guard header + bodyLength <= maximumSize else {
                throw .malformed("a message larger than \(maximumSize) bytes")
            }
            return header + bodyLength
        }

        /// Decodes a whole message.
        init(decoding bytes: [UInt8]) throws(Failure) {
            let total = try Message.size(ofMessageStartingWith: bytes[...])
            guard bytes.count == total else { throw .malformed("a message of the wrong length") }
            let little = bytes[0] == UInt8(ascii: "l")
            var reader = Reader(bytes, littleEndian: little)
            _ = try reader.read(.basic(UInt8(ascii: "y")))
            guard case .byte(let rawKind) = try reader.read(.basic(UInt8(ascii: "y"))),
                let kind = Kind(rawValue: rawKind)
            else { throw .malformed("an unknown message type") }
            _ = try reader.read(.basic(UInt8(ascii: "y")))
            _ = try reader.read(.basic(UInt8(ascii: "y")))
            let bodyLength = Int(try reader.uint32())
            let serial = try reader.uint32()
            guard serial != 0 else { throw .malformed("serial 0") }
            self.init(kind: kind, serial: serial)
            let field = TypeCode.array(.structure([.basic(UInt8(ascii: "y")), .variant]))
            guard case .array(let fields) = try reader.read(field) else { throw .malformed("header fields") }
            var signature = ""
            for case .structure(let pair) in fields {
                guard pair.count == 2, case .byte(let code) = pair[0], case .variant(let value) = pair[1] else {
                    continue
                }
                switch code {
                case 1: path = value.string
                case 2: interface = value.string
                case 3: member = value.string
                case 4: errorName = value.string
                case 5: replySerial = value.uint32
                case 6: destination = value.string
                case 7: sender = value.string
                case 8: if case .signature(let text) = value { signature = text }
                default: break  // Fields this reader does not use (and future ones) are skipped.
                }
            }
            try reader.align(8)
            guard bytes.count - reader.offset == bodyLength else { throw .malformed("a body of the wrong length") }
            var body = Reader(Array(bytes[reader.offset...]), littleEndian: little)
            for type in try TypeCode.parse(signature) { self.body.append(try body.read(type)) }
            guard body.atEnd else { throw .malformed("bytes after the body") }
        }

        private init(kind: Kind, serial: UInt32) {
            self.kind = kind
            self.serial = serial
        }
    }
}
