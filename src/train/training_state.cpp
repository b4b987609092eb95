// The training step shared by train()'s Trainer and the live trainer
// (training_state.h).
//
// Note [Two drivers, one step]
// dtrain train has two drivers: the Trainer (trainer.cpp) over one fixed
// process group, and the live trainer (live_trainer.cpp, Note [Live
// training]) over a LiveGroup whose members come and go. What a step does
// must not differ between them, so they share one copy of it: the dataset
// options for the device (dataset_options, loader_options), the model,
// optimizer, parameter list, autocast dtype and loss scaler, built after
// torch::manual_seed(seed) so both draw the same initial weights
// (make_training_state), a micro-batch's forward and scaled backward
// (train_micro_batch), the optimizer step (scaled_optimizer_step, steps.h),
// the schedule (lr_schedule_for), the evaluation and the epoch's test fields
// (evaluate_epoch, fill_epoch_metrics). The drivers differ where their
// groups do: the Trainer's position is its step counter and checkpoint (read
// and written by rank 0, resumed mid-epoch), its loss scaler's found-inf is
// summed over the group, and it accumulates no_sync micro-batches; the live
// trainer's position is the LiveGroup's committed step, its members' state
// travels to joiners instead of checkpoints, a step runs one micro-batch per
// logical rank and commits only when every member finished it. `dtrain bench
// train` runs train() itself (src/measure/train_bench.cpp), so it shares the
// Trainer whole.

#include "train/training_state.h"

#include <torch/utils.h>

#include "dtrain/optim.h"
#include "train/steps.h"

namespace dtrain::detail {

LoaderOptions loader_options(const TrainOptions& o, bool train) {
  LoaderOptions l;
  l.batch_size = train ? o.batch_size : o.eval_batch_size;
  l.shuffle = train;
  l.pad = train;                             // evaluation sees every test sample exactly once
  l.exact = train && o.dataset.train.exact;  // --exactly-once
  l.shuffle_block = train ? o.dataset.train.shuffle_block : 1;  // --shuffle-block
  l.seed = o.seed;
  l.threads = o.loader_threads;
  return l;
}

DatasetOptions dataset_options(const TrainOptions& o, at::Device device, const LoaderOptions& train,
                               const LoaderOptions& test) {
  DatasetOptions data = o.dataset;
  data.uint8_inputs = data.uint8_inputs || device.is_cuda();  // normalised on the GPU
  data.device = device;  // synthetic batches are made there once
  data.train = train;
  data.test = test;
  return data;
}

TrainingState make_training_state(const TrainOptions& o, const DatasetSplits& splits,
                                  at::Device device, ProcessGroup scaler_group) {
  TrainingState s;
  s.device = device;
  torch::manual_seed(o.seed);
  s.model = build_model(o.model, splits, device, o.channels_last, o.init_weights);
  s.optimizer = make_optimizer(*s.model, o.optimizer);
  for (const auto& group : s.optimizer->param_groups()) {
    s.params.insert(s.params.end(), group.params().begin(), group.params().end());
  }
  GradScalerOptions so;
  so.enabled = false;  // a pass-through: one training loop for every precision
  if (o.amp != AmpMode::kNone) {
    s.amp_dtype = amp_dtype(o.amp);
    check_autocast(device.type(), *s.amp_dtype);
    so.enabled = needs_grad_scaler(*s.amp_dtype);
  }
  so.process_group = std::move(scaler_group);  // ranks skip overflowed steps together
  s.scaler = std::make_unique<GradScaler>(so);
  return s;
}

// Note [Mixed precision step]
// As PyTorch's AMP recipe: autocast covers the forward pass and the loss
// only (the guard's end clears the cast cache, so the next step's weights
// are cast afresh); backward runs outside it on the scaled loss; DDP
// averages the scaled gradients; before clipping they are unscaled, and
// GradScaler::step skips the optimizer step on every rank when any rank saw
// inf/NaN. Without fp16 the scaler is disabled and each call passes through.
at::Tensor train_micro_batch(TrainingState& s, DataParallel& ddp, const Batch& batch,
                             const InputTransform& normalize, const TrainOptions& o,
                             Timeline* timeline) {
  at::Tensor loss;
  {
    TimelineSpan span(timeline, "forward");
    std::optional<AutocastGuard> autocast;
    if (s.amp_dtype) autocast.emplace(s.device.type(), *s.amp_dtype);
    ddp.prepare_forward();
    at::Tensor logits =
        s.model->forward(device_inputs(batch.inputs, s.device, o.channels_last, normalize));
    ddp.finish_forward({logits});
    // An exact loader's rank may get no sample at an epoch's last step; it
    // still takes part in the step (DDP's collectives) with a zero loss.
    loss = batch.targets.size(0) == 0
               ? logits.sum() * 0
               : classification_loss(logits, batch.targets.to(s.device, /*non_blocking=*/true),
                                     o.label_smoothing);
  }
  TimelineSpan span(timeline, "backward");
  s.scaler->scale(o.accumulation_steps > 1 ? loss / o.accumulation_steps : loss).backward();
  return loss.detach();
}

ClassificationCounts evaluate_epoch(const TrainingState& s, const TrainOptions& o,
                                    const DatasetSplits& splits) {
  if (!o.evaluate_every_epoch) return {};
  return evaluate_split(*s.model, *splits.test, s.device, o.channels_last, nullptr,
                        splits.normalize);
}

void fill_epoch_metrics(const TrainingState& s, const ClassificationCounts& test, EpochMetrics* m) {
  const double n = static_cast<double>(test.samples);
  m->test_acc = n > 0 ? static_cast<double>(test.top1) / n : 0;
  m->test_top5 = n > 0 ? static_cast<double>(test.top5) / n : 0;
  m->test_loss = n > 0 ? test.loss_sum / n : 0;
  m->loss_scale = s.scaler->is_enabled() ? s.scaler->get_scale() : 0;
}

}  // namespace dtrain::detail
