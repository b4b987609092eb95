// WebDataset tar shards as an ImageSource (Note [WebDataset samples] in
// webdataset.h), and brace expansion of shard lists.
//
// Note [WebDataset order]
// open_webdataset() indexes every shard when it opens them -- the tar
// headers and the small cls members, not the images -- so the dataset is
// random access like the packed format: sample i is the i-th sample in
// shard order (the order of the list after brace expansion), then member
// order. The DistributedSampler permutes that list as for any dataset, so
// the sample cursor (Note [Sample cursor]) resumes a WebDataset epoch
// exactly, at any world size; there is no shuffle buffer to save.

#include "data/image/webdataset.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/strings.h"
#include "data/fingerprint.h"
#include "data/image/listing_codec.h"
#include "data/image/location.h"
#include "data/image/runs.h"
#include "data/image/tar.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace image {
namespace {

constexpr int64_t kMaxLabel = int64_t{1} << 20;
constexpr int64_t kMaxClsBytes = 64;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// webdataset's base_plus_ext: the key ends at the first dot of the last component.
bool split_key(const std::string& name, std::string* key, std::string* ext) {
  const size_t slash = name.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  *key = name.substr(0, dot);
  *ext = name.substr(dot + 1);
  return true;
}

bool is_image_ext(const std::string& ext) {
  const std::string e = lower(ext);
  return e == "jpg" || e == "jpeg" || e == "png";
}

struct Pending {
  std::string key;
  int64_t header = -1;  // offset of the sample's first member, for messages
  int64_t image_offset = -1, image_size = 0;
  int64_t label = -1;
};

void finish(const ByteSource& shard, Pending& p, std::vector<WebDatasetSample>& out) {
  if (p.header < 0) return;
  if (p.image_offset < 0 || p.label < 0) {
    throw DataError(
        cat("'", shard.path(), "': sample '", p.key, "' at offset ", p.header, " has no ",
            p.image_offset < 0 ? "image member (.jpg, .jpeg or .png)" : "label member (.cls)",
            "; every WebDataset sample needs both"));
  }
  out.push_back({p.key, p.image_offset, p.image_size, p.label});
  p = Pending();
}

int64_t parse_label(const ByteSource& shard, const TarEntry& e, const std::string& key) {
  auto bad = [&](const std::string& why) {
    return DataError(cat("'", shard.path(), "': the .cls member of sample '", key, "' at offset ",
                         e.offset, " ", why, "; it must hold a class index in [0, ", kMaxLabel,
                         ")"));
  };
  if (e.size > kMaxClsBytes) throw bad(cat("is ", e.size, " bytes"));
  std::string text(static_cast<size_t>(e.size), '\0');
  shard.pread_exact(text.data(), text.size(), e.offset);
  const size_t a = text.find_first_not_of(" \t\r\n");
  const size_t b = text.find_last_not_of(" \t\r\n");
  const std::string digits = a == std::string::npos ? "" : text.substr(a, b - a + 1);
  long long v = 0;
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
      !parse_int(digits, &v) || v >= kMaxLabel) {
    throw bad(cat("holds '", first_line(digits.substr(0, 20)), "'"));
  }
  return v;
}

// A shard in S3, HEADed and indexed with large GETs in order (Note [Data
// locations]), as once_per_group sends it: size, ETag, then the samples.
std::string index_s3_shard(Storage& storage, const std::string& path) {
  const std::unique_ptr<ByteSource> shard = storage.open(path);
  WireWriter w;
  w.u64(static_cast<uint64_t>(shard->size()));
  w.bytes(shard->etag());
  const std::vector<WebDatasetSample> samples = index_webdataset_shard(ReadAhead(*shard));
  w.u64(samples.size());
  for (const WebDatasetSample& s : samples) {
    w.bytes(s.key);
    w.u64(static_cast<uint64_t>(s.offset));
    w.u64(static_cast<uint64_t>(s.size));
    w.u64(static_cast<uint64_t>(s.label));
  }
  return std::move(w.str());
}

