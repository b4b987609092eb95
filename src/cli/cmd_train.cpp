// `dtrain train`: flags -> TrainOptions -> dtrain::train(); `dtrain eval`:
// the same data flags -> EvalOptions -> dtrain::evaluate().
#include <unistd.h>

#include <cctype>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/group.h"
#include "cli/option_flags.h"
#include "cli/powersgd_flags.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "dtrain/eval.h"
#include "dtrain/live.h"
#include "dtrain/models.h"
#include "dtrain/train.h"

namespace dtrain::cli {
namespace {

// How a worker joins its group (shared by train and eval).
struct GroupFlags {
  std::string device = "auto";  // parsed once, into the options' DeviceChoice
  std::string backend = "auto";
  double timeout_s = 1800;
};

struct TrainFlags {
  TrainOptions options;
  GroupFlags group;
  std::string data_cache_size = "50G";  // DataCacheOptions::max_bytes
  // Parsed once, in run_train, into TrainOptions' typed fields.
  std::string amp = "none";
  std::string lr_scaling = "none";
  std::string lr_schedule = "constant";
  std::string optimizer = "sgd";
  CommHookFlags hook;
  std::string checkpoint_every;
  std::string adamw_betas = "0.9,0.999";
  std::string lr_milestones;
  std::vector<double> norm_weight_decay, bias_weight_decay;  // 0 or 1 value
  bool quiet = false;
  std::string kvstore, kvstore_optimizer = "auto";  // parsed into options
};

struct EvalFlags {
  EvalOptions options;
  GroupFlags group;
  std::string data_cache_size = "50G";  // DataCacheOptions::max_bytes
};

// Whether progress can be redrawn in place: stdout is a terminal, or the
// launcher's is and it relays our redraws (Note [Progress under dtrain run],
// src/launch/agent/worker_group.cpp).
bool stdout_is_terminal() {
  return ::isatty(STDOUT_FILENO) == 1 || process_env()("DTRAIN_STDOUT_IS_TTY") == "1";
}

std::chrono::milliseconds group_timeout(const GroupFlags& f) {
  return std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
}

ProcessGroup join_flags_group(const GroupFlags& f, const DeviceChoice& device) {
  return cli::join_group(f.backend, device, group_timeout(f));
}

// "a,b,c" -> numbers; false on junk.
template <typename T>
bool parse_list(const std::string& text, std::vector<T>* out) {
  out->clear();
  for (const std::string& part : split(text, ',')) {
    double v = 0;
    if (!parse_double(part, &v)) return false;
    out->push_back(static_cast<T>(v));
    if (static_cast<double>(out->back()) != v) return false;
  }
  return true;
}

// --checkpoint-every: "N" or "Nsteps" (optimizer steps), "Nepochs" (epochs);
// the singular and a space before the unit are accepted too. False when
// `text` is none of these or N is not a positive integer.
bool parse_checkpoint_every(std::string text, int64_t* steps, int64_t* epochs) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  unit.erase(0, unit.find_first_not_of(' '));
  long long n = 0;
  if (digits == 0 || !parse_int(text.substr(0, digits), &n) || n < 1) return false;
  if (unit.empty() || unit == "step" || unit == "steps") {
    *steps = n, *epochs = 0;
  } else if (unit == "epoch" || unit == "epochs") {
    *steps = 0, *epochs = n;
  } else {
    return false;
  }
  return true;
}

CLI::Validator checkpoint_every_syntax() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        int64_t steps = 0, epochs = 0;
        if (parse_checkpoint_every(v, &steps, &epochs)) return "";
        return "must be N (steps), Nsteps or Nepochs with N a positive integer, got '" + v + "'";
      },
      "N|Nsteps|Nepochs");
}

// --data-cache and --data-cache-size, checked before the group forms: the
// size parsed ("50G"), the directory made and probed. Only s3:// data is
// cached; a local --data-dir with --data-cache gets a one-line note.
void apply_data_cache_flags(const std::string& who, const std::string& size, DatasetOptions& data) {
  try {
    data.cache.max_bytes = parse_byte_size(size);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(cat("--data-cache-size: ", e.what()));
  }
  validate(data.cache);
  if (!data.cache.dir.empty() && data.data_dir.rfind("s3://", 0) != 0) {
    std::cerr << who << ": note: --data-cache caches s3:// data only; "
              << (data.data_dir.empty() ? std::string("the dataset's default directory")
                                        : "--data-dir '" + data.data_dir + "'")
              << " is read where it is\n";
  }
}

