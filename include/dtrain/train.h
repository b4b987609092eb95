#pragma once
// The batteries-included training loop behind `dtrain train`, reachable from
// the library so that users' own programs get the same behaviour.
//
/// Example:
/// ```
/// std::vector<dtrain::EpochMetrics> train_resnet50() {
///   dtrain::ProcessGroup pg = dtrain::init_process_group();
///   dtrain::TrainOptions o;
///   o.model = "resnet50";
///   o.dataset.name = "imagefolder";
///   o.dataset.data_dir = "/data/imagenet";
///   o.optimizer.type = dtrain::OptimizerType::kSgd;  // dtrain/optim.h
///   o.optimizer.lr = 0.1;
///   o.optimizer.nesterov = true;
///   o.optimizer.weight_decay = 1e-4;
///   o.optimizer.norm_weight_decay = 0.0;
///   o.lr_schedule = dtrain::LrScheduleKind::kCosine;  // dtrain/lr_schedule.h
///   o.lr_warmup_epochs = 5;
///   o.label_smoothing = 0.1;
///   o.amp = dtrain::AmpMode::kBf16;  // dtrain/amp.h
///   return dtrain::train(o, pg, &std::cout);
/// }
/// ```

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/ddp.h"
#include "dtrain/device.h"
#include "dtrain/kvstore.h"
#include "dtrain/lr_schedule.h"
#include "dtrain/optim.h"
#include "dtrain/options.h"

