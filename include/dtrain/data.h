#pragma once
// Datasets and loaders as the trainer sees them.
//
// A Loader yields this rank's batches for one epoch at a time; the order is a
// pure function of (seed, epoch, rank) through DistributedSampler, so every
// rank and every restart sees the same sequence. Datasets are opened by name
// through open_dataset(), which the CLI's --dataset flag maps to.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dtrain/sampler.h"

namespace dtrain {

/// One batch: inputs [B, C, H, W] (float32 normalised, or uint8 when the
/// loader hands over raw pixels) and targets [B] int64 class indices.
struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
};

/// Yields this rank's batches of one epoch. Not thread-safe.
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
  /// Batches handed out (or skipped) so far in the current epoch.
  virtual int64_t position() const = 0;
  /// Batches this rank gets per epoch (the same on every rank).
  virtual int64_t batches_per_epoch() const = 0;
  /// Samples this rank gets per epoch (sampler share, before batching).
  virtual int64_t samples_per_epoch() const = 0;
};

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
  int rank = 0;
  int world_size = 1;
  /// Worker threads decoding and augmenting (0: on the calling thread).
  int threads = 0;
};

/// The DistributedSampler settings a loader with these options uses. The
/// sampler always pads (pad = true) or covers exactly once (pad = false);
/// the loader's drop_last drops the last short batch, as with PyTorch.
SamplerOptions sampler_options(const LoaderOptions& options);

/// Turns a loader's inputs into the model's inputs on whatever device they
/// are on (see DatasetOptions::uint8_inputs).
using InputTransform = std::function<at::Tensor(const at::Tensor&)>;

/// A dataset's two splits as loaders, with what the model needs to know.
struct DatasetSplits {
  std::unique_ptr<Loader> train;
  std::unique_ptr<Loader> test;
  int64_t num_classes = 0;
  /// Shape of one input sample: {C, H, W}.
  std::vector<int64_t> sample_shape;
  /// Normalises both splits' uint8 inputs (apply it after moving a batch to
  /// its device); empty when the loaders hand over normalised floats.
  InputTransform normalize;
};

struct DatasetOptions {
  /// Registry name: "fashion-mnist", "mnist", ... (see dataset_names()).
  std::string name = "fashion-mnist";
  /// Directory with the dataset's files; empty: the dataset's default.
  std::string data_dir;
  LoaderOptions train;
  LoaderOptions test;
  /// A corrupt or unreadable sample is an error instead of being skipped,
  /// counted and named in a warning (image datasets).
  bool strict = false;
  /// Training crop and evaluation size of the folder datasets (imagefolder,
  /// packed); 0: 224, as for ImageNet.
  int64_t image_size = 0;
  /// The image datasets hand over uint8 pixels, a quarter of the bytes to
  /// copy to a GPU, and DatasetSplits::normalize turns them into the same
  /// floats there (exactly: the loaders' float output is that function of
  /// the uint8 output). Datasets stored as floats (fashion-mnist, mnist,
  /// synthetic) ignore it. dtrain::train() sets it on CUDA devices.
  bool uint8_inputs = false;
};

/// Opens a dataset by name. Throws InvalidArgument for an unknown name (the
/// message lists the valid ones) and DataError for missing or corrupt files
/// (the message names the path and, where one exists, the package to install).
DatasetSplits open_dataset(const DatasetOptions& options);

/// Names open_dataset() accepts.
std::vector<std::string> dataset_names();

}  // namespace dtrain