/// dtrain train under `dtrain run --recovery live` (DTRAIN_RECOVERY=live):
/// the ranks are members of a dtrain::LiveGroup (docs/live_recovery.md).
/// Each generation's backend follows --backend and --device as for a plain
/// group (auto: NCCL with a GPU per rank, whose communicators are aborted
/// on a failure; Gloo otherwise).
int run_live(const TrainOptions& o, const std::string& backend) {
  LiveOptions live = LiveOptions::from_env(process_env());
  live.backend = live_backend(backend, o.device);
  try {
    train(o, std::move(live), &std::cout);
  } catch (const JobEndedError& e) {
    // A replacement or a late node's worker that the job finished without:
    // it holds no state and has nothing to write (Note [A replacement after
    // the end], src/live/live_group.cpp).
    std::cerr << "dtrain train: " << first_line(e.what()) << "; nothing to do\n";
  }
  return 0;
}

int run_train(const TrainFlags& f) {
  try {
    TrainOptions o = f.options;
    if (f.hook.name == "noop") {  // Note [The noop hook] (src/ddp/comm_hooks.cpp)
      throw InvalidArgument(
          "--comm-hook noop sends no gradients, so every rank would train a model of its own; "
          "it is for measuring (dtrain bench ddp|train): use none, fp16, bf16 or powersgd");
    }
    o.ddp.comm_hook = comm_hook_from_flags(f.hook, nullptr);
    o.optimizer.type = parse_optimizer_type(f.optimizer);
    o.amp = parse_amp_mode(f.amp);
    o.lr_scaling = parse_lr_scaling(f.lr_scaling);
    o.lr_schedule = parse_lr_schedule(f.lr_schedule);
    o.device = parse_device_flag(f.group.device);
    apply_data_cache_flags("dtrain train", f.data_cache_size, o.dataset);
    if (!f.checkpoint_every.empty() && o.checkpoint_dir.empty()) {
      throw InvalidArgument("--checkpoint-every needs --checkpoint-dir");
    }
    if (!f.checkpoint_every.empty() &&
        !parse_checkpoint_every(f.checkpoint_every, &o.checkpoint_every_steps,
                                &o.checkpoint_every_epochs)) {
      throw InvalidArgument(
          cat("--checkpoint-every '", f.checkpoint_every, "' is not N (steps), Nsteps or Nepochs"));
    }
    std::vector<double> betas;
    if (!parse_list(f.adamw_betas, &betas) || betas.size() != 2) {
      throw InvalidArgument(cat("--adamw-betas '", f.adamw_betas, "' is not B1,B2"));
    }
    o.optimizer.beta1 = betas[0];
    o.optimizer.beta2 = betas[1];
    if (!f.lr_milestones.empty() && !parse_list(f.lr_milestones, &o.lr_milestones)) {
      throw InvalidArgument(
          cat("--lr-milestones '", f.lr_milestones, "' is not a list of epochs like 30,60,80"));
    }
    if (!f.norm_weight_decay.empty()) o.optimizer.norm_weight_decay = f.norm_weight_decay[0];
    if (!f.bias_weight_decay.empty()) o.optimizer.bias_weight_decay = f.bias_weight_decay[0];
    o.progress = f.quiet                ? TrainOptions::Progress::kNone
                 : stdout_is_terminal() ? TrainOptions::Progress::kInPlace
                                        : TrainOptions::Progress::kLines;
    o.kvstore = parse_kvstore_flag(f.kvstore);
    // `dtrain run --recovery live` (dtrain/live.h's live_recovery_requested).
    if (process_env()("DTRAIN_RECOVERY").value_or("") == "live") {
      o.recovery = TrainOptions::Recovery::kLive;
    }
    o.kvstore_optimizer = parse_kvstore_optimizer_flag(f.kvstore_optimizer);
    validate(o);  // before joining the group: bad flags never leave peers waiting
    if (o.recovery == TrainOptions::Recovery::kLive) return run_live(o, f.group.backend);
    TrainingRoute route =
        open_training_route(o.kvstore, o.kvstore_options,
                            group_options(f.group.backend, o.device, group_timeout(f.group)));
    if (route.served) return 0;  // a ps scheduler or server: the job has ended
    train(o, route.pg, route.kv, &std::cout);
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error("dtrain train", InvalidArgument(name_flags(e.what(), train_field_flags())),
                        2);
  } catch (const std::exception& e) {
    // A runtime error naming a field (a checkpoint's model, the checkpoint
    // directory, the data directory) names the flag too.
    return report_runtime_error("dtrain train", e, train_field_flags());
  }
}

