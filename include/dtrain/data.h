#pragma once
// Datasets and loaders as the trainer sees them.
//
// A Loader yields this rank's batches for one epoch at a time; the order is a
// pure function of (seed, epoch, rank) through DistributedSampler, so every
// rank and every restart sees the same sequence. Datasets are opened by name
// through open_dataset(options, pg), which the CLI's --dataset flag maps to
// and which gives each rank of `pg` its share.

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "dtrain/options.h"
#include "dtrain/sampler.h"

namespace dtrain {

class ProcessGroup;  // dtrain/comm.h

/// One batch: inputs [B, C, H, W] (float32 normalised, or uint8 when the
/// loader hands over raw pixels) and targets [B] int64 class indices.
struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
};

/// What identifies a split's samples and their order, from what opening the
/// split learned -- its listing, index or files' sizes -- without reading the
/// samples again (Note [Dataset fingerprints] in src/data/fingerprint.cpp).
/// Independent of where the data lives: names are relative to the split's
/// folder, so the same files under another path or copied to S3 agree.
/// Checkpoints record the training split's, and a resume against data whose
/// fingerprint differs is refused.
struct DataFingerprint {
  /// Samples in the split; -1: unknown (a loader that does not tell).
  int64_t samples = -1;
  int64_t classes = 0;
  /// CRC-32 over the class names and each sample's name (path, key or index
  /// entry, relative to the split) and label, in sample order.
  uint32_t names = 0;
  /// CRC-32 over the sizes of the files, objects or index entries the
  /// samples come from (in-memory sets: over their decoded contents).
  uint32_t sizes = 0;
  /// CRC-32 over the S3 listing's ETags; 0 where there are none (local
  /// files), and then not compared.
  uint32_t etags = 0;

  bool known() const { return samples >= 0; }
  /// Equal samples, classes, names and sizes, and equal ETags where both
  /// have them.
  bool matches(const DataFingerprint& other) const;
  /// "1000 samples, 10 classes, names 1a2b3c4d, sizes 5e6f7a8b[, etags ...]".
  std::string str() const;
};

/// What differs between `saved` and `now`, in words, as far as the
/// fingerprints tell (the sample and class counts; the names, labels or
/// order; the sizes; the ETags); "" when saved.matches(now).
std::string describe_change(const DataFingerprint& saved, const DataFingerprint& now);

/// Yields this rank's batches of one epoch. Not thread-safe: one thread
/// iterates a loader (the loader's own worker threads, LoaderOptions::threads,
/// are internal).
///
/// Epochs go as with PyTorch's DataLoader over a DistributedSampler: call
/// set_epoch(e) before each epoch, then iterate with range-for (or next()).
/// A loop yields the rest of the current epoch: after skip_to(k) it resumes
/// at batch k; once the epoch is exhausted a further loop yields nothing
/// until the next set_epoch().
///
/// Preconditions: every rank calls set_epoch() with the same epoch and
/// iterates the same number of batches (batches_per_epoch() is the same on
/// every rank for a padded split). The Batch a range-for hands out is
/// reassigned at each step; tensors taken from it stay valid.
///
/// Example:
/// ```
/// void train_epochs(dtrain::Loader& loader, int64_t epochs) {
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     loader.set_epoch(epoch);  // this epoch's permutation, from the start
///     for (dtrain::Batch& batch : loader) {
///       (void)batch.inputs;  // [B, C, H, W]
///     }
///   }
/// }
/// ```
class Loader {
 public:
  virtual ~Loader() = default;
  /// Starts (or restarts) `epoch`: positions the sampler, resets the cursor.
  virtual void start_epoch(int64_t epoch) = 0;
  /// Fills `batch` with the next batch; false when the epoch is exhausted.
  virtual bool next(Batch& batch) = 0;
  /// Resumes the current epoch at batch `batch_index` in
  /// [0, batches_per_epoch()] (a checkpoint's position): the next next()
  /// returns the batch an uninterrupted epoch would have returned there.
  /// Throws InvalidArgument outside that range.
  virtual void skip_to(int64_t batch_index) = 0;
  /// Batches handed out (or skipped) so far in the current epoch (since
  /// resume_at(), when the epoch was resumed so).
  virtual int64_t position() const = 0;
  /// Batches this rank gets per epoch (the same on every rank); after
  /// resume_at(), the batches from the resume point to the epoch's end.
  virtual int64_t batches_per_epoch() const = 0;
  /// Resumes the current epoch after `consumed` samples of its global order
  /// (all ranks together; Note [Sample cursor] in dtrain/sampler.h): rank r
  /// of W continues at positions consumed + r + j W, batched from there, so
  /// a checkpoint's cursor is honoured exactly at any world size and batch
  /// size. position() and batches_per_epoch() then count from this point.
  /// Throws InvalidArgument outside [0, dataset size], or when the loader
  /// cannot (the default: loaders of other than the built-in datasets).
  virtual void resume_at(int64_t consumed);
  /// Where the current pass over the epoch started in its global order (0,
  /// or resume_at()'s argument): after k full batches on W ranks of batch B,
  /// start_sample() + k B W samples of the epoch are consumed.
  virtual int64_t start_sample() const { return 0; }
  /// Samples this rank gets per epoch (sampler share, before batching).
  virtual int64_t samples_per_epoch() const = 0;
  /// The fingerprint of the split this loader draws from (the same on every
  /// rank). May touch every file's metadata (a local ImageFolder's sizes),
  /// so callers compute it once; thread-safe with respect to the loader's
  /// workers. The default: unknown (samples -1), never refused.
  virtual DataFingerprint fingerprint() const { return {}; }

