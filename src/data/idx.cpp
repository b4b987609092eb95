#include "dtrain/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads the whole file, transparently inflating gzip (zlib passes raw files
// through unchanged). A truncated or corrupt gzip stream is an error.
std::vector<uint8_t> read_all(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    throw DataError(cat("cannot open '", path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw DataError(cat("cannot open '", path, "': ", std::strerror(errno)));
  std::vector<uint8_t> data;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    int n = gzread(f.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f.get(), &err);
      throw DataError(cat("'", path, "' is corrupt or truncated (", msg, ")"));
    }
    if (n == 0) break;
    data.insert(data.end(), chunk.begin(), chunk.begin() + n);
  }
  // zlib reports a gzip stream cut short only through gzerror after EOF.
  int err = Z_OK;
  const char* msg = gzerror(f.get(), &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    throw DataError(cat("'", path, "' is corrupt or truncated (", msg, ")"));
  }
  return data;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string existing(const std::string& dir, const std::string& stem) {
  struct stat st;
  for (const char* suffix : {".gz", ""}) {
    std::string p = dir + "/" + stem + suffix;
    if (::stat(p.c_str(), &st) == 0) return p;
  }
  throw DataError(cat("missing '", dir, "/", stem, "[.gz]'"));
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  std::vector<uint8_t> data = read_all(path);
  if (data.size() < 4) {
    throw DataError(cat("'", path, "' is too short (", data.size(), " bytes) to be an IDX file"));
  }
  // Magic: two zero bytes, the element type, the number of dimensions.
  if (data[0] != 0 || data[1] != 0) {
    throw DataError(cat("'", path, "' is not an IDX file (bad magic number)"));
  }
  if (data[2] != 0x08) {
    throw DataError(cat("'", path, "' holds IDX element type 0x", std::hex, int{data[2]},
                        "; only unsigned bytes (0x08) are supported"));
  }
  const size_t ndim = data[3];
  if (ndim < 1 || ndim > 4) {
    throw DataError(cat("'", path, "' has ", ndim, " dimensions; expected 1 to 4"));
  }
  const size_t header = 4 + 4 * ndim;
  if (data.size() < header) {
    throw DataError(cat("'", path, "' is truncated inside its header"));
  }
  std::vector<int64_t> shape(ndim);
  size_t count = 1;
  bool overflow = false;  // four sides of 2^32 wrap a size_t: never "equal" by accident
  for (size_t d = 0; d < ndim; ++d) {
    shape[d] = big_endian_u32(&data[4 + 4 * d]);
    overflow |= __builtin_mul_overflow(count, static_cast<size_t>(shape[d]), &count);
  }
  if (overflow || data.size() - header != count) {
    throw DataError(cat("'", path, "' holds ", data.size() - header,
                        " bytes of data but its header announces ",
                        overflow ? std::string("over 2^64") : std::to_string(count),
                        " (truncated or corrupt file)"));
  }
  at::Tensor out = at::empty(shape, at::kByte);
  // An empty tensor's data_ptr() is null, and memcpy(nullptr, _, 0) is
  // undefined (UBSan; found by the long fuzz run of fuzz/data_records.cpp).
  if (count > 0) std::memcpy(out.data_ptr<uint8_t>(), data.data() + header, count);
  return out;
}

IdxSplit load_idx_split(const std::string& dir, bool train, int64_t num_classes) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = existing(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = existing(dir, prefix + "-labels-idx1-ubyte");
  IdxSplit split;
  split.images = read_idx(images_path);
  at::Tensor labels = read_idx(labels_path);
  if (split.images.dim() != 3) {
    throw DataError(cat("'", images_path, "' has ", split.images.dim(),
                        " dimensions; images need 3 (count, rows, columns)"));
  }
  if (labels.dim() != 1) {
    throw DataError(cat("'", labels_path, "' has ", labels.dim(), " dimensions; labels need 1"));
  }
  if (labels.size(0) != split.images.size(0)) {
    throw DataError(cat("'", images_path, "' holds ", split.images.size(0), " images but '",
                        labels_path, "' holds ", labels.size(0), " labels"));
  }
  if (labels.numel() > 0 && labels.max().item<int64_t>() >= num_classes) {
    throw DataError(cat("'", labels_path, "' has label ", labels.max().item<int64_t>(),
                        " but the dataset has ", num_classes, " classes"));
  }
  split.labels = labels.to(at::kLong);
  return split;
}

}  // namespace dtrain
