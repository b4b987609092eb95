// Local paths and s3:// locations for the image sources.
//
// Note [Data locations]
// Every dataset format reads through Storage, so a folder given as
// `s3://bucket/prefix` works wherever a local one does: ImageFolder (class
// folders become key prefixes, files ordered as os.walk orders them), packed
// shards (index.bin read whole, shards by ranged GETs of one image each),
// and WebDataset tar shards (indexed with a few large GETs per shard, then
// one ranged GET per image). Nothing is copied to disk unless a data cache
// is given (DataCacheOptions, Note [Data cache] in cache.cpp: then each
// object is copied whole at its first read and read locally after). The
// sources say they are remote(), so the loader issues the GETs from fetch
// threads of its own in the sampler's order, ahead of its decode threads
// (Note [Fetch ahead] in fetcher.cpp), bounded in requests, positions and
// bytes. Each rank reads only its own samples. Every GET of a listed object carries its
// ETag (If-Match): an object replaced during an epoch fails that read, which
// the loader handles as any unreadable image (named in a warning and
// replaced by another image of the batch; --strict: fatal).

#include "data/image/location.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/strings.h"
#include "data/image/cache.h"
#include "data/image/listing_codec.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "dtrain/object_store.h"

namespace dtrain::image {
namespace {

namespace fs = std::filesystem;

class S3Object : public ByteSource {
 public:
  S3Object(std::shared_ptr<S3Client> s3, S3Uri uri, int64_t size, std::string etag)
      : s3_(std::move(s3)),
        uri_(std::move(uri)),
        path_(uri_.str()),
        size_(size),
        etag_(std::move(etag)) {}
  int64_t size() const override { return size_; }
  void pread_exact(void* dst, size_t length, int64_t offset) const override {
    if (length == 0) return;
    check_range(length, offset);
    GetOptions g;
    g.offset = static_cast<uint64_t>(offset);
    g.length = length;
    g.if_match = etag_;
    // Straight into dst (Note [Body into place] in src/http/http.cpp).
    const GetResult r = s3_->get_object(uri_.bucket, uri_.key, g, dst);
    check_got(r.bytes, length, offset);
  }
  void pread_spans(const std::vector<ReadSpan>& spans, int64_t offset) const override {
    std::vector<GetSpan> into;
    into.reserve(spans.size());
    uint64_t length = 0;
    for (const ReadSpan& s : spans) {
      into.push_back({s.dst, s.length});
      length += s.length;
    }
    check_range(length, offset);
    if (length == 0) return;
    GetOptions g;
    g.offset = static_cast<uint64_t>(offset);
    g.if_match = etag_;
    // From the receive buffer into each span (Note [Body into place]).
    const GetResult r = s3_->get_object(uri_.bucket, uri_.key, g, into);
    check_got(r.bytes, length, offset);
  }
  const std::string& path() const override { return path_; }
  std::string etag() const override { return etag_; }

 private:
  void check_range(uint64_t length, int64_t offset) const {
    if (offset < 0 || offset + static_cast<int64_t>(length) > size_) {
      throw DataError(cat("'", path_, "' ends early: ", length, " bytes wanted at offset ", offset,
                          " of ", size_, " (truncated object?)"));
    }
  }
  void check_got(uint64_t got, uint64_t length, int64_t offset) const {
    if (got != length) {
      throw DataError(cat("'", path_, "': a ranged GET at offset ", offset, " returned ", got,
                          " of ", length, " bytes (truncated object?)"));
    }
  }

  std::shared_ptr<S3Client> s3_;
  S3Uri uri_;
  std::string path_;
  int64_t size_;
  std::string etag_;
};

// An S3 object read through the cache (Note [Data cache]): the first read
// copies it whole while the process's other readers use ranged GETs; then
// every read is local. While another process copies it, reads use ranged
// GETs and look for the copy again. An object whose copy fails is read from
// S3 from then on (the read that failed reports the object's own error).
class CachedObject : public ByteSource {
 public:
  CachedObject(std::unique_ptr<S3Object> remote, std::shared_ptr<DataCache> cache, S3Uri uri)
      : remote_(std::move(remote)), cache_(std::move(cache)), uri_(std::move(uri)) {}
  int64_t size() const override { return remote_->size(); }
  void pread_exact(void* dst, size_t length, int64_t offset) const override {
    if (const File* f = local()) return f->pread_exact(dst, length, offset);
    remote_->pread_exact(dst, length, offset);
  }
  void pread_spans(const std::vector<ReadSpan>& spans, int64_t offset) const override {
    if (const File* f = local()) return f->pread_spans(spans, offset);
    remote_->pread_spans(spans, offset);
  }
  const std::string& path() const override { return remote_->path(); }
  std::string etag() const override { return remote_->etag(); }

