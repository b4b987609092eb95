#pragma once
// A small element tree over libexpat, enough for S3's and STS's XML answers
// (Note [XML through expat] in xml.cpp).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::objstore {

struct XmlElement {
  /// The local name (any "prefix:" is dropped).
  std::string name;
  /// The concatenated character data directly inside this element.
  std::string text;
  std::vector<XmlElement> children;

  /// The first child named `name`, or nullptr.
  const XmlElement* child(std::string_view name) const;
  /// That child's text, or "" when there is none.
  std::string child_text(std::string_view name) const;
  /// Every child named `name`.
  std::vector<const XmlElement*> all(std::string_view name) const;
};

/// Parses a whole document; nullopt when it is not well-formed XML or nests
/// deeper than 64 levels.
std::optional<XmlElement> parse_xml(std::string_view document);

/// Escapes &, <, >, " and ' for element text.
std::string xml_escape(std::string_view text);

}  // namespace dtrain::objstore
