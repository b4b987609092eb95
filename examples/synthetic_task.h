#pragma once
// A classification task every rank can generate by itself, so the examples run
// without a dataset: 16 features, 4 classes, labels from a fixed random linear
// "teacher". Batches are a function of (step, rank) alone, so a resumed run
// sees the same batches as an uninterrupted one, and each rank sees its own.

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace example {

constexpr int64_t kFeatures = 16;
constexpr int64_t kClasses = 4;

/// The teacher's weights: the same on every rank and in every run.
inline torch::Tensor teacher() {
  torch::manual_seed(12345);
  return torch::randn({kFeatures, kClasses});
}

/// Rank `rank`'s batch of `size` samples at step `step` (inputs, labels).
/// Reseeds LibTorch's default generator.
inline std::pair<torch::Tensor, torch::Tensor> batch(const torch::Tensor& teacher, int64_t step,
                                                     int rank, int64_t size = 32) {
  torch::manual_seed(1000003 * (step + 1) + rank);
  torch::Tensor x = torch::randn({size, kFeatures});
  return {x, x.mm(teacher).argmax(1)};
}

/// A fixed held-out batch to report the loss on.
inline std::pair<torch::Tensor, torch::Tensor> eval_batch(const torch::Tensor& teacher) {
  return batch(teacher, /*step=*/-2, /*rank=*/0, /*size=*/512);
}

/// The sum of every parameter, printed with all its digits: replicas that
/// are in sync print the same number.
inline double checksum(const std::vector<torch::Tensor>& parameters) {
  double sum = 0;
  for (const auto& p : parameters) sum += p.detach().to(torch::kDouble).sum().item<double>();
  return sum;
}

}  // namespace example
