#pragma once
// File descriptors and the line relay that re-emits a worker's output on the
// launcher's stdout/stderr, one prefixed line at a time.

#include <string>
#include <string_view>

#include "common/fd.h"

namespace dtrain::detail {

struct Pipe {
  Fd read;
  Fd write;
};

/// A close-on-exec pipe. Throws Error on failure.
Pipe make_pipe();

/// Opens (creating or truncating) a close-on-exec file for writing. Throws
/// Error naming the path.
Fd open_log_file(const std::string& path);

/// Splits a byte stream into lines and writes each to `dest_fd` as
/// prefix + line + "\n" (and, unprefixed, to a log file when given). Lines are
/// written whole, so lines of different relays interleave but never mix. A
/// line longer than kMaxLine is cut into several. After a write error the
/// destination is dropped and input is discarded. Not thread-safe.
class LineRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  /// `dest_fd` is borrowed; `log` is owned (may be invalid: no log file).
  LineRelay(std::string prefix, int dest_fd, Fd log = Fd());

  /// Appends `data` and writes every completed line.
  void feed(std::string_view data);
  /// Writes a pending partial line, followed by a newline.
  void finish();

 private:
  void emit(std::string_view line, std::string& out, std::string& raw);
  void flush(const std::string& out, const std::string& raw);

  std::string prefix_;
  int dest_fd_;
  Fd log_;
  std::string pending_;
};

}  // namespace dtrain::detail