namespace dtrain {

struct LiveOptions;  // dtrain/live.h

/// How TrainOptions::lr_scaling turns optimizer.lr into the base lr: kNone
/// keeps it; kLinear multiplies it by the global batch (batch_size x world
/// size x accumulation_steps) / 256 (Goyal et al.).
enum class LrScaling { kNone, kLinear };

/// "none", "linear".
std::string to_string(LrScaling scaling);

/// The rule to_string() spells `name` as; throws InvalidArgument naming the
/// value and listing the valid ones otherwise.
LrScaling parse_lr_scaling(const std::string& name);

/// A boundary between optimizer steps, as TrainOptions::step_observer sees it.
struct TrainStep {
  /// Optimizer steps taken so far: the run's starting step (0, or a resumed
  /// checkpoint's) at the call before its first step, then one more at each
  /// call.
  int64_t step = 0;
  /// The 0-based epoch the step belongs to.
  int64_t epoch = 0;
  /// This rank's training loss of the step's last batch (as in the progress
  /// lines: before the division by accumulation_steps), already read from
  /// the device; NaN at the call before the first step.
  double loss = 0;
  /// The learning rate of the step (of the next step at the first call).
  double lr = 0;
};

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
  /// Evaluate on the whole test split after every epoch; false: no
  /// evaluation (EpochMetrics' test fields are 0), e.g. for a benchmark.
  bool evaluate_every_epoch = true;
  /// Optimizer, learning rate and weight decay groups (dtrain/optim.h);
  /// optimizer.lr is the base learning rate before lr_scaling.
  OptimizerOptions optimizer;
  /// kNone, or kLinear: the base lr is multiplied by the global batch
  /// (batch_size x world size x accumulation_steps) / 256 (Goyal et al.).
  LrScaling lr_scaling = LrScaling::kNone;
  /// Learning-rate schedule, stepped after every optimizer step (see
  /// lr_schedule_for()): constant, step, multistep or cosine.
  LrScheduleKind lr_schedule = LrScheduleKind::kConstant;
  /// step: epochs between decays (StepLR's step_size, in epochs).
  int64_t lr_step_size = 30;
  /// multistep: epochs at which the lr decays (MultiStepLR's milestones).
  std::vector<int64_t> lr_milestones;
  /// step, multistep: decay factor.
  double lr_gamma = 0.1;
  /// cosine: the final lr (eta_min).
  double lr_min = 0;
  /// Linear warm-up over this many epochs or optimizer steps (at most one
  /// of the two non-zero; 0: none), from lr x lr_warmup_decay.
  int64_t lr_warmup_epochs = 0;
  int64_t lr_warmup_steps = 0;
  double lr_warmup_decay = 0.01;
  /// Label smoothing of the training loss (F.cross_entropy's
  /// label_smoothing), in [0, 1).
  double label_smoothing = 0;
  /// Clip the gradients' global 2-norm to this after each synchronised
  /// backward (torch.nn.utils.clip_grad_norm_); 0: no clipping.
  double clip_grad_norm = 0;
  /// Parameters, buffers and inputs in channels-last (NHWC) memory format.
  bool channels_last = false;
  /// Mixed precision (dtrain/amp.h): kNone, kBf16 (CPU and CUDA) or kFp16
  /// (CUDA; with PyTorch's dynamic loss scaling). Autocast covers the
  /// forward pass and the loss on the training thread and its cast cache is
  /// cleared after each forward; under fp16 the gradients are unscaled
  /// before clipping and a step whose gradients overflowed is skipped on
  /// every rank (the step counter and the schedule still advance, as with
  /// PyTorch's scheduler).
  AmpMode amp = AmpMode::kNone;
  /// When not empty, a state_dict file (dtrain/weights.h: Python's
  /// torch.save(dict(model.state_dict()), PATH), save_weights(), or a
  /// checkpoint) loaded into the model right after it is created, on every
  /// rank; a checkpoint the run resumes from takes precedence.
  std::string init_weights;
  /// Seeds model initialisation and the sampler's permutations.
  uint64_t seed = 0;
  /// Intra-op threads per process; 0 keeps LibTorch's default (which
  /// follows OMP_NUM_THREADS).
  int threads = 0;
  /// Where this rank trains (dtrain/device.h): automatic() (the default:
  /// cuda:<local rank> when LibTorch has a usable GPU, else cpu), cpu(),
  /// cuda() (cuda:<local rank>) or cuda(N); parse_device_choice() reads the
  /// text form "auto", "cpu", "cuda", "cuda:N".
  DeviceChoice device;
  /// Loader worker threads (0: load on the training thread).
  int loader_threads = 0;
  /// Gradients of this many consecutive batches are accumulated (no_sync)
  /// before one synchronised optimizer step.
  int accumulation_steps = 1;
  /// Reducer options (bucket sizes, comm hook, ...).
  DdpOptions ddp;
  /// Parameter-server training (docs/ps.md, dtrain/kvstore_ddp.h): nullopt
  /// (the default) reduces gradients with DDP's allreduce over the process
  /// group; a type sends each DDP bucket through a store of that type
  /// instead, pushed as it fills during backward and pulled before backward
  /// returns (a ddp.comm_hook other than allreduce_hook() is then
  /// InvalidArgument). The store is the one passed to train(options, pg,
  /// kvstore, log), or one that train(options, pg, log) opens with
  /// create_kvstore(*kvstore, kvstore_options, kvstore_env)
  /// (dtrain/kvstore_torch.h, which forms dist_device_sync's node group);
  /// in a process whose DMLC_ROLE is scheduler or server, that serves the
  /// role until the job ends and train() returns no metrics (Note [Serving
  /// from create] in src/ps/job/route.cpp). The job's workers must be the
  /// group's ranks (`dtrain run --ps-servers S` sets DMLC_* and
  /// RANK/WORLD_SIZE alike; with only DMLC_* open the store first, form the
  /// group with kv_process_group and pass both); under dist_device_sync
  /// they are the nodes.
  std::optional<KVStoreType> kvstore;
  /// What a failed peer costs (docs/live_recovery.md):
  ///   kRestart  the default: a failure ends train() with a DistError; the
  ///             launcher restarts the job, which resumes from checkpoint_dir;
  ///   kLive     the ranks are members of a dtrain::LiveGroup (dtrain/live.h,
  ///             LiveOptions::from_env of the process environment, as
  ///             `dtrain run --recovery live` sets it): the survivors of a
  ///             loss carry on in-process at the same step with the same
  ///             global batch (WORLD_SIZE logical ranks), a replacement
  ///             (DTRAIN_LIVE_JOIN=1) receives model, optimizer, loss
  ///             scaler, position and step from a live member. Not with
  ///             kvstore (InvalidArgument: the parameter server recovers by
  ///             its own mechanism, docs/ps.md).
  /// `dtrain train` sets kLive when DTRAIN_RECOVERY=live.
  enum class Recovery { kRestart, kLive };
  Recovery recovery = Recovery::kRestart;
  /// Where the optimizer runs under a kvstore: kWorker (the servers sum,
  /// every worker steps its own optimizer on the averaged gradient: any
  /// optimizer, schedule, clipping or AMP; results equal DDP's), kServer
  /// (MXNet's update_on_kvstore: the servers run SGD with optimizer.lr,
  /// momentum and weight_decay, constant schedule, no clipping or fp16; the
  /// momentum is not checkpointed), or kAuto (server for dist_async, else
  /// worker).
  KVStoreOptimizer kvstore_optimizer = KVStoreOptimizer::kAuto;
  /// Timeouts and heartbeats of the store train() opens.
  KVStoreOptions kvstore_options;
  /// Where that store reads DMLC_*; empty: the process environment.
  EnvLookup kvstore_env;
  /// When not empty, rank 0 writes one JSON object per epoch here (keys
  /// epoch, train_loss, test_acc, images_per_sec, epoch_seconds,
  /// world_size); the file is created (truncated) before training starts,
  /// or appended to when the run resumes from a checkpoint (an epoch that
  /// finished after the last checkpoint then appears twice).
  std::string metrics_file;
  /// Checkpoint directory (dtrain/checkpoint.h); empty: no checkpoints and
  /// no resume. When set, training starts from the newest valid checkpoint
  /// in it, and rank 0 writes one at the configured cadence and after the
  /// last epoch. Rank 0 alone reads and writes it (see train()). May be
  /// s3://bucket/prefix (one object per checkpoint, credentials and endpoint
  /// from AWS_* as the AWS SDKs read them; dtrain/object_store.h).
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
  /// Rank 0 writes the run's lines to train()'s log: the configuration,
  /// checkpoints skipped and resumed from, progress, one line per epoch.
  /// false: only what every rank writes there (the metrics endpoint's
  /// address), for a program that reports the run itself (dtrain bench train).
  bool log_run = true;
  /// Progress within an epoch, printed by rank 0 to `log`:
  ///   kNone     nothing between the epoch lines
  ///   kLines    "  epoch E/N step S/T  images/sec X  loss L  ETA m:ss" every
  ///             progress_every_steps steps or progress_every_seconds seconds
  ///             (whichever comes first; 0 disables that trigger)
  ///   kInPlace  the same line redrawn in place ("\r", at most 10 times a second), for a
  ///             terminal (under dtrain run: the launcher's); erased before the epoch line
  /// images/sec is rank 0's rate x world size; loss is rank 0's mean so far.
  enum class Progress { kNone, kLines, kInPlace };
  Progress progress = Progress::kLines;
  int64_t progress_every_steps = 100;
  double progress_every_seconds = 30;

