#pragma once
// The batteries-included training loop behind `dtrain train`, reachable from
// the library so that users' own programs get the same behaviour.
//
// Usage:
//   dtrain::ProcessGroup pg = dtrain::init_process_group();
//   dtrain::TrainOptions o;
//   o.model = "cnn";
//   o.dataset.name = "fashion-mnist";
//   auto history = dtrain::train(o, pg, &std::cout);

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/ddp.h"

namespace dtrain {

struct TrainOptions {
  /// Model registry name (model_names()).
  std::string model = "cnn";
  /// Dataset name and directory; the loaders' batch sizes, seeds, ranks and
  /// threads are filled in from the fields below.
  DatasetOptions dataset;
  int64_t epochs = 3;
  /// Samples per step on each rank (PyTorch DDP's per-process batch).
  int64_t batch_size = 64;
  /// Samples per evaluation batch on each rank.
  int64_t eval_batch_size = 1000;
  /// SGD with momentum.
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  /// Seeds model initialisation and the sampler's permutations.
  uint64_t seed = 0;
  /// Intra-op threads per process; 0 keeps LibTorch's default (which
  /// follows OMP_NUM_THREADS).
  int threads = 0;
  /// "auto" (cuda:<local rank> when LibTorch has a usable GPU, else cpu),
  /// "cpu", "cuda" (cuda:<local rank>) or an explicit "cuda:N".
  std::string device = "auto";
  /// Loader worker threads (0: load on the training thread).
  int loader_threads = 0;
  /// Gradients of this many consecutive batches are accumulated (no_sync)
  /// before one synchronised optimizer step.
  int accumulation_steps = 1;
  /// Reducer options (bucket sizes, comm hook, ...).
  DdpOptions ddp;
  /// When not empty, rank 0 writes one JSON object per epoch here (keys
  /// epoch, train_loss, test_acc, images_per_sec, epoch_seconds,
  /// world_size); the file is created (truncated) before training starts,
  /// or appended to when the run resumes from a checkpoint (an epoch that
  /// finished after the last checkpoint then appears twice).
  std::string metrics_file;
  /// Checkpoint directory (dtrain/checkpoint.h); empty: no checkpoints and
  /// no resume. When set, training starts from the newest valid checkpoint
  /// in it, and rank 0 writes one at the configured cadence and after the
  /// last epoch. Rank 0 alone reads and writes it (see train()).
  std::string checkpoint_dir;
  /// Write a checkpoint after every this many optimizer steps (0: not by
  /// steps). One that falls on an epoch's last step is written after that
  /// epoch's evaluation instead.
  int64_t checkpoint_every_steps = 0;
  /// Write a checkpoint after every this many epochs (0: not by epochs).
  /// When checkpoint_dir is set and both cadences are 0, every epoch.
  int64_t checkpoint_every_epochs = 0;
  /// Checkpoints kept in checkpoint_dir (the newest by step), >= 1.
  int keep_checkpoints = 3;
  /// Print DDP's runtime statistics every epoch.
  bool verbose = false;
};

/// What one epoch measured (identical on every rank).
struct EpochMetrics {
  int64_t epoch = 0;  ///< 1-based
  double train_loss = 0;
  double test_acc = 0;  ///< fraction in [0, 1]
  double images_per_sec = 0;  ///< training images of all ranks per second
  double epoch_seconds = 0;   ///< training plus evaluation
  int world_size = 1;
};

/// One JSON object, as written to the metrics file.
std::string to_json(const EpochMetrics& m);

/// Trains `options.model` on `options.dataset` data-parallel over `pg`,
/// evaluating on the whole test set after every epoch. Rank 0 writes a line
/// per epoch to `log` (when not null). Collective: every rank calls it.
/// Throws InvalidArgument for bad options (before any collective),
/// DataError for bad data, DistError for communication failures, Error
/// naming the path when a checkpoint cannot be written.
///
/// Resume (options.checkpoint_dir set): rank 0 picks the newest checkpoint
/// that verifies, logs "skipped <path>: <reason>" for each newer one it
/// passed over and "resumed from <path> (epoch E, step S)" (E 1-based, as in
/// the "epoch E/N" lines; S optimizer steps so far), and broadcasts
/// its bytes, so the other ranks need no access to the directory. Every rank
/// restores the model, the SGD momentum buffers, the CPU generator and the
/// step counter, and continues epoch E at batch
///   floor(samples_in_epoch / (batch_size x world_size))
/// of the current run: DistributedSampler's permutation does not depend on
/// the world size and rank r takes every W-th position, so the saved run
/// consumed exactly positions [0, samples_in_epoch); a different world size
/// or batch size re-reads at most one global batch and skips nothing.
/// Epoch E's metrics cover the batches trained after the restart.
std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::ostream* log);

/// The batch a resumed epoch continues at when `samples_in_epoch` samples of
/// it were consumed by the saving run: floor(samples / (batch_size x
/// world_size)), at most `batches_per_epoch` (see train()).
int64_t resume_batch(int64_t samples_in_epoch, int64_t batch_size, int world_size,
                     int64_t batches_per_epoch);

/// The device a --device value names for this rank: "auto" (cuda:<local
/// rank mod GPUs> when a GPU is visible, else cpu), "cpu", "cuda" (cuda:<local
/// rank mod GPUs>) or "cuda:N". Throws InvalidArgument naming `--device cpu`
/// when a CUDA device is asked for and none is visible, or for another name.
at::Device pick_device(const std::string& name, const ProcessGroup& pg);

/// Checks options that need no data or peers (sizes, counts, names, the
/// metrics file's directory); throws InvalidArgument naming the field.
void validate(const TrainOptions& options);

}  // namespace dtrain