std::vector<WebDatasetSample> decode_shard_index(std::string_view bytes, const std::string& path,
                                                 Listed* shard) {
  WireReader r(bytes, cat("the index of '", path, "' rank 0 sent"));
  shard->size = static_cast<int64_t>(r.u64());
  shard->etag = std::string(r.bytes());
  const uint64_t n = r.u64();
  if (n > bytes.size()) r.fail("it claims more samples than it has bytes");
  std::vector<WebDatasetSample> samples;
  samples.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    WebDatasetSample s;
    s.key = std::string(r.bytes());
    s.offset = static_cast<int64_t>(r.u64());
    s.size = static_cast<int64_t>(r.u64());
    s.label = static_cast<int64_t>(r.u64());
    samples.push_back(std::move(s));
  }
  if (!r.done()) r.fail("bytes follow the last sample");
  return samples;
}

class WebDatasetSource : public ImageSource {
 public:
  WebDatasetSource(std::shared_ptr<Storage> storage, const std::vector<std::string>& shards,
                   const std::vector<std::string>& class_names)
      : storage_(std::move(storage)) {
    if (shards.empty()) throw DataError("webdataset: the shard list is empty");
    int64_t max_label = -1;
    for (const std::string& path : shards) {
      std::vector<WebDatasetSample> found;
      if (Storage::is_s3(path)) {
        remote_ = true;
        // Note [Shared listing]: with a group, rank 0 HEADs and indexes it for every rank.
        Listed known;
        found = decode_shard_index(
            storage_->once_per_group(cat("index ", path),
                                     [&] { return index_s3_shard(*storage_, path); }),
            path, &known);
        shards_.push_back(storage_->open(path, known));
      } else {
        shards_.push_back(storage_->open(path));
        found = index_webdataset_shard(*shards_.back());
      }
      for (WebDatasetSample& s : found) {
        max_label = std::max(max_label, s.label);
        samples_.push_back({static_cast<uint32_t>(shards_.size() - 1), std::move(s)});
      }
    }
    if (samples_.empty()) {
      throw DataError(cat("webdataset: no samples in ", shards.size(), " shard(s) from '",
                          shards.front(), "'; expected .jpg/.png members with .cls labels"));
    }
    classes_ = class_names;
    if (classes_.empty()) {
      for (int64_t c = 0; c <= max_label; ++c) classes_.push_back(std::to_string(c));
    }
    for (const auto& s : samples_) {
      if (s.second.label >= static_cast<int64_t>(classes_.size())) {
        throw DataError(cat("'", shards_[s.first]->path(), "': sample '", s.second.key,
                            "' has label ", s.second.label, " but the training split has ",
                            classes_.size(), " classes"));
      }
    }
  }

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int64_t label(int64_t i) const override { return samples_[i].second.label; }
  std::string name(int64_t i) const override {
    const auto& [shard, s] = samples_[i];
    return cat(shards_[shard]->path(), "@", s.offset, " (", s.key, ")");
  }
  void read(int64_t i, SampleData& out) const override {
    const auto& [shard, s] = samples_[i];
    out.encoded = true;
    out.bytes.resize(static_cast<size_t>(s.size));
    shards_[shard]->pread_exact(out.bytes.data(), out.bytes.size(), s.offset);
  }
  int64_t run_length(int64_t i, int64_t max) const override {
    return image::run_length([this](int64_t j) { return extent(j); }, size(), i, max);
  }
  void read_run(int64_t first, int64_t count, SampleData* out) const override {
    image::read_run(
        *shards_[samples_[first].first], [this](int64_t j) { return extent(j); }, first, count,
        out);
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  bool remote() const override { return remote_; }
  // Note [Dataset fingerprints]: each shard's file name, size and ETag, then
  // its samples' keys, labels, offsets and sizes.
  DataFingerprint fingerprint() const override {
    data::FingerprintBuilder b;
    for (const std::string& c : classes_) b.add_name(c);
    for (const auto& shard : shards_) {
      const std::string& path = shard->path();
      b.add_name(std::string_view(path).substr(path.rfind('/') + 1));
      b.add_size(shard->size());
      b.add_etag(shard->etag());
    }
    for (const auto& [shard, s] : samples_) {
      b.add_name(shard);
      b.add_name(s.key);
      b.add_name(s.label);
      b.add_size(s.offset);
      b.add_size(s.size);
    }
    return b.finish(size(), static_cast<int64_t>(classes_.size()));
  }

 private:
  Extent extent(int64_t i) const {
    const auto& [shard, s] = samples_[i];
    return Extent{shard, s.offset, s.size};
  }

  std::shared_ptr<Storage> storage_;
  std::vector<std::unique_ptr<ByteSource>> shards_;
  std::vector<std::pair<uint32_t, WebDatasetSample>> samples_;
  std::vector<std::string> classes_;
  bool remote_ = false;  // a shard is in s3://
};

}  // namespace