  // Observability (docs/observability.md). Every sink is opened before any
  // data is read; each one off costs nothing in the loop.
  /// TensorBoard log directory (created with its parents), written by rank 0:
  /// the configuration as text at the start; every tensorboard_every
  /// optimizer steps train/loss (rank 0's mean over the steps), train/lr,
  /// train/images_per_sec (all ranks), train/data_wait_fraction,
  /// train/exposed_comm_fraction and, under fp16, train/loss_scale; after
  /// each epoch's evaluation epoch/train_loss, epoch/test_top1,
  /// epoch/test_top5, epoch/test_loss, epoch/images_per_sec, at the global
  /// step. A directory that cannot be created is an InvalidArgument naming
  /// it. Empty: none.
  std::string tensorboard;
  int64_t tensorboard_every = 10;
  /// Also histograms of every parameter (weights/<name>, after the epoch)
  /// and its gradient (gradients/<name>, the epoch's last synchronised
  /// gradients, unscaled) at each epoch's end.
  bool tensorboard_histograms = false;
  /// Chrome-trace timeline per rank (dtrain/timeline.h): the file of rank r
  /// is timeline_path_for_rank(timeline, r, world size). Spans: epoch N,
  /// data wait, forward, backward, optimizer step, evaluate, checkpoint, and
  /// each DDP bucket's allreduce on its own track ("pushpull bucket i" under
  /// a kvstore). Empty: none.
  std::string timeline;
  /// Prometheus endpoint (dtrain/metrics.h) on metrics_port + local rank of
  /// every rank, labelled with rank, node (DTRAIN_NODE_NAME, else the host
  /// name) and run id (TORCHELASTIC_RUN_ID, else "none"); dtrain_restarts is
  /// TORCHELASTIC_RESTART_COUNT; GPU series for the rank's GPU on CUDA runs.
  /// 0: a free port per rank; -1: none. The address is printed to the log
  /// passed to train(). A port in use is an InvalidArgument naming host:port.
  int metrics_port = -1;
  /// Address the endpoint binds ("127.0.0.1": this host only).
  std::string metrics_host = "0.0.0.0";
  /// When set, called on every rank on the training thread after each
  /// optimizer step with the step count so far and the reducer's statistics
  /// (for custom monitoring and tests; it must not call into train()).
  std::function<void(int64_t step, const DdpStats& ddp)> on_step;
  /// When set, called on every rank on the training thread once before the
  /// run's first optimizer step and after each optimizer step (after
  /// on_step), with the step count, epoch, this rank's loss and the learning
  /// rate. It may run collectives over the group (every rank calls it at the
  /// same steps), e.g. to time steps as dtrain bench train does; it must not
  /// call into train(). Empty (the default): one test per step.
  std::function<void(const TrainStep& step)> step_observer;