int run_eval(const EvalFlags& f) {
  try {
    EvalOptions o = f.options;
    o.device = parse_device_flag(f.group.device);
    apply_data_cache_flags("dtrain eval", f.data_cache_size, o.dataset);
    validate(o);
    ProcessGroup pg = join_flags_group(f.group, o.device);
    evaluate(o, pg, &std::cout);
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error("dtrain eval", InvalidArgument(name_flags(e.what(), eval_field_flags())),
                        2);
  } catch (const std::exception& e) {
    // A runtime error naming a field (the checkpoint directory, the logits
    // file, the data directory) names the flag too.
    return report_runtime_error("dtrain eval", e, eval_field_flags());
  }
}

// Flags `dtrain train` and `dtrain eval` share: model, data, device, group.
void add_common_flags(CLI::App* cmd, std::string& model, DatasetOptions& data,
                      std::string& data_cache_size, int& threads, int& loader_threads,
                      bool& channels_last, GroupFlags& group) {
  cmd->add_option("--model", model, "Model: " + join(model_names(), ", "))->capture_default_str();
  cmd->add_option("--dataset", data.name, "Dataset: " + join(dataset_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--data-dir", data.data_dir,
                  "Dataset directory, or s3://bucket/prefix for imagefolder, packed and "
                  "webdataset (default per dataset)");
  cmd->add_option("--data-cache", data.cache.dir,
                  "Local directory that keeps a copy of each object read from s3:// data, so "
                  "later epochs and runs read local disk (default: no cache)");
  cmd->add_option("--data-cache-size", data_cache_size,
                  "Bound of --data-cache, bytes with an optional K, M or G suffix; the least "
                  "recently read copies are deleted")
      ->capture_default_str();
  cmd->add_option("--image-size", data.image_size,
                  "Input size: imagefolder/packed crop (0: 224), synthetic size (0: 224), "
                  "other datasets resized to it like torchvision's Resize (0: as stored)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_flag("--strict", data.strict,
                "Fail on a corrupt or unreadable image instead of skipping it");
  cmd->add_option("--threads", threads, "Intra-op threads per process (0: LibTorch default)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--loader-threads", loader_threads, "Data loader threads per process")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_flag("--channels-last", channels_last,
                "Parameters and inputs in channels-last (NHWC) memory format");
  add_device_flag(cmd, group.device);
  add_backend_flag(cmd, group.backend);
  cmd->add_option("--timeout", group.timeout_s, "Seconds a collective may take before failing")
      ->capture_default_str()
      ->check(positive());
}

}  // namespace

