// Fuzz target: a WebDataset tar shard (src/data/image/webdataset.h) read by
// the tar reader (src/data/image/tar.h) from memory.
//
// Every rejection must be a DataError naming the shard; an accepted shard's
// samples must lie inside it with labels in [0, 2^20).
#include <cstdint>
#include <cstring>
#include <string>

#include "data/image/webdataset.h"
#include "dtrain/errors.h"
#include "fuzz/fuzz_util.h"

using dtrain::fuzz::fail;

namespace {

class Bytes : public dtrain::image::ByteSource {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(static_cast<int64_t>(size)) {}
  int64_t size() const override { return size_; }
  void pread_exact(void* dst, size_t length, int64_t offset) const override {
    if (offset < 0 || offset > size_ || static_cast<int64_t>(length) > size_ - offset) {
      throw dtrain::DataError("'" + path_ + "' ends early at offset " + std::to_string(offset));
    }
    if (length > 0) std::memcpy(dst, data_ + offset, length);
  }
  const std::string& path() const override { return path_; }

 private:
  const uint8_t* data_;
  int64_t size_;
  std::string path_ = "fuzz-shard.tar";
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Bytes shard(data, size);
  try {
    for (const auto& s : dtrain::image::index_webdataset_shard(shard)) {
      if (s.offset < 0 || s.size < 0 || s.offset + s.size > shard.size()) {
        fail("a sample's image lies outside the shard");
      }
      if (s.label < 0 || s.label >= (int64_t{1} << 20)) fail("a label out of range");
    }
  } catch (const dtrain::DataError& e) {
    if (std::string(e.what()).find(shard.path()) == std::string::npos) {
      fail("error does not name the shard");
    }
  }
  return 0;
}
