#pragma once
// A node-local cache of objects read from S3 (DataCacheOptions; Note [Data
// cache] in cache.cpp): whole copies keyed by bucket, key and ETag.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "data/image/io.h"
#include "dtrain/data.h"

namespace dtrain::image {

/// Whole copies of S3 objects under DataCacheOptions::dir, bounded by
/// max_bytes (the least recently read copies are deleted first). Thread-safe;
/// the processes of one node may share a directory.
class DataCache {
 public:
  /// Makes the directory; throws InvalidArgument (validate()) when it cannot.
  explicit DataCache(DataCacheOptions options);

  /// Whether an object of `size` bytes is copied at all: it has an ETag and
  /// takes at most a quarter of max_bytes.
  bool admits(int64_t size, const std::string& etag) const;

  /// The copy of the object, opened, or an unopened File when there is none
  /// (a copy whose size is not `size`, when `size` >= 0, is deleted, not
  /// served). Marks the copy as just read.
  File find(const std::string& bucket, const std::string& key, const std::string& etag,
            int64_t size = -1) const;

  /// Reads the object into a new copy and opens it, unless another thread
  /// or process made the copy first (then opens that one), or it is not
  /// admitted (then returns an unopened File). `read(offset, dst, n)` fills
  /// `dst` with the object's bytes at `offset`, in order, in blocks of at
  /// most 8 MiB; its exceptions (the object's GETs) propagate and leave
  /// nothing behind. Never waits for another copier: while another thread
  /// or process copies the same object it returns an unopened File and sets
  /// `*busy` (try again later). Also returns an unopened File when no copy
  /// can be made (no room left, the cache's disk failing: named in one
  /// warning per cache); the caller then reads the object from S3.
  File fill(const std::string& bucket, const std::string& key, const std::string& etag,
            int64_t size, const std::function<void(int64_t, void*, size_t)>& read,
            bool* busy = nullptr) const;

  /// Bytes the copies and the copies being written take now (a scan).
  int64_t used_bytes() const;

  const DataCacheOptions& options() const { return options_; }

 private:
  std::string object_path(const std::string& hash) const;
  bool reserve(int64_t size) const;
  void release(int64_t size) const;
  int64_t scan_and_evict(int64_t need) const;
  void warn_once(const std::string& what) const;

  DataCacheOptions options_;
  std::string objects_, tmp_, lock_file_, bytes_file_;
  mutable std::atomic<bool> warned_{false};
  mutable std::atomic<uint64_t> next_tmp_{0};
};

}  // namespace dtrain::image
