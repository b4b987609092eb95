#include "ddp/bucketing.h"

#include <algorithm>
#include <map>

namespace dtrain::ddp {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<TensorInfo>& tensors,
                                                const std::vector<int64_t>& limits) {
  struct Open {
    std::vector<size_t> indices;
    int64_t bytes = 0;
    size_t limit_index = 0;
  };
  std::map<std::string, Open> open;
  std::vector<std::vector<size_t>> done;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Open& b = open[tensors[i].key];
    b.indices.push_back(i);
    b.bytes += tensors[i].bytes;
    const int64_t limit = limits.empty() ? 0 : limits[std::min(b.limit_index, limits.size() - 1)];
    if (b.bytes >= limit) {
      done.push_back(std::move(b.indices));
      b.indices.clear();
      b.bytes = 0;
      ++b.limit_index;
    }
  }
  for (auto& [key, b] : open) {
    if (!b.indices.empty()) done.push_back(std::move(b.indices));
  }
  std::sort(done.begin(), done.end(),
            [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return done;
}

}  // namespace dtrain::ddp
