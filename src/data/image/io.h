#pragma once
// File access for the image pipeline: RAII descriptors, positional reads.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::image {

/// Part of a read (ByteSource::pread_spans): `length` bytes to `dst`; with
/// dst null they are read and dropped.
struct ReadSpan {
  void* dst = nullptr;
  size_t length = 0;
};

/// Bytes readable at any offset -- a local file (File) or an object in an
/// object store -- so readers of containers (tar) work over either.
/// pread_exact() is safe to call from many threads at once.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Size in bytes.
  virtual int64_t size() const = 0;
  /// Reads exactly `length` bytes at `offset`; throws DataError naming
  /// path() on a short read.
  virtual void pread_exact(void* dst, size_t length, int64_t offset) const = 0;
  /// Reads the spans' bytes back to back from `offset` (span k's follow
  /// span k - 1's), with the errors of pread_exact. This default reads
  /// them all into one buffer and copies each span out; File (preadv) and
  /// S3 objects (from the receive buffer) place each byte once.
  virtual void pread_spans(const std::vector<ReadSpan>& spans, int64_t offset) const;
  /// Where the bytes come from, for messages.
  virtual const std::string& path() const = 0;
  /// The object's ETag (reads are pinned to it); "" for local files.
  virtual std::string etag() const { return ""; }
};

/// An open file descriptor, closed on destruction. pread() is safe to call
/// from many threads at once.
class File : public ByteSource {
 public:
  File() = default;
  /// Opens `path` read-only; throws DataError naming it on failure.
  static File open_read(const std::string& path);
  /// Opens `path` read-only, or returns an unopened File when it does not
  /// exist; throws DataError naming it for any other failure.
  static File open_if_exists(const std::string& path);
  /// Creates or truncates `path` for writing; throws DataError naming it.
  static File create(const std::string& path);
  ~File() override;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  /// Size in bytes (fstat).
  int64_t size() const override;
  /// Reads exactly `length` bytes at `offset`; throws DataError on a short read.
  void pread_exact(void* dst, size_t length, int64_t offset) const override;
  /// With preadv(2): each byte straight into its span.
  void pread_spans(const std::vector<ReadSpan>& spans, int64_t offset) const override;
  /// Appends all of `length` bytes; throws DataError on failure.
  void write_all(const void* src, size_t length);
  const std::string& path() const override { return path_; }
  /// False for a default-made File or open_if_exists() of a missing path.
  bool is_open() const { return fd_ >= 0; }
  /// The descriptor (-1 when not open); the File still owns it.
  int fd() const { return fd_; }

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
