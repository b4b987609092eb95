#include "objstore/xml.h"

#include <expat.h>

#include <memory>

namespace dtrain::objstore {

// Note [XML through expat]
// S3 answers ListObjectsV2, errors and multipart uploads in XML, STS its
// credentials. libexpat (Debian's libexpat1, maintained, no dependencies,
// SAX-style) parses; this file only builds a tree of element names and
// texts. Documents are bounded by the response (a listing page is at most
// 1,000 keys) and by a nesting limit, so a hostile endpoint cannot make the
// tree unbounded. expat does not load external entities unless asked, and
// 2.4+ limits entity expansion ("billion laughs").

namespace {

constexpr size_t kMaxDepth = 64;

struct Builder {
  XmlElement root;
  std::vector<XmlElement*> stack;
  bool too_deep = false;
  XML_Parser parser = nullptr;
};

std::string local_name(const char* name) {
  std::string_view view(name);
  auto colon = view.rfind(':');
  return std::string(colon == std::string_view::npos ? view : view.substr(colon + 1));
}

void on_start(void* user, const XML_Char* name, const XML_Char** /*attributes*/) {
  auto* b = static_cast<Builder*>(user);
  if (b->stack.size() >= kMaxDepth) {
    b->too_deep = true;
    XML_StopParser(b->parser, XML_FALSE);
    return;
  }
  if (b->stack.empty()) {
    b->root.name = local_name(name);
    b->stack.push_back(&b->root);
    return;
  }
  XmlElement* parent = b->stack.back();
  parent->children.push_back(XmlElement{local_name(name), {}, {}});
  b->stack.push_back(&parent->children.back());
}

void on_end(void* user, const XML_Char* /*name*/) {
  auto* b = static_cast<Builder*>(user);
  if (!b->stack.empty()) b->stack.pop_back();
}

void on_text(void* user, const XML_Char* text, int length) {
  auto* b = static_cast<Builder*>(user);
  if (!b->stack.empty()) b->stack.back()->text.append(text, static_cast<size_t>(length));
}

struct ParserDeleter {
  void operator()(XML_ParserStruct* parser) const { XML_ParserFree(parser); }
};

}  // namespace

const XmlElement* XmlElement::child(std::string_view child_name) const {
  for (const auto& c : children) {
    if (c.name == child_name) return &c;
  }
  return nullptr;
}

std::string XmlElement::child_text(std::string_view child_name) const {
  const XmlElement* c = child(child_name);
  return c ? c->text : std::string();
}

std::vector<const XmlElement*> XmlElement::all(std::string_view child_name) const {
  std::vector<const XmlElement*> out;
  for (const auto& c : children) {
    if (c.name == child_name) out.push_back(&c);
  }
  return out;
}

std::optional<XmlElement> parse_xml(std::string_view document) {
  std::unique_ptr<XML_ParserStruct, ParserDeleter> parser(XML_ParserCreate("UTF-8"));
  if (!parser) return std::nullopt;
  Builder builder;
  builder.parser = parser.get();
  XML_SetUserData(parser.get(), &builder);
  XML_SetElementHandler(parser.get(), on_start, on_end);
  XML_SetCharacterDataHandler(parser.get(), on_text);
  if (XML_Parse(parser.get(), document.data(), static_cast<int>(document.size()), XML_TRUE) !=
          XML_STATUS_OK ||
      builder.too_deep || builder.root.name.empty()) {
    return std::nullopt;
  }
  return std::move(builder.root);
}

std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace dtrain::objstore
