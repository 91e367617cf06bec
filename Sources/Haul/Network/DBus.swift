import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The little of D-Bus (the Desktop Bus specification, version 0.43) that Haul needs to ask
/// NetworkManager which interfaces are metered: a connection to a bus on a Unix socket,
/// EXTERNAL authentication, method calls and their replies, and signals. Everything a
/// peer sends is checked against the specification's rules and bounds before it is used;
/// a message that breaks them ends the connection, never the process.
enum DBus {
    /// A D-Bus failure: the bus or the peer misbehaved, or answered with an error.
    struct Failure: Error, CustomStringConvertible {
        /// The error name a peer replied with (`org.freedesktop.DBus.Error.ServiceUnknown`);
        /// nil when the failure is the connection's or the message's.
        var errorName: String?
        var message: String

        var description: String { errorName.map { "\($0): \(message)" } ?? message }

        static func malformed(_ what: String) -> Failure { Failure(message: "malformed D-Bus message: \(what)") }
    }

    /// A value in a message body or header.
    indirect enum Value: Equatable, Sendable {
        case byte(UInt8)
        case boolean(Bool)
        case int16(Int16)
        case uint16(UInt16)
        case int32(Int32)
        case uint32(UInt32)
        case int64(Int64)
        case uint64(UInt64)
        case double(Double)
        case string(String)
        case objectPath(String)
        case signature(String)
        /// A Unix file descriptor's index (`h`); Haul never asks for any.
        case unixFD(UInt32)
        case variant(Value)
        case array([Value])
        /// A struct, or a dictionary entry (an array of them is a dictionary).
        case structure([Value])

        /// The signature of a value Haul sends: basic types and variants only.
        var signature: String {
            switch self {
            case .byte: "y"
            case .boolean: "b"
            case .int16: "n"
            case .uint16: "q"
            case .int32: "i"
            case .uint32: "u"
            case .int64: "x"
            case .uint64: "t"
            case .double: "d"
            case .string: "s"
            case .objectPath: "o"
            case .signature: "g"
            case .unixFD: "h"
            case .variant: "v"
            case .array, .structure: ""  // Never sent.
            }
        }

        var string: String? {
            switch self {
            case .string(let text), .objectPath(let text): text
            case .variant(let inner): inner.string
            default: nil
            }
        }

        var uint32: UInt32? {
            switch self {
            case .uint32(let value): value
            case .variant(let inner): inner.uint32
            default: nil
            }
        }

        /// The entries of a dictionary (`a{sv}`) with string keys.
        var dictionary: [String: Value] {
            guard case .array(let entries) = self else { return [:] }
            var result: [String: Value] = [:]
            for case .structure(let pair) in entries where pair.count == 2 {
                if let key = pair[0].string { result[key] = pair[1] }
            }
            return result
        }
    }

