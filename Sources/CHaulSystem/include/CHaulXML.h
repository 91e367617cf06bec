#ifndef CHAUL_XML_H
#define CHAUL_XML_H

// libxml2's pull parser (xmlTextReader), loaded with dlopen the first time a Metalink is read,
// so that a program that reads none never loads libxml2 nor what it brings (ICU, liblzma).
// The reader never fetches anything from the network, never loads a DTD and never replaces
// entities by their definitions; it prints nothing.

#include <stddef.h>

typedef struct chaul_xml_reader chaul_xml_reader;

/// The kinds of node chaul_xml_node_type reports (libxml2's xmlReaderTypes).
enum {
    CHAUL_XML_ELEMENT = 1,
    CHAUL_XML_TEXT = 3,
    CHAUL_XML_CDATA = 4,
    CHAUL_XML_ENTITY_REFERENCE = 5,
    CHAUL_XML_DOCUMENT_TYPE = 10,
    CHAUL_XML_END_ELEMENT = 15,
};

/// Loads libxml2 (once, thread-safe); 0, or -1 when no libxml2 can be loaded.
int chaul_xml_load(void);
/// A reader of `length` bytes at `data` (which must outlive it), or NULL when libxml2 is not
/// loaded or memory is short.
chaul_xml_reader *chaul_xml_open(const char *data, int length);
/// Frees a reader.
void chaul_xml_close(chaul_xml_reader *reader);
/// Moves to the next node: 1, 0 at the end of the document, -1 on an error.
int chaul_xml_read(chaul_xml_reader *reader);
/// The current node's kind (CHAUL_XML_…).
int chaul_xml_node_type(chaul_xml_reader *reader);
/// Whether the current element is empty (`<a/>`): no end element follows it.
int chaul_xml_is_empty_element(chaul_xml_reader *reader);
/// The current node's local name, namespace URI and text value; NULL when it has none. Valid
/// until the next call on the reader.
const char *chaul_xml_local_name(chaul_xml_reader *reader);
const char *chaul_xml_namespace(chaul_xml_reader *reader);
const char *chaul_xml_value(chaul_xml_reader *reader);
/// The value of the current element's attribute `name` (no namespace) as a string the caller
/// frees with free(3), or NULL when there is none.
char *chaul_xml_attribute(chaul_xml_reader *reader, const char *name);
/// The line of the document the parser is at.
int chaul_xml_line(chaul_xml_reader *reader);

#endif