  /// PyTorch's `sampler.set_epoch(epoch)`: the following loop yields
  /// `epoch`'s batches from the first (the same as start_epoch()).
  void set_epoch(int64_t epoch) { start_epoch(epoch); }

  /// Input iterator over the rest of the current epoch; each step calls
  /// next(). The Batch it refers to is overwritten by the following step.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;  // the end
    explicit Iterator(Loader* loader) : loader_(loader) { advance(); }
    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    Iterator& operator++() {
      advance();
      return *this;
    }
    bool operator==(const Iterator& other) const { return loader_ == other.loader_; }
    bool operator!=(const Iterator& other) const { return loader_ != other.loader_; }

   private:
    void advance() {
      if (loader_ && !loader_->next(batch_)) loader_ = nullptr;
    }
    Loader* loader_ = nullptr;
    Batch batch_;
  };
  /// Fetches the next batch of the current epoch (end() when none is left).
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }
};

/// How a loader batches and shares a split. Defaults: shuffled, padded
/// training batches of 64; rank and world_size unset. The share (rank,
/// world_size) is filled in by open_dataset(options, pg); a loader built
/// with the share left unset throws InvalidArgument, so no rank silently
/// trains on every sample.
struct LoaderOptions {
  /// Samples per batch on this rank.
  int64_t batch_size = 64;
  /// Shuffle (training) or keep dataset order (evaluation).
  bool shuffle = true;
  /// Drop the last incomplete batch.
  bool drop_last = false;
  /// Pad this rank's share to equal length across ranks (training, see
  /// SamplerOptions::pad); false for evaluating each sample exactly once.
  bool pad = true;
  uint64_t seed = 0;
  /// This rank's share: rank in [0, world_size). -1: unset (filled in from
  /// the process group by open_dataset(options, pg)).
  int rank = -1;
  int world_size = -1;
  /// Worker threads decoding and augmenting (0: on the calling thread).
  int threads = 0;
  /// Training that sees every sample of an epoch exactly once, also across a
  /// resume at another world size (Note [Sample cursor]): no padding (pad
  /// and drop_last are ignored), every rank iterates ceil(remaining / (B W))
  /// batches, and the last global step's batches are short -- on some ranks
  /// empty (0 rows) when fewer than W samples are left. false: PyTorch's
  /// padded DistributedSampler.
  bool exact = false;
  /// Samples read together (SamplerOptions::block, Note [Block order] in
  /// dtrain/sampler.h): the order shuffles blocks of this many consecutive
  /// samples and each rank takes whole blocks, so that an object-storage
  /// source reads a block of a packed shard or WebDataset tar with one
  /// range request instead of one per sample. Must divide batch_size. 1
  /// (the default): PyTorch's order, where a rank's neighbours are read
  /// together only when its order has them (one rank, no shuffle).
  int64_t shuffle_block = 1;

