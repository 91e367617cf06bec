import CHaulSystem
import Foundation

/// Reads an XML document's elements and text in order with libxml2's pull parser, which is
/// loaded the first time a document is read (a program that reads none never loads libxml2,
/// nor the ICU and liblzma it brings).
///
/// Nothing is fetched, no DTD is read and no entity is expanded: a document with a document
/// type declaration is refused, so neither external nor recursive entities can reach the
/// reader's caller.
enum XMLPullReader {
    /// One step through the document.
    enum Node {
        /// An element opens; ``Place/attribute(_:)`` reads its attributes.
        case start(name: String, namespace: String?)
        /// Text or CDATA inside the current element (one element's text may come in parts).
        case text(String)
        /// An element closes (also reported for an empty element, `<a/>`).
        case end(name: String)
    }

    /// Why a document could not be read.
    enum Failure: Error, Equatable {
        /// No libxml2 could be loaded.
        case unavailable
        /// The document is not well-formed XML; the parser stopped at `line`.
        case notWellFormed(line: Int)
        /// The document declares a document type (`<!DOCTYPE`), at `line`.
        case documentType(line: Int)
    }

    /// Where the reader is, while `visit` looks at a node.
    struct Place {
        fileprivate let reader: OpaquePointer

        /// The value of an attribute (without a namespace) of the element a `.start` opens.
        func attribute(_ name: String) -> String? {
            guard let value = chaul_xml_attribute(reader, name) else { return nil }
            defer { free(value) }
            return String(cString: value)
        }

        /// The line of the document the parser is at.
        var line: Int { Int(chaul_xml_line(reader)) }
    }

    /// Reads `data`, calling `visit` for each node in document order until it returns false.
    static func read(_ data: Data, visit: (Node, Place) -> Bool) throws(Failure) {
        guard chaul_xml_load() == 0 else { throw .unavailable }
        guard data.count <= Int(Int32.max) else { throw .notWellFormed(line: 1) }
        let failure: Failure? = data.withUnsafeBytes { bytes -> Failure? in
            let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self)
            // An empty document is not well-formed; libxml2 wants a non-null pointer regardless.
            guard let base, let reader = chaul_xml_open(base, Int32(bytes.count)) else {
                return .notWellFormed(line: 1)
            }
            defer { chaul_xml_close(reader) }
            return walk(reader, visit: visit)
        }
        if let failure { throw failure }
    }

    private static func walk(_ reader: OpaquePointer, visit: (Node, Place) -> Bool) -> Failure? {
        let place = Place(reader: reader)
        while true {
            switch chaul_xml_read(reader) {
            case 1: break
            case 0: return nil
            default: return .notWellFormed(line: Int(chaul_xml_line(reader)))
            }
            switch Int(chaul_xml_node_type(reader)) {
            case CHAUL_XML_ELEMENT:
                let name = text(chaul_xml_local_name(reader)) ?? ""
                guard visit(.start(name: name, namespace: text(chaul_xml_namespace(reader))), place) else {
                    return nil
                }
                if chaul_xml_is_empty_element(reader) == 1, !visit(.end(name: name), place) { return nil }
            case CHAUL_XML_END_ELEMENT:
                guard visit(.end(name: text(chaul_xml_local_name(reader)) ?? ""), place) else { return nil }
            case CHAUL_XML_TEXT, CHAUL_XML_CDATA:
                guard visit(.text(text(chaul_xml_value(reader)) ?? ""), place) else { return nil }
            case CHAUL_XML_DOCUMENT_TYPE, CHAUL_XML_ENTITY_REFERENCE:
                return .documentType(line: Int(chaul_xml_line(reader)))
            default:
                // Comments, processing instructions, whitespace between elements.
                continue
            }
        }
    }

    private static func text(_ pointer: UnsafePointer<CChar>?) -> String? {
        pointer.map { String(cString: $0) }
    }
}
