#pragma once
// Bucket assignment, kept pure so that it is tested on known parameter lists.

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::ddp {

struct TensorInfo {
  int64_t bytes = 0;
  /// Tensors with different keys (dtype and device) never share a bucket.
  std::string key;
};

/// Groups tensor indices into buckets, PyTorch's way: tensors are taken in
/// the given order (the caller passes reverse registration order); each key
/// fills its own open bucket, which closes once it holds at least the
/// current limit; the first bucket of each key uses limits[0], later ones
/// limits.back(). Buckets are returned ordered by their first tensor's
/// position, which is the launch order.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<TensorInfo>& tensors,
                                                const std::vector<int64_t>& limits);

}  // namespace dtrain::ddp