  /// An evaluation split's defaults: dataset order, no padding (each sample
  /// exactly once), otherwise as LoaderOptions().
  static LoaderOptions evaluation() { return LoaderOptions().set_shuffle(false).set_pad(false); }

  DTRAIN_SETTER(LoaderOptions, batch_size)
  DTRAIN_SETTER(LoaderOptions, shuffle)
  DTRAIN_SETTER(LoaderOptions, drop_last)
  DTRAIN_SETTER(LoaderOptions, pad)
  DTRAIN_SETTER(LoaderOptions, seed)
  DTRAIN_SETTER(LoaderOptions, rank)
  DTRAIN_SETTER(LoaderOptions, world_size)
  DTRAIN_SETTER(LoaderOptions, threads)
  DTRAIN_SETTER(LoaderOptions, exact)
  DTRAIN_SETTER(LoaderOptions, shuffle_block)
};

/// The DistributedSampler settings a loader with these options uses. The
/// sampler always pads (pad = true) or covers exactly once (pad = false);
/// the loader's drop_last drops the last short batch, as with PyTorch.
/// Throws InvalidArgument when the share is unset or out of range (the
/// message names the fix: open_dataset(options, pg), or set rank and
/// world_size), or when shuffle_block does not divide batch_size.
SamplerOptions sampler_options(const LoaderOptions& options);

/// The batches a loader with these options hands out from the sampler's
/// current start (the same count on every rank): ceil(num_samples / B), or
/// floor with drop_last; exact: ceil(remaining / (B W)).
int64_t loader_batches(const DistributedSampler& sampler, const LoaderOptions& options);
/// Rows of batch `b` on this rank (0 <= b < loader_batches): B, less for the
/// last one; 0 for an exact loader's rank with no sample left at its last step.
int64_t loader_batch_rows(const DistributedSampler& sampler, const LoaderOptions& options,
                          int64_t b);

/// Turns a loader's inputs into the model's inputs on whatever device they
/// are on (see DatasetOptions::uint8_inputs).
using InputTransform = std::function<at::Tensor(const at::Tensor&)>;

/// A dataset's two splits as loaders, with what the model needs to know.
struct DatasetSplits {
  std::unique_ptr<Loader> train;
  std::unique_ptr<Loader> test;
  int64_t num_classes = 0;
  /// Shape of one model input: {C, H, W} (after `normalize`).
  std::vector<int64_t> sample_shape;
  /// Turns both splits' batches into model inputs where they are (after the copy to a device):
  /// normalises uint8 pixels, resizes to image_size; empty when the batches are the inputs.
  InputTransform normalize;
};

/// A local cache for datasets read from object storage (`s3://`): the first
/// read of an object copies it whole to `dir`, later reads (later epochs,
/// later runs) read the copy. Copies are keyed by bucket, key and the
/// listing's ETag, so a replaced object is fetched again, never served stale;
/// each is written under a temporary name and renamed, so a crash never
/// leaves a partial copy that is served. Several processes (the ranks of a
/// node) may share one `dir`; it must be on a local filesystem (the locks are
/// Linux's, per node). Local datasets are read as they are, not cached.
/// Note [Data cache] in src/data/image/cache.cpp.
struct DataCacheOptions {
  /// The cache's directory, made when missing; empty (the default): no cache.
  std::string dir;
  /// What the cache may hold, in bytes (default 50 GiB): the least recently
  /// read copies are deleted to make room. An object larger than a quarter
  /// of it is not copied (it is read by ranged GETs, as without a cache).
  int64_t max_bytes = int64_t{50} << 30;

  DTRAIN_SETTER(DataCacheOptions, dir)
  DTRAIN_SETTER(DataCacheOptions, max_bytes)
};

/// Checks a cache's options: `max_bytes` positive, and `dir` (when set) made
/// and writable. Throws InvalidArgument naming the field, the cause and the fix.
void validate(const DataCacheOptions& o);

