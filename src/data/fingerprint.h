#pragma once
// Building a DataFingerprint (dtrain/data.h) from a split's listing or index
// (Note [Dataset fingerprints] in fingerprint.cpp).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dtrain/data.h"

namespace dtrain::data {

/// Accumulates the three CRC-32s of a DataFingerprint. Every value goes in
/// with its length, so different lists never feed the same bytes.
class FingerprintBuilder {
 public:
  /// A sample's or class's name, or a label: into `names`.
  void add_name(std::string_view name);
  void add_name(int64_t value);
  /// A file's, object's or entry's size (or raw bytes of an in-memory set):
  /// into `sizes`.
  void add_size(int64_t size);
  void add_bytes(const void* data, size_t size);
  /// An S3 ETag into `etags`; empty ones (local files) are left out.
  void add_etag(std::string_view etag);
  DataFingerprint finish(int64_t samples, int64_t classes) const;

 private:
  uint32_t names_ = 0, sizes_ = 0, etags_ = 0;
  bool any_etag_ = false;
};

}  // namespace dtrain::data