 private:
  enum class State { kUnknown, kFilling, kLocal, kRemote };
  const File* local() const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ == State::kLocal) return &local_;
      if (state_ != State::kUnknown) return nullptr;
      // A copy made before (a later epoch or run) is opened under the lock:
      // local disk only, and no reader goes to S3 for it meanwhile.
      local_ = cache_->find(uri_.bucket, uri_.key, remote_->etag(), remote_->size());
      if (local_.is_open()) {
        state_ = State::kLocal;
        return &local_;
      }
      state_ = State::kFilling;  // this thread copies; no lock held meanwhile
    }
    File f;
    bool busy = false;
    try {
      f = cache_->fill(
          uri_.bucket, uri_.key, remote_->etag(), remote_->size(),
          [this](int64_t at, void* dst, size_t n) { remote_->pread_exact(dst, n, at); }, &busy);
    } catch (const std::exception&) {
      f = File();
    }
    std::lock_guard<std::mutex> lock(mu_);
    local_ = std::move(f);  // never changed again once kLocal
    // Another process copying it: look for its copy at a later read.
    state_ = local_.is_open() ? State::kLocal : busy ? State::kUnknown : State::kRemote;
    return local_.is_open() ? &local_ : nullptr;
  }

  std::unique_ptr<S3Object> remote_;
  std::shared_ptr<DataCache> cache_;
  S3Uri uri_;
  mutable std::mutex mu_;
  mutable State state_ = State::kUnknown;
  mutable File local_;
};

std::string with_slash(std::string prefix) {
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  return prefix;
}

void sort_by_name(std::vector<Listed>& listing) {
  std::sort(listing.begin(), listing.end(),
            [](const Listed& a, const Listed& b) { return a.name < b.name; });
}

}  // namespace

Storage::Storage(const DataCacheOptions& cache) {
  if (!cache.dir.empty()) cache_ = std::make_shared<DataCache>(cache);
}

Storage::~Storage() = default;

bool Storage::is_s3(const std::string& location) { return S3Uri::is_s3_location(location); }

S3Client& Storage::s3() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!s3_) s3_ = std::make_shared<S3Client>(s3_options_from_env());
  return *s3_;
}

bool Storage::is_directory(const std::string& location) {
  if (!is_s3(location)) return image::is_directory(location);
  return once_per_group(cat("probe ", location), [&] {
           const S3Uri uri = S3Uri::parse(location);
           const bool found =
               !s3().list_objects_page(uri.bucket, with_slash(uri.key), "", 1).objects.empty();
           return std::string(found ? "1" : "0");
         }) == "1";
}

Storage::Exchange Storage::exchange() {
  std::lock_guard<std::mutex> lock(mu_);
  return exchange_;
}

std::string Storage::once_per_group(const std::string& what,
                                    const std::function<std::string()>& produce) {
  const Exchange e = exchange();
  return e ? e(what, produce) : produce();
}

std::unique_ptr<ByteSource> Storage::open(const std::string& location) {
  if (!is_s3(location)) return std::make_unique<File>(File::open_read(location));
  const S3Uri uri = S3Uri::parse(location);
  const ObjectInfo info = s3().head_object(uri.bucket, uri.key);
  return open(location, {uri.key, static_cast<int64_t>(info.size), info.etag});
}

std::unique_ptr<ByteSource> Storage::open(const std::string& location, const Listed& known) {
  if (!is_s3(location)) return std::make_unique<File>(File::open_read(location));
  s3();  // made before it is shared
  S3Uri uri = S3Uri::parse(location);
  auto remote = std::make_unique<S3Object>(s3_, uri, known.size, known.etag);
  if (!cache_ || !cache_->admits(known.size, known.etag)) return remote;
  return std::make_unique<CachedObject>(std::move(remote), cache_, std::move(uri));
}

