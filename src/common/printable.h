#pragma once
// Quoting bytes from outside (a store value, a zip entry name, a file's
// contents) into one-line error messages.

#include <cstddef>
#include <string>
#include <string_view>

namespace dtrain {

/// At most `max` bytes of `text`, control bytes, backslashes and bytes >= 0x7f
/// as \xNN, "..." when cut: a NUL would end what() early and a newline
/// would break the one-line rule.
std::string printable(std::string_view text, size_t max = 80);

}  // namespace dtrain
