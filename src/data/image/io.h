#pragma once
// File access for the image pipeline: RAII descriptors, positional reads.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::image {

/// An open file descriptor, closed on destruction. pread() is safe to call
/// from many threads at once.
class File {
 public:
  File() = default;
  /// Opens `path` read-only; throws DataError naming it on failure.
  static File open_read(const std::string& path);
  /// Creates or truncates `path` for writing; throws DataError naming it.
  static File create(const std::string& path);
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  /// Size in bytes (fstat).
  int64_t size() const;
  /// Reads exactly `length` bytes at `offset`; throws DataError on a short read.
  void pread_exact(void* dst, size_t length, int64_t offset) const;
  /// Appends all of `length` bytes; throws DataError on failure.
  void write_all(const void* src, size_t length);
  const std::string& path() const { return path_; }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

/// Reads a whole file into `out` (reusing its buffer); throws DataError.
void read_file(const std::string& path, std::vector<uint8_t>& out);

/// Creates `dir` and its parents; throws DataError naming it on failure.
void make_dirs(const std::string& dir);

/// True when `path` is an existing directory (symlinks followed).
bool is_directory(const std::string& path);

}  // namespace dtrain::image