    /// A type in a signature.
    indirect enum TypeCode: Equatable {
        case basic(UInt8)
        case variant
        case array(TypeCode)
        case structure([TypeCode])
        case dictEntry(TypeCode, TypeCode)

        var alignment: Int {
            switch self {
            case .basic(let code):
                switch code {
                case UInt8(ascii: "y"), UInt8(ascii: "g"): 1
                case UInt8(ascii: "n"), UInt8(ascii: "q"): 2
                case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"): 8
                default: 4
                }
            case .variant: 1
            case .array: 4
            case .structure, .dictEntry: 8
            }
        }

        /// Parses a signature: at most 255 bytes, 32 nested arrays and 32 nested structs.
        static func parse(_ signature: String) throws(Failure) -> [TypeCode] {
            let bytes = Array(signature.utf8)
            guard bytes.count <= 255 else { throw .malformed("a signature longer than 255 bytes") }
            var index = 0
            var types: [TypeCode] = []
            while index < bytes.count { types.append(try single(bytes, &index, arrays: 0, structs: 0)) }
            return types
        }

        private static func single(
            _ bytes: [UInt8],
            _ index: inout Int,
            arrays: Int,
            structs: Int
        )
            throws(Failure) -> TypeCode
        {
            guard index < bytes.count else { throw .malformed("a signature ends inside a type") }
            let code = bytes[index]
            index += 1
            switch code {
            case UInt8(ascii: "a"):
                guard arrays < 32 else { throw .malformed("arrays nested deeper than 32") }
                if index < bytes.count, bytes[index] == UInt8(ascii: "{") {
                    index += 1
                    let key = try single(bytes, &index, arrays: arrays + 1, structs: structs + 1)
                    guard case .basic = key else { throw .malformed("a dictionary key that is not a basic type") }
                    let value = try single(bytes, &index, arrays: arrays + 1, structs: structs + 1)
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "}") else {
                        throw .malformed("a dictionary entry without its end")
                    }
                    index += 1
                    return .array(.dictEntry(key, value))
                }
                return .array(try single(bytes, &index, arrays: arrays + 1, structs: structs))
            case UInt8(ascii: "("):
                guard structs < 32 else { throw .malformed("structs nested deeper than 32") }
                var fields: [TypeCode] = []
                while index < bytes.count, bytes[index] != UInt8(ascii: ")") {
                    fields.append(try single(bytes, &index, arrays: arrays, structs: structs + 1))
                }
                guard index < bytes.count, !fields.isEmpty else { throw .malformed("an empty or unended struct") }
                index += 1
                return .structure(fields)
            case UInt8(ascii: "v"):
                return .variant
            default:
                guard Array("ybnqiuxtdsogh".utf8).contains(code) else {
                    throw .malformed("an unknown type code \(code)")
                }
                return .basic(code)
            }
        }
    }

    // MARK: Writing

    /// Marshals values little-endian, aligning each from the start of what it writes.
    struct Writer {
        private(set) var bytes: [UInt8] = []

        mutating func align(_ boundary: Int) {
            while bytes.count % boundary != 0 { bytes.append(0) }
        }

        mutating func uint32(_ value: UInt32) {
            align(4)
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }

        mutating func write(_ value: Value) {
            switch value {
            case .byte(let byte): bytes.append(byte)
            case .boolean(let flag): uint32(flag ? 1 : 0)
            case .int16(let number):
                align(2)
                withUnsafeBytes(of: number.littleEndian) { bytes.append(contentsOf: $0) }
            case .uint16(let number):
                align(2)
                withUnsafeBytes(of: number.littleEndian) { bytes.append(contentsOf: $0) }
            case .int32(let number): uint32(UInt32(bitPattern: number))
            case .uint32(let number), .unixFD(let number): uint32(number)
            case .int64(let number): uint64(UInt64(bitPattern: number))
            case .uint64(let number): uint64(number)
            case .double(let number): uint64(number.bitPattern)
            case .string(let text), .objectPath(let text):
                uint32(UInt32(text.utf8.count))
                bytes.append(contentsOf: text.utf8)
                bytes.append(0)
            case .signature(let text):
                bytes.append(UInt8(text.utf8.count))
                bytes.append(contentsOf: text.utf8)
                bytes.append(0)
            case .variant(let inner):
                write(.signature(inner.signature))
                write(inner)
            case .array, .structure:
                break  // Haul sends neither in a body; the header's field array is written by Message.
            }
        }

        private mutating func uint64(_ value: UInt64) {
            align(8)
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
    }

    // MARK: Reading

    /// Unmarshals values, checking every length against what is there.
    struct Reader {
        let bytes: [UInt8]
        let littleEndian: Bool
        private(set) var offset = 0

        init(_ bytes: [UInt8], littleEndian: Bool) {
            self.bytes = bytes
            self.littleEndian = littleEndian
        }

        var atEnd: Bool { offset >= bytes.count }

        mutating func align(_ boundary: Int) throws(Failure) {
            let padded = (offset + boundary - 1) / boundary * boundary
            guard padded <= bytes.count else { throw .malformed("padding past the end") }
            guard bytes[offset..<padded].allSatisfy({ $0 == 0 }) else { throw .malformed("padding that is not zero") }
            offset = padded
        }

        private mutating func take(_ count: Int) throws(Failure) -> ArraySlice<UInt8> {
            guard count >= 0, count <= bytes.count - offset else { throw .malformed("a value past the end") }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }

        private mutating func integer(_ size: Int) throws(Failure) -> UInt64 {
            try align(size)
            let raw = try take(size)
            let ordered = littleEndian ? Array(raw.reversed()) : Array(raw)
            return ordered.reduce(0) { $0 << 8 | UInt64($1) }
        }

        mutating func uint32() throws(Failure) -> UInt32 { UInt32(try integer(4)) }

        mutating func read(_ type: TypeCode, depth: Int = 0) throws(Failure) -> Value {
            guard depth < 64 else { throw .malformed("values nested deeper than 64") }
            switch type {
            case .basic(let code):
                return try basic(code)
            case .variant:
                guard case .signature(let text) = try basic(UInt8(ascii: "g")) else { throw .malformed("a variant") }
                let types = try TypeCode.parse(text)
                guard types.count == 1 else { throw .malformed("a variant holding \(types.count) types") }
                return .variant(try read(types[0], depth: depth + 1))
            case .array(let element):
                let length = Int(try uint32())
                guard length <= 1 << 26 else { throw .malformed("an array longer than 64 MiB") }
                try align(element.alignment)
                let end = offset + length
                guard end <= bytes.count else { throw .malformed("an array past the end") }
                var items: [Value] = []
                while offset < end { items.append(try read(element, depth: depth + 1)) }
                guard offset == end else { throw .malformed("an array whose elements overrun it") }
                return .array(items)
            case .structure(let fields):
                try align(8)
                var values: [Value] = []
                for field in fields { values.append(try read(field, depth: depth + 1)) }
                return .structure(values)
            case .dictEntry(let key, let value):
                try align(8)
                return .structure([try read(key, depth: depth + 1), try read(value, depth: depth + 1)])
            }
        }

        private mutating func basic(_ code: UInt8) throws(Failure) -> Value {
            switch code {
            case UInt8(ascii: "y"): return .byte(try take(1).first ?? 0)
            case UInt8(ascii: "b"):
                let value = try uint32()
                guard value <= 1 else { throw .malformed("a boolean that is not 0 or 1") }
                return .boolean(value == 1)
            case UInt8(ascii: "n"): return .int16(Int16(truncatingIfNeeded: try integer(2)))
            case UInt8(ascii: "q"): return .uint16(UInt16(truncatingIfNeeded: try integer(2)))
            case UInt8(ascii: "i"): return .int32(Int32(truncatingIfNeeded: try integer(4)))
            case UInt8(ascii: "u"): return .uint32(try uint32())
            case UInt8(ascii: "h"): return .unixFD(try uint32())
            case UInt8(ascii: "x"): return .int64(Int64(bitPattern: try integer(8)))
            case UInt8(ascii: "t"): return .uint64(try integer(8))
            case UInt8(ascii: "d"): return .double(Double(bitPattern: try integer(8)))
            case UInt8(ascii: "s"), UInt8(ascii: "o"):
                let length = Int(try uint32())
                let text = try self.text(length)
                return code == UInt8(ascii: "s") ? .string(text) : .objectPath(text)
            case UInt8(ascii: "g"):
                let length = Int(try take(1).first ?? 0)
                return .signature(try text(length))
            default:
                throw .malformed("an unknown type code \(code)")
            }
        }

        /// `length` bytes of UTF-8 and the nul after them.
        private mutating func text(_ length: Int) throws(Failure) -> String {
            let raw = try take(length)
            guard try take(1).first == 0, !raw.contains(0) else { throw .malformed("a string without its nul") }
            guard let text = String(validating: raw, as: UTF8.self) else { throw .malformed("a string not UTF-8") }
            return text
        }
    }
}
