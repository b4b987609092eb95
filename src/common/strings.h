#pragma once
// Small string helpers shared by every component.

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

/// Concatenates the streamed form of every argument: cat("rank ", 3) == "rank 3".
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

/// The text up to the first newline (c10 errors append multi-line backtraces).
std::string first_line(std::string_view text);

/// Splits on `sep`, keeping empty fields.
std::vector<std::string> split(std::string_view text, char sep);

/// Joins with `sep`.
std::string join(const std::vector<std::string>& parts, std::string_view sep);

/// Parses a whole base-10 integer; false on junk, overflow or empty input.
bool parse_int(std::string_view text, long long* out);

/// Parses a whole floating-point number; false on junk or empty input.
bool parse_double(std::string_view text, double* out);

}  // namespace dtrain
