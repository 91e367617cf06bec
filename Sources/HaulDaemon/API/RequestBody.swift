import Foundation
import Haul
import HaulWire
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
    /// decoded and looking for each given field (other than null ones) in the result.
    static func unknownField<T: Decodable>(in data: Data, decodedAs value: T) -> String? {
        guard let encodable = value as? any Encodable,
            let encoded = try? HaulJSON.encoder().encode(encodable),
            let given = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]),
            let used = try? JSONSerialization.jsonObject(with: encoded, options: [.fragmentsAllowed])
        else { return nil }
        func walk(_ given: Any, _ used: Any, _ path: String) -> String? {
            if let given = given as? [String: Any] {
                let used = used as? [String: Any] ?? [:]
                for key in given.keys.sorted() where !(given[key] is NSNull) {
                    let field = path.isEmpty ? key : path + "." + key
                    guard let inner = used[key] else { return field }
                    if let unknown = walk(given[key]!, inner, field) { return unknown }
                }
            } else if let given = given as? [Any], let used = used as? [Any] {
                for (index, element) in given.enumerated() where index < used.count {
                    if let unknown = walk(element, used[index], path + "[\(index)]") { return unknown }
                }
            }
            return nil
        }
        return walk(given, used, "")
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
