// dtrain::train() and its option checks; the loop is in trainer.cpp.
#include "dtrain/train.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/amp.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore_torch.h"
#include "dtrain/models.h"
#include "train/kv_sync.h"
#include "train/steps.h"
#include "train/trainer.h"

namespace dtrain {

int64_t resume_batch(int64_t samples_in_epoch, int64_t batch_size, int world_size,
                     int64_t batches_per_epoch) {
  return std::min(batches_per_epoch, samples_in_epoch / (batch_size * world_size));
}

std::string to_json(const EpochMetrics& m) {
  nlohmann::json j;
  j["epoch"] = m.epoch;
  j["train_loss"] = m.train_loss;
  j["test_acc"] = m.test_acc;
  j["test_top5"] = m.test_top5;
  j["test_loss"] = m.test_loss;
  j["lr"] = m.lr;
  j["loss_scale"] = m.loss_scale > 0 ? nlohmann::json(m.loss_scale) : nlohmann::json(nullptr);
  j["images_per_sec"] = m.images_per_sec;
  j["epoch_seconds"] = m.epoch_seconds;
  j["world_size"] = m.world_size;
  return j.dump();
}

std::string to_string(LrScaling scaling) {
  return scaling == LrScaling::kLinear ? "linear" : "none";
}

LrScaling parse_lr_scaling(const std::string& name) {
  if (name == "none") return LrScaling::kNone;
  if (name == "linear") return LrScaling::kLinear;
  throw InvalidArgument(cat("unknown lr scaling '", name, "'; valid rules: none, linear"));
}

// Messages name the fields (TrainOptions::x); the CLI maps them to its flags.
void validate(const TrainOptions& o) {
  auto positive = [](const char* field, double v) {
    if (!(v > 0)) throw InvalidArgument(cat("TrainOptions::", field, " must be positive, got ", v));
  };
  positive("epochs", static_cast<double>(o.epochs));
  positive("batch_size", static_cast<double>(o.batch_size));
  positive("eval_batch_size", static_cast<double>(o.eval_batch_size));
  positive("accumulation_steps", o.accumulation_steps);
  positive("ddp.bucket_cap_mb", o.ddp.bucket_cap_mb);
  if (o.recovery == TrainOptions::Recovery::kLive && o.kvstore) {
    throw InvalidArgument(
        "TrainOptions::kvstore under live recovery (TrainOptions::recovery, DTRAIN_RECOVERY=live "
        "from dtrain run --recovery live): a parameter-server job recovers by its own mechanism "
        "(DMLC_PS_SNAPSHOT_DIR, docs/ps.md); drop TrainOptions::kvstore or use "
        "TrainOptions::Recovery::kRestart");
  }
  validate(o.optimizer);
  if (o.lr_warmup_epochs > 0 && o.lr_warmup_steps > 0) {
    throw InvalidArgument(
        "TrainOptions::lr_warmup_epochs and TrainOptions::lr_warmup_steps are both set; the "
        "warm-up takes epochs or steps, not both");
  }
  {
    // Everything but the step counts the data decides (checked again in
    // train() with them): epochs stand for steps here.
    TrainOptions epochs_only = o;
    epochs_only.lr_warmup_steps = 0;
    validate(lr_schedule_for(epochs_only, 1, 1));
  }
  if (o.dataset.train.shuffle_block < 1 || o.batch_size % o.dataset.train.shuffle_block != 0) {
    throw InvalidArgument(
        cat("TrainOptions::dataset.train.shuffle_block ", o.dataset.train.shuffle_block,
            " must divide TrainOptions::batch_size ", o.batch_size,
            " (Note [Block order]): use a divisor such as ", std::gcd(o.batch_size, int64_t{16})));
  }
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) {
    throw InvalidArgument(
        cat("TrainOptions::label_smoothing must be in [0, 1), got ", o.label_smoothing));
  }
  if (o.clip_grad_norm < 0) {
    throw InvalidArgument(cat("TrainOptions::clip_grad_norm must be >= 0, got ", o.clip_grad_norm));
  }
  if (o.progress_every_steps < 0 || o.progress_every_seconds < 0) {
    throw InvalidArgument(
        cat("TrainOptions::",
            o.progress_every_steps < 0 ? "progress_every_steps" : "progress_every_seconds",
            " must be >= 0"));
  }
  if (o.tensorboard_every < 1) {
    throw InvalidArgument(
        cat("TrainOptions::tensorboard_every must be positive, got ", o.tensorboard_every));
  }
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    throw InvalidArgument(
        cat("TrainOptions::metrics_port must be -1 (off), 0 (a free port) or up "
            "to 65535, got ",
            o.metrics_port));
  }
  if (o.threads < 0)
    throw InvalidArgument(cat("TrainOptions::threads must be >= 0, got ", o.threads));
  detail::check_device(o.device, "TrainOptions::device");
  if (o.amp != AmpMode::kNone) {
    const bool cuda = detail::uses_cuda(o.device);
    if (o.amp == AmpMode::kFp16 && !cuda) {
      throw InvalidArgument(
          "TrainOptions::amp fp16 needs a CUDA device; use TrainOptions::amp bf16 on the CPU");
    }
    check_autocast(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU, amp_dtype(o.amp));
  }
  if (o.checkpoint_every_steps < 0 || o.checkpoint_every_epochs < 0) {
    throw InvalidArgument(
        cat("TrainOptions::",
            o.checkpoint_every_steps < 0 ? "checkpoint_every_steps" : "checkpoint_every_epochs",
            " must be >= 0, got ", std::min(o.checkpoint_every_steps, o.checkpoint_every_epochs)));
  }
  if (o.keep_checkpoints < 1) {
    throw InvalidArgument(
        cat("TrainOptions::keep_checkpoints must be >= 1, got ", o.keep_checkpoints));
  }
  if (o.checkpoint_dir.empty() && (o.checkpoint_every_steps > 0 || o.checkpoint_every_epochs > 0)) {
    throw InvalidArgument(
        "TrainOptions::checkpoint_every_steps or checkpoint_every_epochs is set but "
        "TrainOptions::checkpoint_dir is empty");
  }
  detail::validate_kvstore(o);
  bool known = false;
  for (const auto& n : model_names()) known = known || n == o.model;
  if (!known) {
    throw InvalidArgument(
        cat("unknown model '", o.model, "'; valid models: ", join(model_names(), ", ")));
  }
  known = false;
  for (const auto& n : dataset_names()) known = known || n == o.dataset.name;
  if (!known) {
    throw InvalidArgument(cat("unknown dataset '", o.dataset.name,
                              "'; valid datasets: ", join(dataset_names(), ", ")));
  }
}

