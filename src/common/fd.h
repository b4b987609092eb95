#pragma once
// File descriptors owned RAII-style, and a write that finishes or says why
// not. Torch-free: the launcher, the checkpoint writer and the error records
// all use these.

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
  /// Gives up ownership and returns the descriptor.
  int release();
  /// Closes the owned descriptor (if any) and takes `fd`.
  void reset(int fd = -1);
  /// Closes now and returns close()'s result: it reports deferred write
  /// errors (NFS, full disk), so writers that care check it.
  int close();

 private:
  int fd_ = -1;
};

/// Writes all of `data` to `fd`, retrying on EINTR and short writes and
/// waiting (bounded) when `fd` is non-blocking and full. Returns false when the
/// descriptor is broken (closed pipe, full disk) or stays full too long.
bool write_all(int fd, std::string_view data);

}  // namespace dtrain::detail