void Storage::read_all(const std::string& location, std::vector<uint8_t>& out,
                       const std::string& etag) {
  if (!is_s3(location)) return read_file(location, out);
  const S3Uri uri = S3Uri::parse(location);
  GetOptions g;
  g.if_match = etag;
  int64_t size = -1;
  if (cache_ && g.if_match.empty()) {  // the ETag names the copy
    const ObjectInfo info = s3().head_object(uri.bucket, uri.key);
    g.if_match = info.etag;
    size = static_cast<int64_t>(info.size);
  }
  if (cache_ && !g.if_match.empty()) {
    if (File f = cache_->find(uri.bucket, uri.key, g.if_match, size); f.is_open()) {
      out.resize(static_cast<size_t>(f.size()));
      return f.pread_exact(out.data(), out.size(), 0);
    }
  }
  s3().get_object(uri.bucket, uri.key, g, out);  // into out, its capacity reused
  if (cache_ && cache_->admits(static_cast<int64_t>(out.size()), g.if_match)) {
    cache_->fill(uri.bucket, uri.key, g.if_match, static_cast<int64_t>(out.size()),
                 [&out](int64_t at, void* dst, size_t n) { std::memcpy(dst, out.data() + at, n); });
  }
}

std::vector<Listed> Storage::list_s3(const std::string& folder) {
  std::vector<Listed> out;
  const S3Uri uri = S3Uri::parse(folder);
  const std::string prefix = with_slash(uri.key);
  for (ObjectInfo& o : s3().list_objects(uri.bucket, prefix)) {
    if (o.key.size() > prefix.size() && o.key.back() != '/') {
      out.push_back({o.key.substr(prefix.size()), static_cast<int64_t>(o.size), o.etag});
    }
  }
  sort_by_name(out);
  return out;
}

std::vector<Listed> Storage::list(const std::string& folder) {
  if (is_s3(folder)) {
    if (!exchange()) return list_s3(folder);
    const std::string what = cat("list ", folder);
    return decode_listing(once_per_group(what, [&] { return encode_listing(list_s3(folder)); }),
                          cat("the listing of '", folder, "' rank 0 sent"));
  }
  std::vector<Listed> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::follow_directory_symlink, ec);
  for (fs::recursive_directory_iterator end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) continue;
    out.push_back({it->path().lexically_relative(folder).string(),
                   static_cast<int64_t>(it->file_size(ec)), ""});
  }
  if (ec) throw DataError(cat("cannot list '", folder, "': ", ec.message()));
  sort_by_name(out);
  return out;
}

void Storage::write_all(const std::string& location, const void* data, size_t size) {
  if (is_s3(location)) {
    const S3Uri uri = S3Uri::parse(location);
    s3().put_object(uri.bucket, uri.key, std::string_view(static_cast<const char*>(data), size));
    return;
  }
  const std::string tmp = location + ".tmp";
  {
    File f = File::create(tmp);
    f.write_all(data, size);
  }
  if (std::rename(tmp.c_str(), location.c_str()) != 0) {
    throw DataError(cat("cannot rename '", tmp, "' to '", location, "'"));
  }
}

void Storage::make_dirs(const std::string& location) {
  if (!is_s3(location)) image::make_dirs(location);
}

void ReadAhead::pread_exact(void* dst, size_t length, int64_t offset) const {
  auto* p = static_cast<uint8_t*>(dst);
  while (length > 0) {
    if (at_ < 0 || offset < at_ || offset >= at_ + static_cast<int64_t>(buffer_.size())) {
      at_ = offset / block_ * block_;
      const int64_t n = std::min(block_, inner_.size() - at_);
      if (n <= 0) {
        throw DataError(cat("'", inner_.path(), "' ends early: ", length,
                            " bytes missing at offset ", offset, " (truncated?)"));
      }
      buffer_.resize(static_cast<size_t>(n));
      inner_.pread_exact(buffer_.data(), buffer_.size(), at_);
    }
    const size_t from = static_cast<size_t>(offset - at_);
    const size_t take = std::min(length, buffer_.size() - from);
    std::memcpy(p, buffer_.data() + from, take);
    p += take, length -= take, offset += static_cast<int64_t>(take);
  }
}

}  // namespace dtrain::image
