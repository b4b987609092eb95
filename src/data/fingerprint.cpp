// Dataset fingerprints: what a checkpoint records about the training data.
//
// Note [Dataset fingerprints]
// A checkpoint's sample cursor (Note [Sample cursor]) is a position in the
// epoch's permutation of sample indices; it means the same samples only
// while the split lists the same samples in the same order. So the
// checkpoint records the training split's fingerprint and resume refuses
// data whose fingerprint differs (a file added, removed, renamed or
// rewritten; an object replaced) instead of silently skipping or repeating
// samples. The fingerprint comes from what opening the split already
// learned, never from reading the samples again:
//   imagefolder  class names; each file's path below the split and label,
//                in sample order; sizes (S3: the listing's sizes and ETags;
//                local: one stat per file, when the fingerprint is asked for)
//   packed       class names; each index entry's path, label, shard, offset
//                and size; the shards' sizes (and ETags on S3)
//   webdataset   each shard's file name, size (and ETag); each sample's key,
//                label, offset and size from the shard index
//   cifar10, stl10, mnist, fashion-mnist (held in memory)
//                labels in order; a CRC over the decoded pixels
//   synthetic    its spec (shape, classes, samples)
// Names are relative to the split, so the same files under another mount
// point, or copied to S3, agree; ETags are compared only when both sides
// have them (local files have none). Three CRC-32s (zlib's, as the
// checkpoint checksum) rather than one, so that a refusal can say what
// changed: names/labels/order, sizes, or only ETags.

#include "data/fingerprint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "common/strings.h"
#include "dtrain/image.h"

namespace dtrain {
namespace data {
namespace {

uint32_t crc_update(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (size > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    c = ::crc32(c, p, chunk);
    p += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(c);
}

uint32_t crc_value(uint32_t crc, int64_t value) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i)
    le[i] = static_cast<unsigned char>(static_cast<uint64_t>(value) >> (8 * i));
  return crc_update(crc, le, sizeof(le));
}

uint32_t crc_string(uint32_t crc, std::string_view s) {
  crc = crc_value(crc, static_cast<int64_t>(s.size()));
  return crc_update(crc, s.data(), s.size());
}

std::string hex(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

}  // namespace

void FingerprintBuilder::add_name(std::string_view name) { names_ = crc_string(names_, name); }
void FingerprintBuilder::add_name(int64_t value) { names_ = crc_value(names_, value); }
void FingerprintBuilder::add_size(int64_t size) { sizes_ = crc_value(sizes_, size); }
void FingerprintBuilder::add_bytes(const void* data, size_t size) {
  sizes_ = crc_update(crc_value(sizes_, static_cast<int64_t>(size)), data, size);
}
void FingerprintBuilder::add_etag(std::string_view etag) {
  if (etag.empty()) return;
  etags_ = crc_string(etags_, etag);
  any_etag_ = true;
}

DataFingerprint FingerprintBuilder::finish(int64_t samples, int64_t classes) const {
  DataFingerprint f;
  f.samples = samples;
  f.classes = classes;
  f.names = names_;
  f.sizes = sizes_;
  // A list of ETags whose CRC happens to be 0 must not read as "none".
  f.etags = any_etag_ && etags_ == 0 ? 1 : etags_;
  return f;
}

}  // namespace data

bool DataFingerprint::matches(const DataFingerprint& o) const {
  return samples == o.samples && classes == o.classes && names == o.names && sizes == o.sizes &&
         (etags == 0 || o.etags == 0 || etags == o.etags);
}

std::string DataFingerprint::str() const {
  if (!known()) return "an unknown fingerprint";
  return cat(samples, " samples, ", classes, " classes, names ", data::hex(names), ", sizes ",
             data::hex(sizes), etags ? ", etags " + data::hex(etags) : std::string());
}

std::string describe_change(const DataFingerprint& saved, const DataFingerprint& now) {
  if (saved.matches(now)) return "";
  std::vector<std::string> what;
  if (saved.samples != now.samples)
    what.push_back(cat(saved.samples, " samples then, ", now.samples, " now"));
  if (saved.classes != now.classes)
    what.push_back(cat(saved.classes, " classes then, ", now.classes, " now"));
  if (saved.names != now.names) {
    what.push_back(
        "the samples' names, labels or order differ (files or objects added, removed or "
        "renamed)");
  } else if (saved.sizes != now.sizes) {
    what.push_back("the same names, but sizes differ (files or objects rewritten)");
  } else if (saved.etags != 0 && now.etags != 0 && saved.etags != now.etags) {
    what.push_back("the same names and sizes, but ETags differ (objects replaced)");
  }
  return join(what, "; ");
}

// The fallback for sources that do not say more: names, labels and classes.
DataFingerprint ImageSource::fingerprint() const {
  data::FingerprintBuilder b;
  for (const std::string& c : classes()) b.add_name(c);
  const int64_t n = size();
  for (int64_t i = 0; i < n; ++i) {
    b.add_name(name(i));
    b.add_name(label(i));
  }
  return b.finish(n, static_cast<int64_t>(classes().size()));
}

}  // namespace dtrain
