#pragma once
// MNIST / Fashion-MNIST in the IDX format (gzip-compressed or raw).

#include <string>

#include <ATen/core/Tensor.h>

namespace dtrain {

/// Reads one IDX file of unsigned bytes (type 0x08), gzip-compressed or raw
/// (detected from the content, not the name), into a uint8 tensor whose
/// shape is the header's dimensions. Throws DataError naming the path for a
/// missing or unreadable file, a wrong magic number or element type, or a
/// payload shorter or longer than the header announces.
at::Tensor read_idx(const std::string& path);

/// One split of an MNIST-like dataset.
struct IdxSplit {
  at::Tensor images;  ///< uint8 [N, H, W]
  at::Tensor labels;  ///< int64 [N]
};

/// Loads `<dir>/{train,t10k}-images-idx3-ubyte[.gz]` and the matching labels
/// and checks that the counts agree and every label is below `num_classes`.
IdxSplit load_idx_split(const std::string& dir, bool train, int64_t num_classes = 10);

}  // namespace dtrain
