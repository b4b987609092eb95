#pragma once
// A reader of tar archives (POSIX ustar, GNU long names, pax path records)
// over a byte range of a file or object, so tars nested in tars are read in
// place. Sizes are bounded: a member past the archive's end, a header with a
// bad checksum, or a name record over 1 MiB is a DataError naming the file
// and the header's offset.

#include <cstdint>
#include <string>

#include "data/image/io.h"

namespace dtrain::image {

struct TarEntry {
  std::string name;    // full path inside the archive
  char type = '0';     // '0' regular file, '5' directory, ...
  int64_t offset = 0;  // where the data starts in the file
  int64_t size = 0;
  bool is_file() const { return type == '0' || type == '\0' || type == '7'; }
};

/// Iterates the members of the archive in file[base, base + length). Does not
/// own the file, which must outlive it. Not thread-safe.
class TarReader {
 public:
  TarReader(const ByteSource& file, int64_t base, int64_t length)
      : file_(file), at_(base), end_(base + length) {}
  /// The next member (metadata records consumed); false at the end. Throws
  /// DataError naming the file and offset for a corrupt header.
  bool next(TarEntry& entry);

 private:
  const ByteSource& file_;
  int64_t at_;
  int64_t end_;
};

/// The last path component: "a/b/c.JPEG" -> "c.JPEG".
std::string base_name(const std::string& path);

}  // namespace dtrain::image
