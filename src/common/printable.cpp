#include "common/printable.h"

namespace dtrain {

std::string printable(std::string_view text, size_t max) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += {'\\', 'x', digits[c >> 4], digits[c & 15]};
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace dtrain
