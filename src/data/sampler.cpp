#include "dtrain/sampler.h"

#include "dtrain/data.h"

#include "common/random.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  if (options_.world_size < 1) {
    throw InvalidArgument(
        cat("DistributedSampler: world_size must be >= 1, got ", options_.world_size));
  }
  if (options_.rank < 0 || options_.rank >= options_.world_size) {
    throw InvalidArgument(cat("DistributedSampler: rank ", options_.rank,
                              " is outside [0, world_size=", options_.world_size, ")"));
  }
  if (dataset_size_ < 0) {
    throw InvalidArgument(cat("DistributedSampler: dataset size ", dataset_size_, " is negative"));
  }
  const int64_t w = options_.world_size;
  // PyTorch: with drop_last, floor(N / W); otherwise ceil(N / W), padded.
  if (!options_.pad && !options_.drop_last) {
    num_samples_ = dataset_size_ / w + (options_.rank < dataset_size_ % w ? 1 : 0);
  } else {
    num_samples_ = options_.drop_last ? dataset_size_ / w : (dataset_size_ + w - 1) / w;
  }
}

int64_t DistributedSampler::total_size() const {
  if (!options_.pad && !options_.drop_last) return dataset_size_;
  return num_samples_ * options_.world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = seeded_permutation(dataset_size_, options_.seed, epoch_);
  } else {
    order.resize(dataset_size_);
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const int64_t total = total_size();
  if (static_cast<int64_t>(order.size()) < total && !order.empty() && options_.pad) {
    // Pad by wrapping around (repeatedly if the dataset is smaller than W).
    const int64_t n = static_cast<int64_t>(order.size());
    order.reserve(total);
    for (int64_t i = n; i < total; ++i) order.push_back(order[i % n]);
  }
  order.resize(total);  // drop_last: cut the tail
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = options_.rank; i < total; i += options_.world_size) mine.push_back(order[i]);
  return mine;
}

SamplerOptions sampler_options(const LoaderOptions& o) {
  // Note [Dataset shares] (registry.cpp): an unset share is an error.
  if (o.rank == -1 || o.world_size == -1) {
    throw InvalidArgument(
        "loader: rank and world_size are unset; open the dataset with open_dataset(options, pg) "
        "to take this rank's share from the process group, or set LoaderOptions::rank and "
        "::world_size (0 and 1 for a single process)");
  }
  SamplerOptions s;
  s.rank = o.rank;
  s.world_size = o.world_size;
  s.shuffle = o.shuffle;
  s.seed = o.seed;
  s.drop_last = false;
  s.pad = o.pad;
  return s;
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  SplitMix64 rng(mix_seed(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace dtrain
