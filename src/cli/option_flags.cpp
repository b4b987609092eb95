#include "cli/option_flags.h"

#include <algorithm>

namespace dtrain::cli {

std::string name_flags(std::string message, const FieldFlags& fields) {
  FieldFlags sorted = fields;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [field, flag] : sorted) {
    for (size_t at = message.find(field); at != std::string::npos;
         at = message.find(field, at + flag.size())) {
      message.replace(at, field.size(), flag);
    }
  }
  return message;
}

const FieldFlags& train_field_flags() {
  static const FieldFlags flags = {
      {"TrainOptions::model", "--model"},
      {"TrainOptions::epochs", "--epochs"},
      {"TrainOptions::batch_size", "--batch-size"},
      {"TrainOptions::dataset.train.shuffle_block", "--shuffle-block"},
      {"TrainOptions::eval_batch_size", "--eval-batch-size"},
      {"TrainOptions::accumulation_steps", "--accumulation-steps"},
      {"TrainOptions::ddp.bucket_cap_mb", "--bucket-cap-mb"},
      {"TrainOptions::lr_warmup_epochs", "--lr-warmup-epochs"},
      {"TrainOptions::lr_warmup_steps", "--lr-warmup-steps"},
      {"TrainOptions::label_smoothing", "--label-smoothing"},
      {"TrainOptions::clip_grad_norm", "--clip-grad-norm"},
      {"TrainOptions::progress_every_steps", "--progress-steps"},
      {"TrainOptions::progress_every_seconds", "--progress-seconds"},
      {"TrainOptions::tensorboard_every", "--tensorboard-every"},
      {"TrainOptions::metrics_port", "--metrics-port"},
      {"TrainOptions::metrics_file", "--metrics-file"},
      {"TrainOptions::threads", "--threads"},
      {"TrainOptions::checkpoint_every_steps", "--checkpoint-every"},
      {"TrainOptions::checkpoint_every_epochs", "--checkpoint-every"},
      {"TrainOptions::keep_checkpoints", "--keep-checkpoints"},
      {"TrainOptions::checkpoint_dir", "--checkpoint-dir"},
      {"TrainOptions::device", "--device"},
      {"TrainOptions::amp", "--amp"},
      {"TrainOptions::lr_schedule", "--lr-schedule"},
      {"TrainOptions::kvstore", "--kvstore"},
      {"TrainOptions::kvstore_optimizer", "--kvstore-optimizer"},
      // DTRAIN_RECOVERY=live comes from `dtrain run --recovery live`.
      {"TrainOptions::Recovery::kRestart", "--recovery restart"},
      {"TrainOptions::ddp.comm_hook", "--comm-hook"},
      {"PowerSGDOptions::matrix_approximation_rank", "--powersgd-rank"},
      {"OptimizerOptions::type", "--optimizer"},
      {"InitOptions::backend", "--backend"},
      {"DatasetOptions::image_size", "--image-size"},
      {"DatasetOptions::data_dir", "--data-dir"},
      {"DatasetOptions::strict", "--strict"},
      {"DataCacheOptions::dir", "--data-cache"},
      {"DataCacheOptions::max_bytes", "--data-cache-size"},
      {"MetricsOptions::port", "--metrics-port"},
      {"KVStoreOptions::staleness", "--staleness"},
      {"OptimizerOptions::lr", "--lr"},
      {"OptimizerOptions::momentum", "--momentum"},
      {"OptimizerOptions::nesterov", "--nesterov"},
      {"OptimizerOptions::weight_decay", "--weight-decay"},
      {"OptimizerOptions::norm_weight_decay", "--norm-weight-decay"},
      {"OptimizerOptions::bias_weight_decay", "--bias-weight-decay"},
      {"OptimizerOptions::beta1 and beta2", "--adamw-betas"},
      {"OptimizerOptions::eps", "--adamw-eps"},
      // train() builds the schedule from these flags (lr_schedule_for).
      {"LrSchedule::base_lr", "--lr (after --lr-scaling)"},
      {"LrSchedule::warmup_steps", "the warm-up (--lr-warmup-epochs or --lr-warmup-steps)"},
      {"LrSchedule::warmup_start_factor", "--lr-warmup-decay"},
      {"LrSchedule::gamma", "--lr-gamma"},
      {"LrSchedule::step_size", "--lr-step-size"},
      {"LrSchedule::milestones", "--lr-milestones"},
      {"LrSchedule::total_steps", "steps (--epochs)"},
      {"LrSchedule::min_lr", "--lr-min"},
      // dtrain bench train's own.
      {"TrainBenchOptions::steps", "--steps"},
      {"TrainBenchOptions::warmup_steps", "--warmup-steps"},
      {"TrainBenchOptions::display_every", "--display-every"},
      {"TrainBenchOptions::num_classes", "--num-classes"},
      {"TrainBenchOptions::image_size", "--image-size"},
  };
  return flags;
}

