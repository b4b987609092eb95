#pragma once
// Where datasets live: local paths or s3://bucket/prefix, behind one small
// interface so every image source reads both (Note [Data locations]).

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/image/io.h"
#include "dtrain/data.h"

namespace dtrain {
class ProcessGroup;  // dtrain/comm.h
class S3Client;      // dtrain/object_store.h
}  // namespace dtrain

namespace dtrain::image {

class DataCache;  // data/image/cache.h

/// One file or object of a listing, named relative to the listed folder.
struct Listed {
  std::string name;  // "n01440764/n01440764_10026.JPEG"
  int64_t size = 0;
  std::string etag;  // S3's, quoted; empty for local files
};

/// Opens, reads, lists and writes local paths and `s3://bucket/key`
/// locations alike. Makes one S3Client (credentials, region and endpoint as
/// AWS's SDKs resolve them, s3_options_from_env) on the first s3:// use and
/// shares it with every ByteSource it opens. Thread-safe, except while it
/// shares with a group (share_with): then list(), is_directory() and
/// once_per_group() are collectives, called by one thread of each rank.
class Storage {
 public:
  /// With `cache.dir` set, objects read from S3 go through a DataCache
  /// (Note [Data cache]); throws InvalidArgument when the directory cannot
  /// be made or written. Local paths are never cached.
  explicit Storage(const DataCacheOptions& cache = {});
  ~Storage();
  /// True for "s3://..."; false for a local path; InvalidArgument for any
  /// other "scheme://" (S3Uri::is_s3_location).
  static bool is_s3(const std::string& location);
  /// A local directory, or an S3 prefix with at least one object under
  /// "location/".
  bool is_directory(const std::string& location);
  /// From now on rank 0 of `group` lists and probes s3:// locations for
  /// every rank (Note [Shared listing]): list() and is_directory() of an
  /// s3:// location and once_per_group() become collectives over `group`,
  /// which every rank calls in the same order. Local paths are still listed
  /// by each rank. nullptr (or a group of one rank): each call answers here
  /// again. `group` must outlive its sharing; the registry shares only while
  /// open_dataset() runs.
  void share_with(const ProcessGroup* group);
  /// Rank 0's `produce()` on every rank of the shared group
  /// (share_from_rank0 in data/image/shared_listing.h); without one,
  /// `produce()` here. For what opening an s3:// dataset learns from S3.
  std::string once_per_group(const std::string& what, const std::function<std::string()>& produce);
  /// Opens a file or object for ranged reads (S3: a HEAD for size and ETag;
  /// every read then sends If-Match, so an object replaced while it is read
  /// fails instead of mixing two versions).
  std::unique_ptr<ByteSource> open(const std::string& location);
  /// As open(), with the size and ETag a listing already gave.
  std::unique_ptr<ByteSource> open(const std::string& location, const Listed& known);
  /// The whole file or object; throws DataError naming it. A non-empty
  /// `etag` (from a listing) is sent as If-Match. With a cache, an object
  /// with no `etag` given is asked for its ETag first (a HEAD).
  void read_all(const std::string& location, std::vector<uint8_t>& out,
                const std::string& etag = "");
  /// Everything under the folder or prefix, recursively, sorted by name.
  /// Throws DataError naming it when it cannot be listed. With a group
  /// (share_with), an s3:// prefix is listed by rank 0 and sent to the others.
  std::vector<Listed> list(const std::string& folder);
  /// Writes a whole file (temporary name, then rename) or object (one PUT,
  /// multipart when large; a reader never sees part of it).
  void write_all(const std::string& location, const void* data, size_t size);
  /// Creates a local directory and its parents; nothing for S3 (no folders).
  void make_dirs(const std::string& location);

 private:
  S3Client& s3();
  std::vector<Listed> list_s3(const std::string& folder);
  // Rank 0's answer on every rank (share_from_rank0 over the shared group);
  // empty while not sharing. Set by share_with(), defined with the
  // collective in shared_listing.cpp, so that this file needs no group.
  using Exchange =
      std::function<std::string(const std::string&, const std::function<std::string()>&)>;
  Exchange exchange();
  std::mutex mu_;
  Exchange exchange_;
  std::shared_ptr<S3Client> s3_;
  std::shared_ptr<DataCache> cache_;  // null: no cache
};

/// A ByteSource read front to back in large blocks (for indexing a remote
/// shard's tar headers with a few big GETs instead of one per header). Not
/// thread-safe; reads outside the current block fetch the block holding them.
class ReadAhead : public ByteSource {
 public:
  ReadAhead(const ByteSource& inner, int64_t block_bytes = int64_t{8} << 20)
      : inner_(inner), block_(block_bytes) {}
  int64_t size() const override { return inner_.size(); }
  void pread_exact(void* dst, size_t length, int64_t offset) const override;
  const std::string& path() const override { return inner_.path(); }

 private:
  const ByteSource& inner_;
  int64_t block_;
  mutable int64_t at_ = -1;
  mutable std::vector<uint8_t> buffer_;
};

}  // namespace dtrain::image
