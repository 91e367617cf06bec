import Foundation

/// A request body (parsed JSON) with each long array cut down to one element of each shape —
/// the same keys, nested the same way, nulls where the others have nulls — for the check of
/// unknown fields (``RequestBody/unknownField(in:decodedAs:)``), whose answer depends on a
/// shape alone: a body of 5,000 downloads given alike is checked by one of them. Remembers
/// where each element kept was, to name a field at its place in the whole body.
struct BodyShapes {
    /// Arrays shorter than this are kept whole.
    static let longArray = 16

    /// For each array cut down (by its path in the cut-down body): the places in the whole
    /// body of the elements kept.
    private var kept: [String: [Int]] = [:]

    /// Whether any array was cut down.
    var reducedAny: Bool { !kept.isEmpty }

    /// `value` with its long arrays cut down.
    mutating func reduce(_ value: Any, path: String = "") -> Any {
        switch value {
        case let object as [String: Any]:
            var reduced: [String: Any] = [:]
            for (key, inner) in object {
                reduced[key] = reduce(inner, path: path.isEmpty ? key : path + "." + key)
            }
            return reduced
        case let array as [Any]:
            var places = Array(array.indices)
            if array.count >= Self.longArray {
                var seen: Set<Shape> = []
                places = array.indices.filter { seen.insert(Self.shape(of: array[$0])).inserted }
                if places.count < array.count { kept[path] = places }
            }
            return places.enumerated().map { index, place in reduce(array[place], path: path + "[\(index)]") }
        default:
            return value
        }
    }

    /// A field's path in the cut-down body (`downloads[1].tls.x`) as a path in the whole one.
    func originalPath(_ path: String) -> String {
        var original = ""
        var reducedPrefix = ""
        var rest = Substring(path)
        while let open = rest.firstIndex(of: "["), let close = rest[open...].firstIndex(of: "]") {
            let before = rest[..<open]
            original += before
            reducedPrefix += before
            let digits = rest[rest.index(after: open)..<close]
            if let index = Int(digits), let places = kept[reducedPrefix], index < places.count {
                original += "[\(places[index])]"
            } else {
                original += "[\(digits)]"
            }
            reducedPrefix += "[\(digits)]"
            rest = rest[rest.index(after: close)...]
        }
        return original + rest
    }

    /// An element's shape: its keys and each value's shape, nulls as such, the set of an
    /// array's shapes. Compared as values (a dictionary's keys in any order are the same
    /// keys), so no key can pass for another's text.
    indirect enum Shape: Hashable {
        case object([String: Shape])
        case array(Set<Shape>)
        case null
        case value
    }

    static func shape(of value: Any) -> Shape {
        switch value {
        case let object as [String: Any]: .object(object.mapValues(shape(of:)))
        case let array as [Any]: .array(Set(array.map(shape(of:))))
        case is NSNull: .null
        default: .value
        }
    }
}
