import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Hummingbird
import NIOCore
import NIOFoundationCompat

/// Request bodies: read with a size limit, decoded strictly, and every failure a sentence
/// that names the field (`field 'downloads[0].url' is missing`).
enum RequestBody {
    /// Reads a JSON body of at most ``APIFailure/maxBodySize`` as `T`, refusing a field `T`
    /// does not know and naming the field in every failure.
    static func decode<T: Decodable>(
        _ type: T.Type,
        from request: Request,
        context: APIContext
    ) async throws -> T {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: APIFailure.maxBodySize)
        } catch is NIOTooManyBytesError {
            throw BodyTooLarge()
        }
        let data = Data(buffer: body)
        let value: T
        do {
            value = try HaulJSON.decoder.decode(T.self, from: data)
        } catch let error as DecodingError {
            throw HaulError(.invalidArgument, "Invalid request body: \(describe(error))")
        } catch {
            throw HaulError(.invalidArgument, "Invalid request body: it is not JSON")
        }
        if let unknown = unknownField(in: data, decodedAs: value) {
            // A misspelt field would otherwise be ignored without a word.
            throw HaulError(.invalidArgument, "Invalid request body: field '\(unknown)' is not one the API knows")
        }
        return value
    }

    /// The first field of `data` that decoding `T` did not use, found by encoding what was
    /// decoded and looking for each given field in the result. A field given as null (the
    /// same as leaving it out) is looked for among the properties of the decoded value
    /// instead, so `{"deleteFiles": null}` is fine and `{"": null}` is not. The decoded value
    /// is reflected only down to such a null: a body of thousands of downloads without one
    /// is checked by the two JSON trees alone.
    ///
    /// A long array of alike elements (a body of thousands of downloads) is checked by one
    /// element of each shape (``BodyShapes``): the body with the others left out is decoded
    /// again and checked, and a field found is named at its place in the whole body.
    static func unknownField<T: Decodable>(in data: Data, decodedAs value: T) -> String? {
        guard let given = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) else {
            return nil
        }
        var shapes = BodyShapes()
        let reduced = shapes.reduce(given)
        if shapes.reducedAny,
            let reducedData = try? JSONSerialization.data(withJSONObject: reduced, options: [.fragmentsAllowed]),
            let reducedValue = try? HaulJSON.decoder.decode(T.self, from: reducedData)
        {
            return unknownField(given: reduced, decodedAs: reducedValue).map(shapes.originalPath)
        }
        return unknownField(given: given, decodedAs: value)
    }

    private static func unknownField<T: Decodable>(given: Any, decodedAs value: T) -> String? {
        guard let encodable = value as? any Encodable,
            let encoded = try? HaulJSON.encoder().encode(encodable),
            let used = try? JSONSerialization.jsonObject(with: encoded, options: [.fragmentsAllowed])
        else { return nil }
        func walk(_ given: Any, _ used: Any, _ decoded: Reflected, _ path: String) -> String? {
            if let given = given as? [String: Any] {
                let used = used as? [String: Any] ?? [:]
                for key in given.keys.sorted() {
                    let field = path.isEmpty ? key : path + "." + key
                    if given[key] is NSNull {
                        if used[key] == nil && !properties(of: decoded.value).contains(key) { return field }
                        continue
                    }
                    guard let inner = used[key] else { return field }
                    let child = Reflected { property(key, of: decoded.value) }
                    if let unknown = walk(given[key]!, inner, child, field) { return unknown }
                }
            } else if let given = given as? [Any], let used = used as? [Any] {
                let elements = Reflected {
                    unwrapped(decoded.value).map { Mirror(reflecting: $0).children.map(\.value) }
                }
                for (index, element) in given.enumerated() where index < used.count {
                    let decodedElement = Reflected {
                        (elements.value as? [Any]).flatMap { index < $0.count ? $0[index] : nil }
                    }
                    if let unknown = walk(element, used[index], decodedElement, path + "[\(index)]") { return unknown }
                }
            }
            return nil
        }
        return walk(given, used, Reflected { value }, "")
    }

    /// A part of the decoded value, reflected the first time it is asked for.
    private final class Reflected {
        private let reflect: () -> Any?
        private(set) lazy var value: Any? = reflect()

        init(_ reflect: @escaping () -> Any?) { self.reflect = reflect }
    }

    /// `value` without its Optional wrapping; nil for nil.
    private static func unwrapped(_ value: Any?) -> Any? {
        guard let value else { return nil }
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return unwrapped(mirror.children.first?.value)
    }

    /// The stored properties of a decoded value (the API's bodies use their names as keys).
    private static func properties(of value: Any?) -> Set<String> {
        guard let value = unwrapped(value) else { return [] }
        return Set(Mirror(reflecting: value).children.compactMap(\.label))
    }

    private static func property(_ name: String, of value: Any?) -> Any? {
        guard let value = unwrapped(value) else { return nil }
        return Mirror(reflecting: value).children.first { $0.label == name }?.value
    }

    /// A decoding failure as a sentence naming the field, e.g. `field 'downloads[0].url' is missing`.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ last: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (last.map { [$0] } ?? [])
            var text = ""
            for key in keys {
                if let index = key.intValue {
                    text += "[\(index)]"
                } else {
                    text += (text.isEmpty ? "" : ".") + key.stringValue
                }
            }
            return text.isEmpty ? "the body" : "field '\(text)'"
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context, key)) is missing"
        case .typeMismatch(let type, let context): return "\(path(context)) must be \(typeName(type))"
        case .valueNotFound(let type, let context): return "\(path(context)) must be \(typeName(type)), not null"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "it is not valid JSON, or a number in it does not fit in 64 bits" }
            // Foundation's words for a string that is not a UUID.
            if context.debugDescription.contains("UUID") { return "\(path(context)) must be a task id (a UUID)" }
            return "\(path(context)) has an invalid value"
        @unknown default: return "it does not match the expected shape"
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int64.Type: "a whole number that fits in 64 bits"
        case is [Any].Type: "an array"
        case is [String: Any].Type: "a JSON object"
        default: "a \(String(describing: type).lowercased())"
        }
    }
}
