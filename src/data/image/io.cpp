#include "data/image/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::image {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

File File::open_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(cat("cannot open '", path, "': ", errno_text()));
  return File(fd, path);
}

File File::open_if_exists(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return File();
  if (fd < 0) throw DataError(cat("cannot open '", path, "': ", errno_text()));
  return File(fd, path);
}

File File::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw DataError(cat("cannot create '", path, "': ", errno_text()));
  return File(fd, path);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

int64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) throw DataError(cat("cannot stat '", path_, "': ", errno_text()));
  return st.st_size;
}

void File::pread_exact(void* dst, size_t length, int64_t offset) const {
  auto* p = static_cast<char*>(dst);
  while (length > 0) {
    const ssize_t n = ::pread(fd_, p, length, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(cat("cannot read '", path_, "' at ", offset, ": ", errno_text()));
    if (n == 0) {
      throw DataError(cat("'", path_, "' ends early: ", length, " bytes missing at offset ", offset,
                          " (truncated file?)"));
    }
    p += n, length -= static_cast<size_t>(n), offset += n;
  }
}

void ByteSource::pread_spans(const std::vector<ReadSpan>& spans, int64_t offset) const {
  size_t total = 0;
  for (const ReadSpan& s : spans) total += s.length;
  const std::unique_ptr<uint8_t[]> all(new uint8_t[total]);  // not zero-filled
  pread_exact(all.get(), total, offset);
  const uint8_t* from = all.get();
  for (const ReadSpan& s : spans) {
    if (s.dst != nullptr) std::memcpy(s.dst, from, s.length);
    from += s.length;
  }
}

void File::pread_spans(const std::vector<ReadSpan>& spans, int64_t offset) const {
  // Dropped spans all land in one scratch buffer of the largest one's size.
  size_t dropped = 0;
  for (const ReadSpan& s : spans) {
    if (s.dst == nullptr) dropped = std::max(dropped, s.length);
  }
  std::vector<uint8_t> scratch(dropped);
  std::vector<iovec> iov;
  iov.reserve(spans.size());
  for (const ReadSpan& s : spans) {
    if (s.length > 0) iov.push_back({s.dst != nullptr ? s.dst : scratch.data(), s.length});
  }
  size_t first = 0;  // iov[first..] still to read; a short read trims iov[first]
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = ::preadv(fd_, iov.data() + first, count, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(cat("cannot read '", path_, "' at ", offset, ": ", errno_text()));
    if (n == 0) {
      size_t missing = 0;
      for (size_t k = first; k < iov.size(); ++k) missing += iov[k].iov_len;
      throw DataError(cat("'", path_, "' ends early: ", missing, " bytes missing at offset ",
                          offset, " (truncated file?)"));
    }
    offset += n;
    for (auto left = static_cast<size_t>(n); left > 0;) {
      const size_t take = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      left -= take;
      if (iov[first].iov_len == 0) ++first;
    }
  }
}

void File::write_all(const void* src, size_t length) {
  auto* p = static_cast<const char*>(src);
  while (length > 0) {
    const ssize_t n = ::write(fd_, p, length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(cat("cannot write '", path_, "': ", errno_text()));
    p += n, length -= static_cast<size_t>(n);
  }
}

void read_file(const std::string& path, std::vector<uint8_t>& out) {
  File f = File::open_read(path);
  out.resize(static_cast<size_t>(f.size()));
  f.pread_exact(out.data(), out.size(), 0);
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw DataError(cat("cannot create directory '", dir, "': ", ec.message()));
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace dtrain::image