/// Which dataset to open and how to load its splits. Defaults: Fashion-MNIST
/// from its Debian package, training split shuffled and padded, evaluation
/// split in dataset order without padding (LoaderOptions::evaluation()).
///
/// Example:
/// ```
/// dtrain::DatasetSplits open_mnist(const dtrain::ProcessGroup& pg) {
///   return dtrain::open_dataset(dtrain::DatasetOptions()
///                                   .set_name("mnist")
///                                   .set_data_dir("/data/mnist")
///                                   .set_train(dtrain::LoaderOptions().set_batch_size(128)),
///                               pg);
/// }
/// ```
struct DatasetOptions {
  /// Registry name: "fashion-mnist", "mnist", ... (see dataset_names()).
  std::string name = "fashion-mnist";
  /// Directory with the dataset's files; empty: the dataset's default.
  /// imagefolder, packed and webdataset also take `s3://bucket/prefix`
  /// (read with ranged GETs, credentials from the environment as AWS's
  /// SDKs resolve them; docs/object_store.md).
  std::string data_dir;
  LoaderOptions train;
  LoaderOptions test = LoaderOptions::evaluation();
  /// A corrupt or unreadable sample is an error instead of being skipped,
  /// counted and named in a warning (image datasets).
  bool strict = false;
  /// Input size: the folder datasets' crop and synthetic samples' size (0: 224); the others
  /// (mnist 28, cifar10 32, stl10 96) are resized per batch as torchvision's Resize (0: keep).
  int64_t image_size = 0;
  /// The image datasets hand over uint8 pixels, a quarter of the bytes to
  /// copy to a GPU, and DatasetSplits::normalize turns them into the same
  /// floats there (exactly: the loaders' float output is that function of
  /// the uint8 output). Datasets stored as floats (fashion-mnist, mnist,
  /// synthetic) ignore it. dtrain::train() sets it on CUDA devices.
  bool uint8_inputs = false;
  /// A local copy of what is read from `s3://` (imagefolder, packed,
  /// webdataset); default: off. A local data_dir ignores it.
  DataCacheOptions cache;
  /// Where a dataset that makes its samples (synthetic) keeps them: its
  /// batches are made once and handed out on this device, so a step copies
  /// nothing (tf_cnn_benchmarks' synthetic data). Datasets read from files
  /// ignore it: their batches are on the CPU and the caller copies them.
  /// dtrain::train() sets it to the rank's device.
  c10::Device device = c10::kCPU;

  DTRAIN_SETTER(DatasetOptions, name)
  DTRAIN_SETTER(DatasetOptions, data_dir)
  DTRAIN_SETTER(DatasetOptions, train)
  DTRAIN_SETTER(DatasetOptions, test)
  DTRAIN_SETTER(DatasetOptions, strict)
  DTRAIN_SETTER(DatasetOptions, cache)
  DTRAIN_SETTER(DatasetOptions, image_size)
  DTRAIN_SETTER(DatasetOptions, uint8_inputs)
  DTRAIN_SETTER(DatasetOptions, device)
};

/// Opens a dataset by name with each split shared among the ranks of `pg`
/// as DistributedSampler shares it: a split's unset rank and world_size
/// (-1) become pg.rank() and pg.size(). Use ProcessGroup() (the
/// single-process group) for a program without ranks. Throws
/// InvalidArgument for a share already set to something else than pg's
/// (open_dataset(options) takes an explicit share), for an unknown name
/// (the message lists the valid ones), and DataError for missing or corrupt
/// files (the message names the path and, where one exists, the package to
/// install). Collective for datasets in S3 when pg has more than one rank:
/// every rank calls it with the same options, and rank 0 lists each s3://
/// folder (and indexes each WebDataset shard) for all of them, sending the
/// listing over pg (Note [Shared listing] in src/data/image/shared_listing.cpp);
/// a failure of rank 0's listing is the same error on every rank. A failure
/// on one other rank alone (its own data cache, its own reads of a packed
/// index.bin) ends that rank; the others then fail with PeerLostError once
/// its process exits, or wait out pg's timeout while it lives. Local folders
/// are listed by each rank, and open nothing collective.
DatasetSplits open_dataset(DatasetOptions options, const ProcessGroup& pg);

/// Opens a dataset with the shares the options name explicitly (e.g. rank 0
/// of 1 to evaluate a whole split on one rank of a larger job). Throws
/// InvalidArgument, naming open_dataset(options, pg) as the fix, when a
/// split's rank or world_size is unset; otherwise as above.
DatasetSplits open_dataset(const DatasetOptions& options);

/// Names open_dataset() accepts.
std::vector<std::string> dataset_names();

}  // namespace dtrain
