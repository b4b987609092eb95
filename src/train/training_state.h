#pragma once
// The training step's pieces that train()'s Trainer (trainer.cpp) and the
// live trainer (live_trainer.cpp) share, one copy each (Note [Two drivers,
// one step] in training_state.cpp): the dataset options for the device, the
// model / optimizer / loss scaler built from TrainOptions, one micro-batch's
// forward and scaled backward, and the epoch's evaluation fields.

#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/ddp.h"
#include "dtrain/models.h"
#include "dtrain/timeline.h"
#include "dtrain/train.h"

namespace dtrain::detail {

/// What a driver trains with: made by make_training_state(), owned by the
/// driver, used on its training thread only.
struct TrainingState {
  at::Device device{at::kCPU};
  std::shared_ptr<ImageClassifier> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  /// The optimizer's parameters, group by group (what clipping sees).
  std::vector<at::Tensor> params;
  /// The autocast dtype under TrainOptions::amp; nullopt without AMP.
  std::optional<at::ScalarType> amp_dtype;
  /// Enabled under fp16 only; otherwise a pass-through, so one step serves
  /// every precision.
  std::unique_ptr<GradScaler> scaler;
};

/// A split's loader options from `o`: batch_size (training) or
/// eval_batch_size, shuffled and padded for training only (evaluation sees
/// every sample once), dataset.train.exact for training, seed, loader
/// threads. rank and world_size are left unset (-1: open_dataset with a
/// group fills them in).
LoaderOptions loader_options(const TrainOptions& o, bool train);

/// o.dataset opened for `device`: uint8 inputs when it is CUDA (normalised
/// there), synthetic batches made there, with `train` and `test` as the
/// splits' loader options.
DatasetOptions dataset_options(const TrainOptions& o, at::Device device, const LoaderOptions& train,
                               const LoaderOptions& test);

/// Seeds the CPU generator with o.seed, then builds o.model for `splits` on
/// `device` (build_model: init_weights, channels-last), its optimizer
/// (make_optimizer), the parameter list, the autocast dtype (check_autocast
/// refuses one `device` cannot run) and the loss scaler, whose found-inf
/// test is summed over `scaler_group` (ranks that must skip a step
/// together; the default group is this process alone). The same RNG draws
/// in the same order for every caller.
TrainingState make_training_state(const TrainOptions& o, const DatasetSplits& splits,
                                  at::Device device, ProcessGroup scaler_group = ProcessGroup());

/// One micro-batch (Note [Mixed precision step]): the forward of `ddp`
/// (which wraps state.model) under autocast, the loss (label smoothing; an
/// empty batch gives a zero loss that still takes part in DDP's
/// collectives), and backward of the scaled loss divided by
/// o.accumulation_steps; "forward" and "backward" spans on `timeline` (may
/// be null). Returns the loss, detached (before the division).
at::Tensor train_micro_batch(TrainingState& state, DataParallel& ddp, const Batch& batch,
                             const InputTransform& normalize, const TrainOptions& o,
                             Timeline* timeline);

/// This rank's counts over splits.test after an epoch (evaluate_split), or
/// none when o.evaluate_every_epoch is false.
ClassificationCounts evaluate_epoch(const TrainingState& state, const TrainOptions& o,
                                    const DatasetSplits& splits);

/// Sets m's test_acc, test_top5 and test_loss from `test` (counts over
/// whatever was evaluated; 0 without samples) and loss_scale from the
/// scaler (0 when it is disabled).
void fill_epoch_metrics(const TrainingState& state, const ClassificationCounts& test,
                        EpochMetrics* m);

}  // namespace dtrain::detail
