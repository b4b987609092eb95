#pragma once
// The compact encoding in which what a dataset's opening learns from S3
// (listings, directory probes, WebDataset shard indexes) travels from rank 0
// to the other ranks (Note [Shared listing] in shared_listing.cpp). Free of
// the process group, so the data parsers' fuzz build compiles it alone.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/image/location.h"

namespace dtrain::image {

/// Appends unsigned LEB128 varints and length-prefixed byte strings.
class WireWriter {
 public:
  void u64(uint64_t v);
  void bytes(std::string_view s);
  /// `n` bytes as they are, no length (the reader knows n).
  void raw(const void* data, size_t n);
  std::string& str() { return out_; }

 private:
  std::string out_;
};

/// Reads what a WireWriter wrote. Every read throws DataError naming `what`
/// and the byte offset when the message is short or malformed.
class WireReader {
 public:
  WireReader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}
  uint64_t u64();
  std::string_view bytes();
  std::string_view raw(size_t n);
  /// Everything not read yet.
  std::string_view rest();
  bool done() const { return at_ == in_.size(); }
  /// Throws the DataError, `why` saying what is wrong at the current byte.
  [[noreturn]] void fail(const char* why) const;

 private:
  std::string_view in_;
  std::string what_;
  size_t at_ = 0;
};

/// A listing (sorted by name) in about 30 bytes an object for ImageNet's
/// keys: names front-coded against the previous name, sizes as varints, S3's
/// usual ETag (a quoted MD5 in hex) as its 16 bytes.
std::string encode_listing(const std::vector<Listed>& listing);
/// The listing encode_listing() encoded; DataError naming `what` when the
/// bytes are not one.
std::vector<Listed> decode_listing(std::string_view bytes, const std::string& what);

}  // namespace dtrain::image
