#include "data/image/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
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
