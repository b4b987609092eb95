#pragma once
// DistributedSampler with PyTorch's semantics (torch.utils.data.DistributedSampler).
//
// Every rank builds the same permutation of [0, dataset_size) from
// (seed, epoch) -- the epoch's global order -- and rank r takes positions
// s + r, s + r + W, s + r + 2W, ... of it, from the start position s
// (0 unless set_start() resumes the epoch after s samples). Unless
// drop_last, the permutation is padded by wrapping around to a multiple of W
// so that every rank gets the same number of samples (ceil((N - s) / W)); with
// drop_last the tail is dropped instead (floor((N - s) / W) each). With a
// block (Note [Block order]) ranks take whole blocks and the counts are
// rank 0's share (padded) or the last rank's (dropped).
//
// Note [Sample cursor]
// Because the global order depends only on (seed, epoch) and rank r of W
// takes every W-th position, "how far the epoch is" is one number that does
// not depend on the world size or the batch size: the count of positions
// of the global order consumed so far. A step of batch B per rank on W ranks
// consumes the next B x W positions, rank r taking positions
// consumed + r + j W (j < B). SampleCursor is that number with what it
// counts in; a checkpoint stores it (Checkpoint::samples_in_epoch), and a
// run resumed with any world size and batch size continues at it
// (DistributedSampler::set_start, Loader::resume_at) -- no sample twice and
// none skipped when the epoch is not padded (SamplerOptions::pad false,
// LoaderOptions::exact).
//
// Note [Block order]
// A sample read from object storage costs a request whatever its size, so
// reading a few samples that lie back to back (a packed shard's, a
// WebDataset tar's) in one range request is far cheaper per sample than one
// request each -- but PyTorch's order gives a rank no two neighbours. With
// SamplerOptions::block = K > 1 the order instead permutes blocks of K
// consecutive dataset indices ([0, K), [K, 2K), ...; a last, shorter block
// always stays last, so every other block starts at a multiple of K in the
// order), and ranks take whole blocks: counting from the start position,
// rank r of W takes the r-th block of each run of W blocks, i.e. its share's
// element i is position start + (i / K) K W + r K + i % K. K = 1 is
// PyTorch's order and sharding exactly. With K dividing the batch size B a
// step still consumes the next B x W positions of the global order, so the
// cursor (Note [Sample cursor]) stays world-size independent and an epoch
// resumes exactly at any world size and any batch size that K divides. The
// price is randomness: a batch holds B / K runs of K neighbours, the same
// neighbours every epoch, as with MosaicML streaming's block shuffles or
// WebDataset's shard order; pack the data in a shuffled order (`dtrain data
// pack --shuffle`) so that neighbours are not one class.
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
#include <string>
#include <utility>
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
  /// Samples taken together (Note [Block order]): the order permutes blocks
  /// of this many consecutive indices and each rank takes whole blocks.
  /// 1 (the default) is PyTorch's order and sharding. >= 1.
  int64_t block = 1;

  DTRAIN_SETTER(SamplerOptions, rank)
  DTRAIN_SETTER(SamplerOptions, world_size)
  DTRAIN_SETTER(SamplerOptions, shuffle)
  DTRAIN_SETTER(SamplerOptions, seed)
  DTRAIN_SETTER(SamplerOptions, drop_last)
  DTRAIN_SETTER(SamplerOptions, pad)
  DTRAIN_SETTER(SamplerOptions, block)
};

/// Not thread-safe; cheap to copy.
///
/// Preconditions: every rank uses the same dataset_size, seed, shuffle, pad
/// and drop_last, and calls set_epoch() with the same epoch; only rank
/// differs between ranks.
class DistributedSampler {
 public:
  /// Throws InvalidArgument for a rank outside [0, world_size), world_size < 1
  /// or block < 1.
  DistributedSampler(int64_t dataset_size, SamplerOptions options);

  /// Selects the permutation for `epoch` and starts it at position 0; call
  /// before each epoch.
  void set_epoch(int64_t epoch) {
    epoch_ = epoch;
    set_start(0);
  }
  int64_t epoch() const { return epoch_; }