  DTRAIN_SETTER(TrainOptions, model)
  DTRAIN_SETTER(TrainOptions, dataset)
  DTRAIN_SETTER(TrainOptions, epochs)
  DTRAIN_SETTER(TrainOptions, batch_size)
  DTRAIN_SETTER(TrainOptions, eval_batch_size)
  DTRAIN_SETTER(TrainOptions, evaluate_every_epoch)
  DTRAIN_SETTER(TrainOptions, optimizer)
  DTRAIN_SETTER(TrainOptions, lr_scaling)
  DTRAIN_SETTER(TrainOptions, lr_schedule)
  DTRAIN_SETTER(TrainOptions, lr_step_size)
  DTRAIN_SETTER(TrainOptions, lr_milestones)
  DTRAIN_SETTER(TrainOptions, lr_gamma)
  DTRAIN_SETTER(TrainOptions, lr_min)
  DTRAIN_SETTER(TrainOptions, lr_warmup_epochs)
  DTRAIN_SETTER(TrainOptions, lr_warmup_steps)
  DTRAIN_SETTER(TrainOptions, lr_warmup_decay)
  DTRAIN_SETTER(TrainOptions, label_smoothing)
  DTRAIN_SETTER(TrainOptions, clip_grad_norm)
  DTRAIN_SETTER(TrainOptions, channels_last)
  DTRAIN_SETTER(TrainOptions, amp)
  DTRAIN_SETTER(TrainOptions, init_weights)
  DTRAIN_SETTER(TrainOptions, seed)
  DTRAIN_SETTER(TrainOptions, threads)
  DTRAIN_SETTER(TrainOptions, device)
  DTRAIN_SETTER(TrainOptions, loader_threads)
  DTRAIN_SETTER(TrainOptions, accumulation_steps)
  DTRAIN_SETTER(TrainOptions, ddp)
  DTRAIN_SETTER(TrainOptions, metrics_file)
  DTRAIN_SETTER(TrainOptions, checkpoint_dir)
  DTRAIN_SETTER(TrainOptions, checkpoint_every_steps)
  DTRAIN_SETTER(TrainOptions, checkpoint_every_epochs)
  DTRAIN_SETTER(TrainOptions, keep_checkpoints)
  DTRAIN_SETTER(TrainOptions, verbose)
  DTRAIN_SETTER(TrainOptions, log_run)
  DTRAIN_SETTER(TrainOptions, progress)
  DTRAIN_SETTER(TrainOptions, progress_every_steps)
  DTRAIN_SETTER(TrainOptions, progress_every_seconds)
  DTRAIN_SETTER(TrainOptions, kvstore)
  DTRAIN_SETTER(TrainOptions, recovery)
  DTRAIN_SETTER(TrainOptions, kvstore_optimizer)
  DTRAIN_SETTER(TrainOptions, kvstore_options)
  DTRAIN_SETTER(TrainOptions, kvstore_env)
  DTRAIN_SETTER(TrainOptions, tensorboard)
  DTRAIN_SETTER(TrainOptions, tensorboard_every)
  DTRAIN_SETTER(TrainOptions, tensorboard_histograms)
  DTRAIN_SETTER(TrainOptions, timeline)
  DTRAIN_SETTER(TrainOptions, metrics_port)
  DTRAIN_SETTER(TrainOptions, metrics_host)
  DTRAIN_SETTER(TrainOptions, on_step)
  DTRAIN_SETTER(TrainOptions, step_observer)
};

/// What one epoch measured (identical on every rank).
struct EpochMetrics {
  int64_t epoch = 0;      ///< 1-based
  double train_loss = 0;  ///< with label smoothing when it is on
  double test_acc = 0;    ///< top-1, fraction in [0, 1]
  double test_top5 = 0;   ///< top-5 (top-k with k = classes when fewer than 5)
  double test_loss = 0;   ///< plain cross-entropy on the test split
  double lr = 0;          ///< the learning rate of the epoch's last step
  /// fp16 loss scale after the epoch; 0 when no loss scaling is in use
  /// (written as null).
  double loss_scale = 0;
  double images_per_sec = 0;  ///< training images of all ranks per second
  double epoch_seconds = 0;   ///< training plus evaluation
  int world_size = 1;
};

