#pragma once
// File descriptors and the line relay that re-emits a worker's output on the
// launcher's stdout/stderr, one prefixed line at a time.

#include <memory>
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

class LineRelay;

/// The line a terminal shows last, shared by the relays that write to it:
/// which one has a line drawn in place there (see LineRelay).
struct TerminalLine {
  LineRelay* drawn_by = nullptr;
};

/// Splits a byte stream into lines and writes each to `dest_fd` as
/// prefix + line + "\n" (and, unprefixed, to a log file when given). Lines are
/// written whole, so lines of different relays interleave but never mix. A
/// line longer than kMaxLine is cut into several. After a write error the
/// destination is dropped and input is discarded. Not thread-safe.
///
/// With a `terminal` (the destination is one), a carriage
/// return passes through as a terminal would show it: the text after it is
/// drawn at once as "\r" + prefix + text, without a newline, and drawn again
/// as it grows or is replaced by the next "\r"; the line that finally ends
/// with "\n" is written over it ("\r" + prefix + line + "\n"). So a
/// worker's progress line, redrawn in place, stays in place with its tag.
/// A redraw that ends inside an escape sequence waits for the rest of it. A
/// line or redraw from another relay on the same terminal first ends the line
/// drawn in place with "\n" (its next redraw starts on a line of its own),
/// so output of several workers never runs into one line.
/// The log file gets only the final lines (the text after their last "\r").
/// Without it, "\r" is an ordinary byte of the line.
class LineRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  /// `dest_fd` is borrowed; `log` is owned (may be invalid: no log file).
  LineRelay(std::string prefix, int dest_fd, Fd log = Fd(),
            std::shared_ptr<TerminalLine> terminal = nullptr);
  ~LineRelay();
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  /// Appends `data` and writes every completed line.
  void feed(std::string_view data);
  /// Writes a pending partial line, followed by a newline.
  void finish();

 private:
  void emit(std::string_view line, std::string& out, std::string& raw);
  void draw(std::string& out);
  /// Before writing to the terminal: ends another relay's line drawn in place.
  void take_terminal(std::string& out);
  void flush(const std::string& out, const std::string& raw);

  std::string prefix_;
  int dest_fd_;
  Fd log_;
  std::shared_ptr<TerminalLine> terminal_;  ///< null: "\r" is an ordinary byte
  std::string pending_;
  /// pending_ follows a "\r" of this line (with a terminal_ only).
  bool after_cr_ = false;
  /// A partial line of ours is on the destination, and how much of pending_ it shows
  /// (never half an escape sequence).
  bool drawn_ = false;
  size_t drawn_size_ = 0;
};

}  // namespace dtrain::detail