void add_train_command(CLI::App& root, int* exit_code) {
  auto flags = std::make_shared<TrainFlags>();
  TrainOptions& o = flags->options;
  CLI::App* cmd = root.add_subcommand(
      "train", "Train an image classifier data-parallel (start it with 'dtrain run')");
  add_common_flags(cmd, o.model, o.dataset, flags->data_cache_size, o.threads, o.loader_threads,
                   o.channels_last, flags->group);
  cmd->add_option("--init-weights", o.init_weights,
                  "Start from these weights: torch.save(dict(model.state_dict()), PATH)");
  cmd->add_option("--epochs", o.epochs, "Epochs")->capture_default_str()->check(positive());
  cmd->add_option("--batch-size", o.batch_size, "Samples per step on each process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--eval-batch-size", o.eval_batch_size, "Samples per evaluation batch")
      ->capture_default_str()
      ->check(positive());
  cmd->add_flag("--exactly-once", o.dataset.train.exact,
                "Every training sample once per epoch, also when resumed at another world size: "
                "no padding, the last step's batches are short");
  cmd->add_option("--shuffle-block", o.dataset.train.shuffle_block,
                  "Shuffle blocks of this many consecutive samples, each read with one request "
                  "from a packed or WebDataset shard (it must divide --batch-size; 1: PyTorch's "
                  "order)")
      ->capture_default_str()
      ->check(positive());
  // Optimizer.
  cmd->add_option("--optimizer", flags->optimizer, "Optimizer: " + join(optimizer_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--lr", o.optimizer.lr, "Base learning rate")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--momentum", o.optimizer.momentum, "SGD momentum")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_flag("--nesterov", o.optimizer.nesterov, "SGD with Nesterov momentum");
  cmd->add_option("--adamw-betas", flags->adamw_betas, "AdamW betas B1,B2")->capture_default_str();
  cmd->add_option("--adamw-eps", o.optimizer.eps, "AdamW eps")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--weight-decay", o.optimizer.weight_decay,
                  "Weight decay (SGD: L2 penalty; AdamW: decoupled)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--norm-weight-decay", flags->norm_weight_decay,
                  "Weight decay of normalisation-layer parameters (BatchNorm, LayerNorm, "
                  "GroupNorm); 0 skips them (default: --weight-decay)")
      ->expected(1)
      ->check(non_negative());
  cmd->add_option("--bias-weight-decay", flags->bias_weight_decay,
                  "Weight decay of every bias; 0 skips them (default: --weight-decay)")
      ->expected(1)
      ->check(non_negative());
  // Learning-rate schedule.
  cmd->add_option("--lr-scaling", flags->lr_scaling,
                  "none, or linear: lr x global batch / 256 (Goyal et al.)")
      ->capture_default_str();
  cmd->add_option("--lr-schedule", flags->lr_schedule,
                  "Schedule, stepped every optimizer step: " + join(lr_schedule_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--lr-step-size", o.lr_step_size, "step: epochs between decays")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--lr-milestones", flags->lr_milestones,
                  "multistep: epochs at which the lr decays, e.g. 30,60,80");
  cmd->add_option("--lr-gamma", o.lr_gamma, "step, multistep: decay factor")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--lr-min", o.lr_min, "cosine: final learning rate")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--lr-warmup-epochs", o.lr_warmup_epochs, "Linear warm-up over N epochs")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--lr-warmup-steps", o.lr_warmup_steps, "Linear warm-up over N optimizer steps")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--lr-warmup-decay", o.lr_warmup_decay, "The warm-up starts at lr x this factor")
      ->capture_default_str()
      ->check(positive());
  // Loss and gradients.
  cmd->add_option("--label-smoothing", o.label_smoothing, "Label smoothing in [0, 1)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--amp", flags->amp,
                  "Mixed precision: none, bf16 (CPU, CUDA), fp16 (CUDA, dynamic loss scaling)")
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", o.clip_grad_norm,
                  "Clip the gradients' global 2-norm to this (0: off)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--seed", o.seed, "Seed for initialisation and shuffling")->capture_default_str();
  // Output.
  cmd->add_option("--metrics-file", o.metrics_file, "Write one JSON object per epoch here");
  cmd->add_flag("-q,--quiet", flags->quiet, "No progress lines within an epoch");
  cmd->add_option("--progress-steps", o.progress_every_steps,
                  "Without a terminal (here or, under dtrain run, the launcher's): a "
                  "progress line every N steps (0: never)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--progress-seconds", o.progress_every_seconds,
                  "Without a terminal (as for --progress-steps): a progress line every T "
                  "seconds (0: never)")
      ->capture_default_str()
      ->check(non_negative());
  // Observability (docs/observability.md).
  cmd->add_option("--tensorboard", o.tensorboard,
                  "TensorBoard log directory (rank 0 writes scalars, the configuration, and "
                  "with --tensorboard-histograms weights and gradients)");
  cmd->add_option("--tensorboard-every", o.tensorboard_every,
                  "TensorBoard step scalars every N optimizer steps")
      ->capture_default_str()
      ->check(positive());
  cmd->add_flag("--tensorboard-histograms", o.tensorboard_histograms,
                "Histograms of weights and gradients at each epoch's end");
  cmd->add_option("--timeline", o.timeline,
                  "Chrome trace per rank (FILE.rank<r>.json, or {rank} in FILE); join with "
                  "'dtrain timeline merge'");
  cmd->add_option("--metrics-port", o.metrics_port,
                  "Serve Prometheus /metrics on P + local rank (0: a free port, printed; "
                  "-1: off)")
      ->capture_default_str();
  cmd->add_option("--metrics-host", o.metrics_host, "Address the metrics endpoint binds")
      ->capture_default_str();
  // Checkpoints.
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir,
                  "Resume from the newest valid checkpoint here and write new ones (rank 0)");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every,
                  "Checkpoint cadence: N or Nsteps (optimizer steps), Nepochs (epochs); "
                  "default 1epochs when --checkpoint-dir is given. A checkpoint is also "
                  "written after the last epoch")
      ->check(checkpoint_every_syntax());
  cmd->add_option("--keep-checkpoints", o.keep_checkpoints, "Newest checkpoints kept")
      ->capture_default_str()
      ->check(positive());
  // DDP.
  cmd->add_option("--bucket-cap-mb", o.ddp.bucket_cap_mb, "DDP bucket size in MiB")
      ->capture_default_str()
      ->check(positive());
  add_comm_hook_flags(cmd, &flags->hook);
  cmd->add_option("--accumulation-steps", o.accumulation_steps,
                  "Batches accumulated (no_sync) per optimizer step")
      ->capture_default_str()
      ->check(positive());
  cmd->add_flag("--find-unused-parameters", o.ddp.find_unused_parameters,
                "Tolerate parameters that get no gradient");
  cmd->add_flag("--gradient-as-bucket-view", o.ddp.gradient_as_bucket_view,
                "Let gradients alias DDP's buckets");
  // Parameter server (docs/ps.md).
  cmd->add_option(
      "--kvstore,--kv-store", flags->kvstore,
      "Gradients through a parameter server instead of allreduce: " + kvstore_type_names() +
          " (start with dtrain run --ps-servers S, and for "
          "dist_device_sync --ps-worker-per node; or run this same command in every "
          "process with DMLC_* set, as an MXJob does)");
  cmd->add_option("--staleness", o.kvstore_options.staleness,
                  "With --kvstore dist_async: how many pushes a worker may run ahead of the "
                  "slowest (SSP; 0: in step; -1: unbounded)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--kvstore-optimizer", flags->kvstore_optimizer,
                  "Where the optimizer runs with --kvstore: worker (servers sum), server "
                  "(servers run SGD), auto (server for dist_async)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "worker", "server"}));
  cmd->add_flag("-v,--verbose", o.verbose, "Print DDP's runtime statistics each epoch");
  cmd->callback([flags, exit_code] { *exit_code = run_train(*flags); });
}

void add_eval_command(CLI::App& root, int* exit_code) {
  auto flags = std::make_shared<EvalFlags>();
  EvalOptions& o = flags->options;
  CLI::App* cmd =
      root.add_subcommand("eval",
                          "Evaluate a model on a dataset's evaluation split, each sample once, "
                          "data-parallel (start it with 'dtrain run')");
  add_common_flags(cmd, o.model, o.dataset, flags->data_cache_size, o.threads, o.loader_threads,
                   o.channels_last, flags->group);
  cmd->add_option("--checkpoint", o.checkpoint_dir,
                  "Weights: the model of the newest valid checkpoint in this directory");
  cmd->add_option("--init-weights", o.init_weights,
                  "Weights: a state_dict saved by Python's torch.save");
  cmd->add_option("--batch-size", o.batch_size, "Samples per batch on each process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--logits-file", o.logits_file,
                  "Rank 0 writes every sample's logits here, in dataset order "
                  "(a [N, classes] float tensor for torch.load)");
  cmd->callback([flags, exit_code] { *exit_code = run_eval(*flags); });
}

}  // namespace dtrain::cli