  /// Resumes the current epoch after `consumed` positions of its global
  /// order (Note [Sample cursor]): indices() then holds this rank's share of
  /// positions [consumed, end) -- positions consumed + rank + j x world_size
  /// (with a block: whole blocks, Note [Block order]).
  /// The end is dataset_size unpadded; padded, the share is padded from
  /// there to equal lengths (drop_last: cut). Throws InvalidArgument outside
  /// [0, dataset_size].
  void set_start(int64_t consumed);
  int64_t start() const { return start_; }
  /// Positions of the global order left from start() to the end of the
  /// epoch, all ranks together (padding included): num_samples() x W (with
  /// a block and padding or drop_last, the count of positions the shares
  /// take, not where the last one lies).
  int64_t remaining() const { return total_size() - start_; }

  /// Number of samples this rank gets per epoch (identical on every rank
  /// unless pad is false).
  int64_t num_samples() const { return num_samples_; }
  /// The epoch's end position in the global order (start() + every rank's
  /// share; dataset_size unless padded or dropped).
  int64_t total_size() const;

  /// This rank's dataset indices for the current epoch, in order.
  std::vector<int64_t> indices() const;

  const SamplerOptions& options() const { return options_; }
  int64_t dataset_size() const { return dataset_size_; }

 private:
  int64_t dataset_size_;
  SamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
};

/// The permutation of [0, n) every rank derives from (seed, epoch): a
/// Fisher-Yates shuffle driven by a 64-bit SplitMix/PCG stream, identical on
/// every platform and library version.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch);

/// seeded_permutation's order of blocks of `block` consecutive indices
/// (Note [Block order]): the n / block whole blocks permuted, each kept in
/// order, then the shorter last block. block 1: seeded_permutation(n, ...).
std::vector<int64_t> block_permutation(int64_t n, int64_t block, uint64_t seed, int64_t epoch);

/// Position, relative to the start, of element i of rank `rank`'s share on
/// `world_size` ranks taking blocks of `block` (Note [Block order]):
/// (i / block) x block x world_size + rank x block + i % block.
inline int64_t share_position(int64_t i, int rank, int world_size, int64_t block) {
  return (i / block) * block * world_size + rank * block + i % block;
}

/// Where an epoch stands, independent of world size and batch size (Note
/// [Sample cursor]): the global order is block_permutation(dataset_size,
/// block, seed, epoch) (the identity without shuffle) and its positions
/// [0, consumed) are done. A small value meant to be saved with a
/// checkpoint (to_state/from_state) and shared by the loaders and live
/// recovery: logical rank r of W takes the positions step_indices() names.
struct SampleCursor {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t dataset_size = 0;
  /// Positions of the epoch's global order consumed, in [0, dataset_size].
  int64_t consumed = 0;
  bool shuffle = true;
  /// SamplerOptions::block (Note [Block order]).
  int64_t block = 1;

  /// The epoch's global order (dataset indices by position).
  std::vector<int64_t> order() const;
  /// Steps of `batch_size` per rank on `world_size` ranks until the epoch
  /// ends without padding: ceil((dataset_size - consumed) / (batch_size x
  /// world_size)). Throws InvalidArgument for world_size or batch_size < 1.
  int64_t steps_left(int world_size, int64_t batch_size) const;
  /// The cursor after `steps` such steps (consumed moves by batch_size x
  /// world_size per step, at most to the epoch's end).
  SampleCursor advanced(int64_t steps, int world_size, int64_t batch_size) const;
  /// Checkpoint state: {"seed", "epoch", "dataset_size", "consumed",
  /// "shuffle", "block"} as integers, in this order (format version 1;
  /// "block" was added later and reads as 1 where it is missing).
  std::vector<std::pair<std::string, int64_t>> to_state() const;
  /// Inverse of to_state(); throws InvalidArgument naming the missing or
  /// out-of-range field.
  static SampleCursor from_state(const std::vector<std::pair<std::string, int64_t>>& state);
};

/// The dataset indices that logical rank `rank` of `world_size` takes at
/// step `step` counted from `cursor` with `batch_size` per rank: positions
/// consumed + share_position(step x batch_size + j, rank, world_size,
/// cursor.block) for j < batch_size (consumed + step x batch_size x
/// world_size + rank + j x world_size for block 1), those below
/// dataset_size (the last step's batches may be short or empty; nothing is
/// padded). `order` is cursor.order() (passed in so a caller computes it
/// once per epoch). Equal to DistributedSampler's unpadded share from
/// set_start(consumed), batched by batch_size. Throws InvalidArgument when
/// cursor.block does not divide batch_size.
std::vector<int64_t> step_indices(const SampleCursor& cursor, const std::vector<int64_t>& order,
                                  int rank, int world_size, int64_t batch_size, int64_t step);

}  // namespace dtrain
