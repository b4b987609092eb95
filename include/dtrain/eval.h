#pragma once
// Distributed evaluation of a trained model over a whole split (the library
// side of `dtrain eval`): every rank evaluates its DistributedSampler share
// of the test split without padding, so each sample counts exactly once.
//
/// Example:
/// ```
/// dtrain::EvalResult evaluate_resnet18(const dtrain::ProcessGroup& pg) {
///   dtrain::EvalOptions o;
///   o.model = "resnet18";
///   o.dataset.name = "imagefolder";
///   o.dataset.data_dir = "/data/imagenet";
///   o.checkpoint_dir = "/ckpt/job42";
///   return dtrain::evaluate(o, pg, &std::cout);
/// }
/// ```

#include <cstdint>
#include <ostream>
#include <string>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/device.h"
#include "dtrain/options.h"

namespace dtrain {

struct EvalOptions {
  /// Model registry name (model_names()).
  std::string model = "cnn";
  /// Dataset name, directory, image size; its test (evaluation) split is
  /// evaluated. The loaders' batch sizes, ranks and threads are filled in
  /// from the fields below.
  DatasetOptions dataset;
  /// Samples per batch on each rank.
  int64_t batch_size = 1000;
  /// Where the weights come from (exactly one):
  ///   checkpoint_dir  the model of the newest valid checkpoint in it
  ///                   (dtrain/checkpoint.h)
  ///   init_weights    a state_dict file (load_weights(), dtrain/weights.h:
  ///                   Python's torch.save(dict(model.state_dict()), PATH))
  std::string checkpoint_dir;
  std::string init_weights;
  /// When not empty, rank 0 writes the logits of every sample, in dataset
  /// order, as one float32 tensor [N, classes] that torch.load returns.
  std::string logits_file;
  /// As TrainOptions: device (dtrain/device.h; default automatic()),
  /// intra-op threads, loader threads, memory format.
  DeviceChoice device;
  int threads = 0;
  int loader_threads = 0;
  bool channels_last = false;

  DTRAIN_SETTER(EvalOptions, model)
  DTRAIN_SETTER(EvalOptions, dataset)
  DTRAIN_SETTER(EvalOptions, batch_size)
  DTRAIN_SETTER(EvalOptions, checkpoint_dir)
  DTRAIN_SETTER(EvalOptions, init_weights)
  DTRAIN_SETTER(EvalOptions, logits_file)
  DTRAIN_SETTER(EvalOptions, device)
  DTRAIN_SETTER(EvalOptions, threads)
  DTRAIN_SETTER(EvalOptions, loader_threads)
  DTRAIN_SETTER(EvalOptions, channels_last)
};

/// Over the whole split, identical on every rank.
struct EvalResult {
  int64_t samples = 0;  ///< each sample of the split once
  double top1 = 0;      ///< fractions in [0, 1]
  double top5 = 0;      ///< top-k with k = classes when fewer than 5
  double loss = 0;      ///< mean cross-entropy
};

/// Throws InvalidArgument naming the flag when `o` is unusable.
void validate(const EvalOptions& o);

/// Evaluates `o.model` with the given weights on `o.dataset`'s test split,
/// data-parallel over `pg`. Rank 0 alone reads the weights (then broadcasts
/// them) and writes `log` ("evaluated N samples: top-1 ..., top-5 ...,
/// loss ...") and the logits file. Collective: every rank calls it; a
/// failure to read the weights on rank 0 is raised on every rank.
/// Throws InvalidArgument for bad options, DataError for bad weights or
/// data, DistError for communication failures.
EvalResult evaluate(const EvalOptions& o, const ProcessGroup& pg, std::ostream* log);

}  // namespace dtrain
