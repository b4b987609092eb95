#include "dtrain/sampler.h"

#include <algorithm>
#include <numeric>
#include <optional>

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
  if (options_.block < 1) {
    throw InvalidArgument(
        cat("DistributedSampler: block must be >= 1 (1: PyTorch's order), got ", options_.block));
  }
  set_start(0);
}

void DistributedSampler::set_start(int64_t consumed) {
  if (consumed < 0 || consumed > dataset_size_) {
    throw InvalidArgument(cat("DistributedSampler: start position ", consumed,
                              " is outside [0, dataset size ", dataset_size_, "]"));
  }
  start_ = consumed;
  const int64_t w = options_.world_size, k = options_.block, m = dataset_size_ - start_;
  // Rank r's share of the m positions left, in blocks of k (Note [Block
  // order]): k per whole run of w blocks, and its part of the last run. With
  // k = 1, m / w plus one for the first m % w ranks -- PyTorch's counts:
  // padded, every rank takes rank 0's (ceil(m / w)); dropped, the last
  // rank's (floor(m / w)).
  auto share = [&](int64_t r) {
    return m / (k * w) * k + std::clamp(m % (k * w) - r * k, int64_t{0}, k);
  };
  if (!options_.pad && !options_.drop_last) {
    num_samples_ = share(options_.rank);
  } else {
    num_samples_ = options_.drop_last ? share(w - 1) : share(0);
  }
}

int64_t DistributedSampler::total_size() const {
  if (!options_.pad && !options_.drop_last) return dataset_size_;
  return start_ + num_samples_ * options_.world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const SampleCursor c{options_.seed, epoch_,           dataset_size_,
                       start_,        options_.shuffle, options_.block};
  const std::vector<int64_t> order = c.order();
  const int64_t n = dataset_size_;
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = 0; i < num_samples_; ++i) {
    const int64_t p =
        start_ + share_position(i, options_.rank, options_.world_size, options_.block);
    // Padding wraps around (repeatedly if the dataset is smaller than W).
    mine.push_back(order[p < n ? p : p % n]);
  }
  return mine;
}

std::vector<int64_t> SampleCursor::order() const {
  if (shuffle) return block_permutation(dataset_size, block, seed, epoch);
  std::vector<int64_t> p(dataset_size);
  for (int64_t i = 0; i < dataset_size; ++i) p[i] = i;
  return p;
}

namespace {

void check_step_shape(int world_size, int64_t batch_size) {
  if (world_size < 1 || batch_size < 1) {
    throw InvalidArgument(cat("SampleCursor: world size ", world_size, " and batch size ",
                              batch_size, " must be >= 1"));
  }
}

}  // namespace

int64_t SampleCursor::steps_left(int world_size, int64_t batch_size) const {
  check_step_shape(world_size, batch_size);
  const int64_t per_step = batch_size * world_size;
  return (std::max<int64_t>(0, dataset_size - consumed) + per_step - 1) / per_step;
}

SampleCursor SampleCursor::advanced(int64_t steps, int world_size, int64_t batch_size) const {
  check_step_shape(world_size, batch_size);
  SampleCursor c = *this;
  const int64_t left = std::max<int64_t>(0, dataset_size - consumed);
  c.consumed += steps >= (left + batch_size * world_size - 1) / (batch_size * world_size)
                    ? left
                    : steps * batch_size * world_size;
  return c;
}

std::vector<std::pair<std::string, int64_t>> SampleCursor::to_state() const {
  return {{"seed", static_cast<int64_t>(seed)}, {"epoch", epoch},
          {"dataset_size", dataset_size},       {"consumed", consumed},
          {"shuffle", shuffle ? 1 : 0},         {"block", block}};
}

