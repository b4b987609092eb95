#pragma once
// Small string helpers shared by every component.

#include <charconv>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dtrain {

namespace detail {

// Note [cat without a stream]
// cat() builds every error message and, in the S3 client, several strings
// of each request (thousands a second). An ostringstream costs an
// allocation and a locale lookup before the first character, so when every
// argument is text, a char or an integer (not bool, not a character type
// other than char), the pieces are appended directly: the same characters
// a stream in the "C" locale writes. Anything else (floating point,
// manipulators such as std::hex, types with their own operator<<) goes
// through one stream, as before, so the manipulators keep their effect on
// the arguments after them.
template <typename T>
inline constexpr bool kCatText =
    std::is_convertible_v<const T&, std::string_view> && !std::is_pointer_v<std::decay_t<T>>;
template <typename T>
inline constexpr bool kCatInteger =
    std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, signed char> &&
    !std::is_same_v<T, unsigned char> && !std::is_same_v<T, wchar_t> &&
    !std::is_same_v<T, char16_t> && !std::is_same_v<T, char32_t>;
template <typename T>
inline constexpr bool kCatCString = std::is_same_v<T, const char*> || std::is_same_v<T, char*>;
template <typename T>
inline constexpr bool kCatCharArray =
    std::is_array_v<T>&& std::is_same_v<std::remove_cv_t<std::remove_extent_t<T>>, char>;
template <typename T>
inline constexpr bool kCatDirect =
    kCatText<T> || kCatCString<T> || kCatCharArray<T> || kCatInteger<T>;

template <typename T>
void cat_append(std::string& out, const T& value) {
  if constexpr (kCatCharArray<T>) {
    out.append(value);  // up to the first NUL, as a stream writes it
  } else if constexpr (kCatCString<T>) {
    if (value) out.append(value);  // a stream writes nothing for a null pointer
  } else if constexpr (kCatText<T>) {
    out.append(std::string_view(value));
  } else if constexpr (std::is_same_v<T, char>) {
    out.push_back(value);
  } else {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    out.append(digits, end);
  }
}

}  // namespace detail

/// Concatenates the streamed form of every argument: cat("rank ", 3) == "rank 3".
template <typename... Args>
std::string cat(const Args&... args) {
  if constexpr ((detail::kCatDirect<Args> && ...)) {
    std::string out;
    (detail::cat_append(out, args), ...);
    return out;
  } else {
    std::ostringstream out;
    (out << ... << args);
    return out.str();
  }
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
