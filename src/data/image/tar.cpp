#include "data/image/tar.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::image {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kMaxNameRecord = int64_t{1} << 20;

int64_t padded(int64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// Octal, or GNU base-256 when the top bit of the first byte is set.
bool parse_number(const unsigned char* p, size_t n, int64_t* out) {
  int64_t v = 0;
  if (p[0] & 0x80) {
    for (size_t i = 1; i < n; ++i) {
      if (v > (int64_t{1} << 47)) return false;  // over 2^55 bytes: not a real size
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i, any = true) v = v * 8 + (p[i] - '0');
  *out = v;
  return any;
}

// "LEN key=value\n" records; returns the value of `path`, if any.
std::string pax_path(const std::string& records) {
  size_t at = 0;
  while (at < records.size()) {
    const size_t space = records.find(' ', at);
    if (space == std::string::npos) break;
    long long len = 0;
    if (!parse_int(records.substr(at, space - at), &len) || len <= 0) break;
    const std::string record = records.substr(space + 1, at + len - space - 2);
    if (record.rfind("path=", 0) == 0) return record.substr(5);
    at += static_cast<size_t>(len);
  }
  return {};
}

}  // namespace

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool TarReader::next(TarEntry& entry) {
  std::string long_name;
  while (at_ + kBlock <= end_) {
    unsigned char h[kBlock];
    file_.pread_exact(h, kBlock, at_);
    if (std::all_of(h, h + kBlock, [](unsigned char c) { return c == 0; })) return false;
    int64_t checksum = 0, size = 0;
    unsigned sum = 0;
    for (int64_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    if (!parse_number(h + 148, 8, &checksum) || checksum != sum ||
        !parse_number(h + 124, 12, &size)) {
      throw DataError(cat("'", file_.path(), "': corrupt tar header at offset ", at_,
                          " (bad checksum or size); is the archive complete?"));
    }
    const char* c = reinterpret_cast<const char*>(h);
    const char type = c[156];
    const int64_t data = at_ + kBlock;
    if (data + size > end_) {
      throw DataError(cat("'", file_.path(), "': tar member at offset ", at_, " needs ", size,
                          " bytes past the end of the archive (truncated?)"));
    }
    at_ = data + padded(size);
    if (type == 'L' || type == 'x') {  // the next member's name
      if (size > kMaxNameRecord) {
        throw DataError(cat("'", file_.path(), "': tar name record at offset ", data - kBlock,
                            " is ", size, " bytes (over ", kMaxNameRecord, "); corrupt archive?"));
      }
      std::string text(static_cast<size_t>(size), '\0');
      file_.pread_exact(text.data(), text.size(), data);
      long_name = type == 'L' ? field(text.data(), text.size()) : pax_path(text);
      continue;
    }
    if (type == 'g') continue;  // global pax header
    entry.type = type;
    entry.offset = data;
    entry.size = size;
    if (!long_name.empty()) {
      entry.name = long_name;
    } else {
      const std::string prefix = std::memcmp(c + 257, "ustar", 5) == 0 ? field(c + 345, 155) : "";
      entry.name = prefix.empty() ? field(c, 100) : prefix + "/" + field(c, 100);
    }
    return true;
  }
  return false;
}

}  // namespace dtrain::image
