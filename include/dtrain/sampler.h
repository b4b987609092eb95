#pragma once
// DistributedSampler with PyTorch's semantics (torch.utils.data.DistributedSampler).
//
// Every rank builds the same permutation of [0, dataset_size) from
// (seed, epoch); rank r takes positions r, r + W, r + 2W, ... of it. Unless
// drop_last, the permutation is padded by wrapping around to a multiple of W
// so that every rank gets the same number of samples (ceil(N / W)); with
// drop_last the tail is dropped instead (floor(N / W) each).
//
/// Example:
/// ```
/// void iterate(int64_t dataset_size, int rank, int world, int64_t epochs) {
///   dtrain::DistributedSampler sampler(
///       dataset_size, dtrain::SamplerOptions().set_rank(rank).set_world_size(world));
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     sampler.set_epoch(epoch);
///     for (int64_t i : sampler.indices()) {
///       (void)i;  // this rank's sample i
///     }
///   }
/// }
/// ```

#include <cstdint>
#include <vector>

#include "dtrain/options.h"

namespace dtrain {

struct SamplerOptions {
  int rank = 0;
  int world_size = 1;
  /// Shuffle with a permutation drawn from (seed, epoch); else keep order.
  bool shuffle = true;
  /// Same on every rank; the permutation depends only on seed and epoch.
  uint64_t seed = 0;
  /// Drop the tail that does not divide evenly instead of padding it.
  bool drop_last = false;
  /// Pad by wrap-around to equal shares (training). false: no padding and no
  /// dropping, shares differ by at most one sample and cover the dataset
  /// exactly once (evaluation over a whole test set).
  bool pad = true;

  DTRAIN_SETTER(SamplerOptions, rank)
  DTRAIN_SETTER(SamplerOptions, world_size)
  DTRAIN_SETTER(SamplerOptions, shuffle)
  DTRAIN_SETTER(SamplerOptions, seed)
  DTRAIN_SETTER(SamplerOptions, drop_last)
  DTRAIN_SETTER(SamplerOptions, pad)
};

/// Not thread-safe; cheap to copy.
///
/// Preconditions: every rank uses the same dataset_size, seed, shuffle, pad
/// and drop_last, and calls set_epoch() with the same epoch; only rank
/// differs between ranks.
class DistributedSampler {
 public:
  /// Throws InvalidArgument for a rank outside [0, world_size) or world_size < 1.
  DistributedSampler(int64_t dataset_size, SamplerOptions options);

  /// Selects the permutation for `epoch`; call before each epoch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// Number of samples this rank gets per epoch (identical on every rank
  /// unless pad is false).
  int64_t num_samples() const { return num_samples_; }
  /// Samples across all ranks per epoch.
  int64_t total_size() const;

  /// This rank's dataset indices for the current epoch, in order.
  std::vector<int64_t> indices() const;

  const SamplerOptions& options() const { return options_; }
  int64_t dataset_size() const { return dataset_size_; }

 private:
  int64_t dataset_size_;
  SamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

/// The permutation of [0, n) every rank derives from (seed, epoch): a
/// Fisher-Yates shuffle driven by a 64-bit SplitMix/PCG stream, identical on
/// every platform and library version.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace dtrain
