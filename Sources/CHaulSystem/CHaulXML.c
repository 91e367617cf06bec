#include "CHaulXML.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// libxml2's own prototypes, declared here so that building needs no libxml2 headers. These
// functions have kept their signatures since libxml2 2.6 (libxml2.so.2) and through 2.14
// (libxml2.so.16).
typedef void *xml_reader;
static struct {
    void (*init_parser)(void);
    xml_reader (*reader_for_memory)(const char *buffer, int size, const char *url, const char *encoding,
                                    int options);
    void (*free_reader)(xml_reader reader);
    int (*read)(xml_reader reader);
    int (*node_type)(xml_reader reader);
    int (*is_empty_element)(xml_reader reader);
    const unsigned char *(*local_name)(xml_reader reader);
    const unsigned char *(*namespace_uri)(xml_reader reader);
    const unsigned char *(*value)(xml_reader reader);
    int (*move_to_attribute)(xml_reader reader, const unsigned char *name);
    int (*move_to_element)(xml_reader reader);
    int (*line)(xml_reader reader);
} xml;
static int loaded = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

// XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NONET. Without XML_PARSE_NOENT and
// XML_PARSE_DTDLOAD, entities stay references and no external subset is read.
enum { reader_options = (1 << 5) | (1 << 6) | (1 << 11) };

static int bind_symbols(void *library) {
#define BIND(field, symbol)                                                                       \
    if (!(*(void **)&xml.field = dlsym(library, symbol))) return -1;
    BIND(init_parser, "xmlInitParser")
    BIND(reader_for_memory, "xmlReaderForMemory")
    BIND(free_reader, "xmlFreeTextReader")
    BIND(read, "xmlTextReaderRead")
    BIND(node_type, "xmlTextReaderNodeType")
    BIND(is_empty_element, "xmlTextReaderIsEmptyElement")
    BIND(local_name, "xmlTextReaderConstLocalName")
    BIND(namespace_uri, "xmlTextReaderConstNamespaceUri")
    BIND(value, "xmlTextReaderConstValue")
    BIND(move_to_attribute, "xmlTextReaderMoveToAttribute")
    BIND(move_to_element, "xmlTextReaderMoveToElement")
    BIND(line, "xmlTextReaderGetParserLineNumber")
#undef BIND
    return 0;
}

static void load(void) {
    static const char *const names[] = {"libxml2.so.2", "libxml2.so.16", "libxml2.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!library) continue;
        if (bind_symbols(library) == 0) {
            xml.init_parser();
            loaded = 0;
            return;
        }
        dlclose(library);
    }
}

int chaul_xml_load(void) {
    pthread_once(&once, load);
    return loaded;
}

chaul_xml_reader *chaul_xml_open(const char *data, int length) {
    if (chaul_xml_load() != 0) return NULL;
    return (chaul_xml_reader *)xml.reader_for_memory(data, length, NULL, NULL, reader_options);
}

void chaul_xml_close(chaul_xml_reader *reader) { xml.free_reader(reader); }
int chaul_xml_read(chaul_xml_reader *reader) { return xml.read(reader); }
int chaul_xml_node_type(chaul_xml_reader *reader) { return xml.node_type(reader); }
int chaul_xml_is_empty_element(chaul_xml_reader *reader) { return xml.is_empty_element(reader); }
const char *chaul_xml_local_name(chaul_xml_reader *reader) { return (const char *)xml.local_name(reader); }
const char *chaul_xml_namespace(chaul_xml_reader *reader) { return (const char *)xml.namespace_uri(reader); }
const char *chaul_xml_value(chaul_xml_reader *reader) { return (const char *)xml.value(reader); }
int chaul_xml_line(chaul_xml_reader *reader) { return xml.line(reader); }

char *chaul_xml_attribute(chaul_xml_reader *reader, const char *name) {
    if (xml.move_to_attribute(reader, (const unsigned char *)name) != 1) return NULL;
    const unsigned char *value = xml.value(reader);
    char *copy = value ? strdup((const char *)value) : strdup("");
    xml.move_to_element(reader);
    return copy;
}
