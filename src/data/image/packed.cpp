// Writing and reading the packed format described in packed.h.

#include "data/image/packed.h"

#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "data/fingerprint.h"
#include "data/image/folder.h"
#include "data/image/io.h"
#include "data/image/location.h"
#include "data/image/runs.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "dtrain/sampler.h"

namespace dtrain {
namespace image {
namespace {

// Little-endian serialisation into a byte buffer.
class Writer {
 public:
  template <typename T>
  void put(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void put_raw(const char* s, size_t n) { bytes_.insert(bytes_.end(), s, s + n); }
  void put_string(const std::string& s) {
    put(static_cast<uint16_t>(s.size()));
    put_raw(s.data(), s.size());
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, std::string path) : b_(bytes), path_(std::move(path)) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(T{b_[at_ + i]} << (8 * i));
    at_ += sizeof(T);
    return v;
  }
  std::string get_raw(size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), n);
    at_ += n;
    return s;
  }
  std::string get_string() { return get_raw(get<uint16_t>()); }
  size_t at() const { return at_; }
  size_t remaining() const { return b_.size() - at_; }

 private:
  void need(size_t n) const {
    if (at_ + n > b_.size()) {
      throw DataError(cat("packed index '", path_, "' is truncated at byte ", at_,
                          "; re-run 'dtrain data pack'"));
    }
  }
  const std::vector<uint8_t>& b_;
  std::string path_;
  size_t at_ = 0;
};

struct Entry {
  uint32_t shard;
  uint64_t offset;
  uint32_t size;
  uint32_t label;
};

class PackedSource : public ImageSource {
 public:
  PackedSource(std::shared_ptr<Storage> storage, const std::string& dir,
               const std::vector<std::string>& class_names)
      : storage_(std::move(storage)), dir_(dir) {
    const std::string index_path = dir + "/index.bin";
    if (!storage_->is_directory(dir)) {
      throw DataError(cat("packed dataset '", dir,
                          "' does not exist; create it with "
                          "'dtrain data pack IMAGEFOLDER ",
                          dir, "'"));
    }
    std::vector<uint8_t> bytes;
    storage_->read_all(index_path, bytes);
    parse(Reader(bytes, index_path), index_path, class_names);
  }

  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  int64_t label(int64_t i) const override { return entries_[i].label; }
  std::string name(int64_t i) const override {
    return cat(shard_path(dir_, entries_[i].shard), "@", entries_[i].offset, " (",
               names_.substr(name_offsets_[i], name_offsets_[i + 1] - name_offsets_[i]), ")");
  }
  void read(int64_t i, SampleData& out) const override {
    const Entry& e = entries_[i];
    out.encoded = true;
    out.bytes.resize(e.size);
    shards_[e.shard]->pread_exact(out.bytes.data(), e.size, static_cast<int64_t>(e.offset));
  }
  int64_t run_length(int64_t i, int64_t max) const override {
    return image::run_length([this](int64_t j) { return extent(j); }, size(), i, max);
  }
  void read_run(int64_t first, int64_t count, SampleData* out) const override {
    image::read_run(
        *shards_[entries_[first].shard], [this](int64_t j) { return extent(j); }, first, count,
        out);
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  bool remote() const override { return Storage::is_s3(dir_); }
  // Note [Dataset fingerprints]: the index's entries, the shards' sizes and ETags.
  DataFingerprint fingerprint() const override {
    data::FingerprintBuilder b;
    for (const std::string& c : classes_) b.add_name(c);
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      b.add_name(std::string_view(names_).substr(name_offsets_[i],
                                                 name_offsets_[i + 1] - name_offsets_[i]));
      b.add_name(e.label);
      b.add_size(e.shard);
      b.add_size(static_cast<int64_t>(e.offset));
      b.add_size(e.size);
    }
    for (const auto& shard : shards_) {
      b.add_size(shard->size());
      b.add_etag(shard->etag());
    }
    return b.finish(size(), static_cast<int64_t>(classes_.size()));
  }

 private:
  void parse(Reader r, const std::string& path, const std::vector<std::string>& class_names) {
    if (r.get_raw(8) != kPackMagic) {
      throw DataError(cat("'", path, "' is not a dtrain packed index (bad magic)"));
    }
    const uint32_t version = r.get<uint32_t>();
    if (version != kPackVersion) {
      throw DataError(cat("packed index '", path, "' has version ", version, "; this dtrain reads ",
                          kPackVersion, ". Re-run 'dtrain data pack'"));
    }
    const uint32_t num_shards = r.get<uint32_t>();
    const uint32_t num_classes = r.get<uint32_t>();
    const uint64_t num_samples = r.get<uint64_t>();
    // Counts are checked against the bytes left before anything is sized by
    // them: a damaged count must not allocate gigabytes (found by
    // fuzz/packed_index.cpp). A class name takes at least 2 bytes, an entry 22.
    if (num_classes > r.remaining() / 2 || num_samples > r.remaining() / 22) {
      throw DataError(cat("packed index '", path, "' claims ", num_classes, " classes and ",
                          num_samples, " samples but has ", r.remaining(), " bytes left at byte ",
                          r.at(), "; re-run 'dtrain data pack'"));
    }
    std::vector<std::string> own_classes(num_classes);
    for (auto& c : own_classes) c = r.get_string();
    classes_ = class_names.empty() ? own_classes : class_names;
    std::vector<int64_t> shard_sizes;
    for (uint32_t s = 0; s < num_shards; ++s) {
      shards_.push_back(storage_->open(shard_path(dir_, s)));
      shard_sizes.push_back(shards_.back()->size());
    }
    entries_.reserve(num_samples);
    name_offsets_.reserve(num_samples + 1);
    name_offsets_.push_back(0);
    for (uint64_t i = 0; i < num_samples; ++i) {
      Entry e{r.get<uint32_t>(), r.get<uint64_t>(), r.get<uint32_t>(), r.get<uint32_t>()};
      const std::string rel = r.get_string();
      if (e.shard >= num_shards || e.label >= num_classes ||
          e.offset > static_cast<uint64_t>(shard_sizes[e.shard]) ||
          e.size > static_cast<uint64_t>(shard_sizes[e.shard]) - e.offset) {
        throw DataError(cat("packed index '", path, "': entry ", i, " (", rel,
                            ") points outside its shard or classes; re-run 'dtrain data pack'"));
      }
      const int32_t label = class_index(classes_, own_classes[e.label]);
      if (label < 0) {
        throw DataError(cat("packed dataset '", dir_, "': class '", own_classes[e.label],
                            "' is not one of the training split's classes"));
      }
      e.label = static_cast<uint32_t>(label);
      entries_.push_back(e);
      names_ += rel;
      name_offsets_.push_back(names_.size());
    }
    if (r.get_raw(8) != kPackEnd) {
      throw DataError(
          cat("packed index '", path, "' has no end marker; re-run 'dtrain data pack'"));
    }
    if (entries_.empty()) throw DataError(cat("packed dataset '", dir_, "' has no samples"));
  }

