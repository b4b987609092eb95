#pragma once
// File descriptors and the line relay that re-emits a worker's output on the
// launcher's stdout/stderr, one prefixed line at a time.

#include <string>
#include <string_view>

namespace dtrain::detail {

/// Owns a file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read;
  Fd write;
};

/// A close-on-exec pipe. Throws Error on failure.
Pipe make_pipe();

/// Opens (creating or truncating) a close-on-exec file for writing. Throws
/// Error naming the path.
Fd open_log_file(const std::string& path);

/// Writes all of `data` to `fd`, retrying on EINTR and short writes and
/// waiting (bounded) when `fd` is non-blocking and full. Returns false when the
/// descriptor is broken (closed pipe, full disk) or stays full too long.
bool write_all(int fd, std::string_view data);

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