std::shared_ptr<ImageSource> open_webdataset(std::shared_ptr<Storage> storage,
                                             const std::vector<std::string>& shards,
                                             const std::vector<std::string>& class_names) {
  return std::make_shared<WebDatasetSource>(std::move(storage), shards, class_names);
}

std::vector<WebDatasetSample> index_webdataset_shard(const ByteSource& shard) {
  std::vector<WebDatasetSample> out;
  TarReader tar(shard, 0, shard.size());
  TarEntry e;
  Pending p;
  std::string key, ext;
  while (tar.next(e)) {
    if (!e.is_file()) continue;
    if (base_name(e.name).rfind("__", 0) == 0 || !split_key(e.name, &key, &ext)) continue;
    if (key != p.key) finish(shard, p, out);
    if (p.header < 0) {
      p.key = key;
      p.header = e.offset - 512;
    }
    if (is_image_ext(ext) && p.image_offset < 0) {
      p.image_offset = e.offset;
      p.image_size = e.size;
    } else if (lower(ext) == "cls") {
      p.label = parse_label(shard, e, key);
    }
  }
  finish(shard, p, out);
  return out;
}

}  // namespace image

std::vector<std::string> expand_braces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) {
      throw InvalidArgument(cat("shard list '", pattern, "' has a '}' without '{'"));
    }
    return {pattern};
  }
  const size_t close = pattern.find('}', open);
  if (close == std::string::npos || pattern.find('{', open + 1) < close) {
    throw InvalidArgument(cat("shard list '", pattern,
                              "' has an unbalanced or nested '{'; write e.g. "
                              "shards-{000000..000146}.tar or {train,val}.tar"));
  }
  const std::string body = pattern.substr(open + 1, close - open - 1);
  std::vector<std::string> choices;
  const size_t dots = body.find("..");
  if (dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    long long lo = 0, hi = 0;
    const bool digits = !a.empty() && !b.empty() && std::all_of(a.begin(), a.end(), ::isdigit) &&
                        std::all_of(b.begin(), b.end(), ::isdigit);
    if (!digits || !parse_int(a, &lo) || !parse_int(b, &hi) || hi < lo || hi - lo >= 1000000) {
      throw InvalidArgument(cat("shard list '", pattern, "': '{", body,
                                "}' is not a range of at most 1,000,000 numbers such as "
                                "{000000..000146}"));
    }
    // Zero-padded to the wider bound when either has a leading zero (braceexpand).
    const bool pad = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0');
    const size_t width = pad ? std::max(a.size(), b.size()) : 0;
    for (long long v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      choices.push_back(s);
    }
  } else {
    choices = split(body, ',');
  }
  std::vector<std::string> out;
  const std::string head = pattern.substr(0, open);
  const std::vector<std::string> tails = expand_braces(pattern.substr(close + 1));
  for (const std::string& c : choices) {
    for (const std::string& t : tails) out.push_back(head + c + t);
  }
  return out;
}

std::shared_ptr<ImageSource> open_webdataset(const std::vector<std::string>& shards,
                                             const std::vector<std::string>& class_names,
                                             const DataCacheOptions& cache) {
  return image::open_webdataset(std::make_shared<image::Storage>(cache), shards, class_names);
}

}  // namespace dtrain