LrSchedule lr_schedule_for(const TrainOptions& o, int64_t steps_per_epoch, int world_size) {
  LrSchedule s;
  s.kind = o.lr_schedule;
  s.base_lr = o.optimizer.lr;
  if (o.lr_scaling == LrScaling::kLinear) {
    s.base_lr *= static_cast<double>(o.batch_size * world_size * o.accumulation_steps) / 256.0;
  }
  s.step_size = o.lr_step_size * steps_per_epoch;
  for (int64_t m : o.lr_milestones) s.milestones.push_back(m * steps_per_epoch);
  s.gamma = o.lr_gamma;
  s.total_steps = o.epochs * steps_per_epoch;
  s.min_lr = o.lr_min;
  s.warmup_steps =
      o.lr_warmup_epochs > 0 ? o.lr_warmup_epochs * steps_per_epoch : o.lr_warmup_steps;
  s.warmup_start_factor = o.lr_warmup_decay;
  return s;
}

std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::ostream* log) {
  validate(options);
  std::shared_ptr<KVStore> kv;
  if (options.kvstore) {
    KVStoreOpen open =
        create_kvstore(*options.kvstore, options.kvstore_options, options.kvstore_env);
    if (open.served()) return {};  // Note [Serving from create] in src/ps/job/route.cpp
    kv = open.take();
  }
  return detail::Trainer(options, pg, log, std::move(kv)).run();
}

std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::shared_ptr<KVStore> kvstore, std::ostream* log) {
  if (!kvstore) return train(options, pg, log);
  validate(options);
  return detail::Trainer(options, pg, log, std::move(kvstore)).run();
}

}  // namespace dtrain