SampleCursor SampleCursor::from_state(const std::vector<std::pair<std::string, int64_t>>& state) {
  auto field = [&](const char* name, std::optional<int64_t> missing = std::nullopt) {
    for (const auto& [k, v] : state) {
      if (k == name) return v;
    }
    if (missing) return *missing;
    throw InvalidArgument(cat("sample cursor state has no '", name,
                              "' field; it was not written by SampleCursor::to_state()"));
  };
  SampleCursor c;
  c.seed = static_cast<uint64_t>(field("seed"));
  c.epoch = field("epoch");
  c.dataset_size = field("dataset_size");
  c.consumed = field("consumed");
  c.shuffle = field("shuffle") != 0;
  c.block = field("block", 1);  // older states: PyTorch's order
  if (c.epoch < 0 || c.dataset_size < 0 || c.consumed < 0 || c.consumed > c.dataset_size ||
      c.block < 1) {
    throw InvalidArgument(cat("sample cursor state is out of range: epoch ", c.epoch, ", consumed ",
                              c.consumed, " of dataset size ", c.dataset_size, ", block ",
                              c.block));
  }
  return c;
}

std::vector<int64_t> step_indices(const SampleCursor& cursor, const std::vector<int64_t>& order,
                                  int rank, int world_size, int64_t batch_size, int64_t step) {
  check_step_shape(world_size, batch_size);
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument(
        cat("step_indices: rank ", rank, " is outside [0, world_size=", world_size, ")"));
  }
  if (static_cast<int64_t>(order.size()) != cursor.dataset_size) {
    throw InvalidArgument(cat("step_indices: the order has ", order.size(),
                              " positions but the cursor's dataset has ", cursor.dataset_size,
                              "; pass cursor.order()"));
  }
  if (cursor.block < 1 || batch_size % cursor.block != 0) {
    throw InvalidArgument(cat("step_indices: the cursor's block ", cursor.block,
                              " does not divide the batch size ", batch_size,
                              "; a step then consumes no whole run of positions (Note [Block "
                              "order]): use a block that divides the batch size"));
  }
  std::vector<int64_t> out;
  for (int64_t j = 0; j < batch_size; ++j) {
    const int64_t p =
        cursor.consumed + share_position(step * batch_size + j, rank, world_size, cursor.block);
    if (p >= cursor.dataset_size) break;  // positions grow with j
    out.push_back(order[p]);
  }
  return out;
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
  s.pad = o.pad && !o.exact;
  s.block = o.shuffle_block;
  if (o.shuffle_block < 1 || o.batch_size % o.shuffle_block != 0) {
    throw InvalidArgument(cat("loader: shuffle block ", o.shuffle_block,
                              " must be >= 1 and divide the batch size ", o.batch_size,
                              " (Note [Block order]); pick a block such as ",
                              std::gcd(std::max<int64_t>(o.batch_size, 1), int64_t{16})));
  }
  return s;
}

int64_t loader_batches(const DistributedSampler& sampler, const LoaderOptions& o) {
  const int64_t b = o.batch_size;
  if (o.exact) {
    const int64_t per_step = b * sampler.options().world_size;
    return (sampler.remaining() + per_step - 1) / per_step;
  }
  const int64_t n = sampler.num_samples();
  return o.drop_last ? n / b : (n + b - 1) / b;
}

int64_t loader_batch_rows(const DistributedSampler& sampler, const LoaderOptions& o, int64_t b) {
  return std::clamp<int64_t>(sampler.num_samples() - b * o.batch_size, 0, o.batch_size);
}

void Loader::resume_at(int64_t consumed) {
  throw InvalidArgument(cat("this loader cannot resume an epoch after sample ", consumed,
                            "; it implements only skip_to(batch)"));
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

std::vector<int64_t> block_permutation(int64_t n, int64_t block, uint64_t seed, int64_t epoch) {
  if (block <= 1) return seeded_permutation(n, seed, epoch);
  // Note [Block order]: whole blocks permuted, the short one last, so that
  // every block but that one starts at a multiple of `block` in the order.
  const std::vector<int64_t> blocks = seeded_permutation(n / block, seed, epoch);
  std::vector<int64_t> p;
  p.reserve(static_cast<size_t>(n));
  for (int64_t b : blocks) {
    for (int64_t i = b * block; i < (b + 1) * block; ++i) p.push_back(i);
  }
  for (int64_t i = n / block * block; i < n; ++i) p.push_back(i);
  return p;
}

}  // namespace dtrain