/// One JSON object, as written to the metrics file: epoch, train_loss,
/// test_acc (top-1), test_top5, test_loss, lr, loss_scale (null when not
/// used), images_per_sec, epoch_seconds, world_size.
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
/// restores the model, the optimizer's state (SGD momentum buffers or AdamW
/// moments and step counts), the fp16 loss scaler, the CPU generator and the
/// step counter (from which the learning-rate schedule continues), and continues epoch E
/// at position samples_in_epoch of its permutation (Note [Sample cursor] in
/// dtrain/sampler.h): DistributedSampler's permutation does not depend on
/// the world size and rank r takes every W-th position, so the saved run
/// consumed exactly positions [0, samples_in_epoch), and rank r of the
/// resumed run takes samples_in_epoch + r, + r + W, ... (Loader::resume_at;
/// skip_to when that is a whole batch of this run). A different world size
/// or batch size neither re-reads nor skips a sample; with
/// dataset.train.exact (--exactly-once) the epoch's tail is not padded
/// either, so every sample is trained exactly once per epoch.
/// Epoch E's metrics cover the batches trained after the restart.
std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::ostream* log);
/// As above, with DDP's buckets through `kvstore`, a store of type
/// options.kvstore the caller opened (KVStoreOpen::take() of
/// create_kvstore) as one of pg's workers; train() closes it at the end.
/// Null: as train(options, pg, log). A store without options.kvstore, or
/// of another type, is InvalidArgument.
std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::shared_ptr<KVStore> kvstore, std::ostream* log);

/// Under live recovery (docs/live_recovery.md): trains `options` as a member
/// of a dtrain::LiveGroup made from `live` (LiveOptions::from_env of what
/// `dtrain run --recovery live` sets; on_event is kept and also feeds the
/// observers), instead of over a fixed group: WORLD_SIZE logical ranks, each
/// reading DistributedSampler rank r of W0's batches, run on the live members
/// (several each after a loss); an optimizer step only when every member
/// finished the step (should_commit), else the step is redone; a joiner
/// receives model, optimizer, loss scaler and CPU generator from a live
/// member. Differences from train() (Note [Live training] in
/// src/train/live_trainer.cpp): accumulation_steps must be 1; no
/// checkpoints; each member evaluates the whole test split; train_loss is
/// this member's. Throws InvalidArgument for options live recovery does not
/// support (options.kvstore among them), FencedError / BelowMinWorkersError
/// (dtrain/live.h) when this member cannot go on.
std::vector<EpochMetrics> train(const TrainOptions& options, const LiveOptions& live,
                                std::ostream* log);

/// The last whole batch of this run at or before `samples_in_epoch` samples
/// of the epoch: floor(samples / (batch_size x world_size)), at most
/// `batches_per_epoch`. train() resumes at the exact sample instead (see
/// train()); this stays for callers that position a loader by batch.
int64_t resume_batch(int64_t samples_in_epoch, int64_t batch_size, int world_size,
                     int64_t batches_per_epoch);

/// The schedule train() follows, in optimizer steps: steps_per_epoch is
/// ceil(batches per epoch / accumulation_steps); epochs are converted with
/// it; the base lr is optimizer.lr scaled by lr_scaling for `world_size`.
LrSchedule lr_schedule_for(const TrainOptions& options, int64_t steps_per_epoch, int world_size);

// ---- Steps of train(), usable alone ------------------------------------------------

/// Per-sample counts over a batch: how many targets are the top-1 and among
/// the top-5 logits (k clamped to the number of classes), and the summed
/// cross-entropy. logits [B, C], targets [B] int64.
struct ClassificationCounts {
  int64_t samples = 0;
  int64_t top1 = 0;
  int64_t top5 = 0;
  double loss_sum = 0;
  ClassificationCounts& operator+=(const ClassificationCounts& o);
};
ClassificationCounts classification_counts(const at::Tensor& logits, const at::Tensor& targets);

/// The training loss: mean cross-entropy with label smoothing
/// (F.cross_entropy(logits, targets, label_smoothing=...)).
at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& targets,
                               double label_smoothing);

/// Converts the module's 4-D parameters and buffers (and their gradients)
/// to channels-last memory format in place, as
/// model.to(memory_format=torch.channels_last) does.
void to_channels_last(torch::nn::Module& module);

/// Whether the optimizer runs on the parameter servers for `options`
/// (TrainOptions::kvstore_optimizer with kAuto resolved: the servers for
/// dist_async, else the workers); false without a kvstore.
bool optimizer_on_servers(const TrainOptions& options);

/// Checks options that need no data or peers (sizes, counts, names,
/// optimizer, schedule, amp against the device, a CUDA device without a
/// GPU); throws InvalidArgument naming the option field (e.g.
/// "TrainOptions::batch_size must be positive, got 0"; LrSchedule's and
/// OptimizerOptions' fields for the schedule and optimizer), listing the
/// valid values for an unknown model, dataset or optimizer.
void validate(const TrainOptions& options);

}  // namespace dtrain