  Extent extent(int64_t i) const {
    const Entry& e = entries_[i];
    return Extent{e.shard, static_cast<int64_t>(e.offset), e.size};
  }

  std::shared_ptr<Storage> storage_;
  std::string dir_;
  std::vector<std::string> classes_;
  std::vector<std::unique_ptr<ByteSource>> shards_;
  std::vector<Entry> entries_;
  std::string names_;  // relative paths back to back
  std::vector<size_t> name_offsets_;
};

}  // namespace

std::shared_ptr<ImageSource> open_packed(std::shared_ptr<Storage> storage, const std::string& dir,
                                         const std::vector<std::string>& class_names) {
  return std::make_shared<PackedSource>(std::move(storage), dir, class_names);
}

std::string shard_path(const std::string& dir, uint32_t shard) {
  char name[32];
  std::snprintf(name, sizeof(name), "/shard-%05u.bin", shard);
  return dir + name;
}

}  // namespace image

std::shared_ptr<ImageSource> open_packed(const std::string& dir,
                                         const std::vector<std::string>& class_names,
                                         const DataCacheOptions& cache) {
  return image::open_packed(std::make_shared<image::Storage>(cache), dir, class_names);
}

PrepareStats pack_image_folder(const std::string& folder, const std::string& out_dir,
                               const PackOptions& options) {
  using namespace image;
  if (options.shard_size_bytes < 1) {
    throw InvalidArgument(cat("shard size must be positive, got ", options.shard_size_bytes));
  }
  // Note [Data locations]: the folder and out_dir may be s3:// prefixes. A
  // shard goes to S3 as one object (multipart when large) once complete, so
  // it is held in memory up to the shard size; locally it is written as it
  // grows. index.bin comes last, whole, so a reader never sees part of a pack.
  Storage storage;
  const FolderIndex index = scan_image_folder(storage, folder, {});
  const bool remote = Storage::is_s3(out_dir);
  storage.make_dirs(out_dir);
  Writer w;
  w.put_raw(kPackMagic, 8);
  w.put(kPackVersion);
  Writer entries;
  uint32_t shard = 0;
  int64_t shard_bytes = 0;
  File out = remote ? File() : File::create(shard_path(out_dir, shard));
  std::vector<uint8_t> pending;  // the shard being filled, for S3
  auto close_shard = [&] {
    if (remote) storage.write_all(shard_path(out_dir, shard), pending.data(), pending.size());
    pending.clear();
  };
  std::vector<uint8_t> bytes;
  PrepareStats stats;
  const int64_t n = static_cast<int64_t>(index.files.size());
  const std::vector<int64_t> written =  // the folder's sample of each packed one
      options.shuffle ? seeded_permutation(n, options.seed, 0)
                      : SampleCursor{0, 0, n, 0, false}.order();
  for (const int64_t f : written) {
    const auto i = static_cast<size_t>(f);
    if (shard_bytes >= options.shard_size_bytes) {
      close_shard();
      ++shard;
      if (!remote) out = File::create(shard_path(out_dir, shard));
      shard_bytes = 0;
    }
    storage.read_all(index.root + "/" + index.files[i], bytes,
                     index.etags.empty() ? "" : index.etags[i]);
    if (remote) {
      pending.insert(pending.end(), bytes.begin(), bytes.end());
    } else {
      out.write_all(bytes.data(), bytes.size());
    }
    entries.put(shard);
    entries.put(static_cast<uint64_t>(shard_bytes));
    entries.put(static_cast<uint32_t>(bytes.size()));
    entries.put(static_cast<uint32_t>(index.labels[i]));
    entries.put_string(index.files[i]);
    shard_bytes += static_cast<int64_t>(bytes.size());
    stats.bytes += static_cast<int64_t>(bytes.size());
  }
  close_shard();
  w.put(shard + 1);
  w.put(static_cast<uint32_t>(index.classes.size()));
  w.put(static_cast<uint64_t>(index.files.size()));
  for (const auto& c : index.classes) w.put_string(c);
  std::vector<uint8_t> whole = w.bytes();
  whole.insert(whole.end(), entries.bytes().begin(), entries.bytes().end());
  whole.insert(whole.end(), kPackEnd, kPackEnd + 8);
  storage.write_all(out_dir + "/index.bin", whole.data(), whole.size());
  stats.classes = static_cast<int64_t>(index.classes.size());
  stats.images = static_cast<int64_t>(index.files.size());
  return stats;
}

}  // namespace dtrain
