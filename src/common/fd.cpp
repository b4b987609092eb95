#include "common/fd.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace dtrain::detail {
namespace {

/// How long write_all waits for a full non-blocking descriptor to drain.
constexpr int kWriteStallTimeoutMs = 10000;

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Fd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int Fd::close() {
  const int rc = fd_ >= 0 ? ::close(fd_) : 0;
  fd_ = -1;
  return rc;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, kWriteStallTimeoutMs) == 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace dtrain::detail