const FieldFlags& eval_field_flags() {
  static const FieldFlags flags = {
      {"EvalOptions::checkpoint_dir", "--checkpoint"},
      {"EvalOptions::init_weights", "--init-weights"},
      {"EvalOptions::batch_size", "--batch-size"},
      {"EvalOptions::threads", "--threads"},
      {"EvalOptions::logits_file", "--logits-file"},
      {"EvalOptions::device", "--device"},
      {"InitOptions::backend", "--backend"},
      {"DatasetOptions::image_size", "--image-size"},
      {"DatasetOptions::data_dir", "--data-dir"},
      {"DatasetOptions::strict", "--strict"},
      {"DataCacheOptions::dir", "--data-cache"},
      {"DataCacheOptions::max_bytes", "--data-cache-size"},
  };
  return flags;
}

const FieldFlags& bench_field_flags() {
  static const FieldFlags flags = {
      {"PowerSGDOptions::matrix_approximation_rank", "--powersgd-rank"},
      {"InitOptions::backend", "--backend"},
      {"DatasetOptions::image_size", "--image-size"},
      {"DatasetOptions::data_dir", "--data-dir"},
  };
  return flags;
}

const FieldFlags& ps_field_flags() {
  static const FieldFlags flags = {
      {"KVStoreOptions::snapshot_dir", "--snapshot-dir"},
  };
  return flags;
}

const FieldFlags& data_field_flags() {
  static const FieldFlags flags = {
      {"synsets_file", "--synsets FILE"},
  };
  return flags;
}

const FieldFlags& launch_field_flags() {
  static const FieldFlags flags = {
      {"LaunchOptions::nproc_per_node", "--nproc-per-node"},
      // The pair is one flag, --nnodes MIN:MAX.
      {"LaunchOptions::min_nodes:max_nodes", "--nnodes"},
      {"LaunchOptions::max_nodes", "--nnodes"},
      {"LaunchOptions::rdzv_backend", "--rdzv-backend"},
      {"LaunchOptions::rdzv_endpoint", "--rdzv-endpoint"},
      {"LaunchOptions::rdzv_conf", "--rdzv-conf"},
      {"LaunchOptions::node_rank", "--node-rank"},
      {"LaunchOptions::max_restarts", "--max-restarts"},
      {"LaunchOptions::master_addr", "--master-addr"},
      {"LaunchOptions::master_port", "--master-port"},
      {"LaunchOptions::local_addr", "--local-addr"},
      {"LaunchOptions::role", "--role"},
      {"LaunchOptions::command", "the worker command after '--'"},
      {"LaunchOptions::run_id", "--rdzv-id"},
      {"LaunchOptions::log_dir", "--log-dir"},
      {"LaunchOptions::redirects/tee", "--redirects/--tee"},
      {"LaunchOptions::redirects", "--redirects"},
      {"LaunchOptions::tee", "--tee"},
      {"LaunchOptions::ps_servers > 0", "--ps-servers S"},
      {"LaunchOptions::ps_servers", "--ps-servers"},
      {"LaunchOptions::PsWorkerPer::kNode", "--ps-worker-per node"},
      {"LaunchOptions::Recovery::kLive", "--recovery live"},
      {"LaunchOptions::Recovery::kRestart", "--recovery restart"},
      {"LaunchOptions::live_min_workers", "--live-min-workers"},
      {"LaunchOptions::live_register_timeout", "--live-register-timeout"},
  };
  return flags;
}

}  // namespace dtrain::cli
