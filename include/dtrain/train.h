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
  /// world_size); the file is created (truncated) before training starts.
  std::string metrics_file;
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
/// DataError for bad data, DistError for communication failures.
std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::ostream* log);

/// Checks options that need no data or peers (sizes, counts, names, the
/// metrics file's directory); throws InvalidArgument naming the field.
void validate(const TrainOptions& options);

}  // namespace dtrain
