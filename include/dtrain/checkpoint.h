#pragma once
// Checkpoints: everything training needs to continue where it stopped, in a
// file that Python's torch.load opens (names -> tensors), so a run can move
// between dtrain and PyTorch.
//
// A checkpoint directory holds
//   checkpoint-<step, 8 digits>.pt         torch.save-compatible zip (below)
//   checkpoint-<step, 8 digits>.pt.crc32   "dtrain-checkpoint-1 size=<bytes> crc32=<8 hex>"
// The .pt file is written first (temporary file, fsync, rename), then its
// checksum file the same way, then the directory is fsynced: a checkpoint
// without a checksum file never finished and is ignored. "Newest" is the
// highest step in the name, not the file time.
//
// A directory may also be s3://bucket/prefix (dtrain/object_store.h): each
// checkpoint is one object <prefix>/checkpoint-<step>.pt, uploaded with
// Content-MD5 and If-None-Match: * (an existing object is never replaced;
// S3 shows an object whole or not at all, so there is no checksum object).
// The functions below take either kind; S3 failures are ObjectStoreErrors.
//
// The .pt file holds one dict (torch.load(path) returns it):
//   "format":           "dtrain-checkpoint-1"
//   "model":            {name: tensor}  parameters and buffers, as
//                       model.state_dict() names them (CPU tensors)
//   "optimizer":        torch.optim.SGD's or torch.optim.AdamW's state_dict():
//                       {"state": {index: {name: tensor}},
//                        "param_groups": [{hyperparameters...,
//                          "params": [indices]}, ...]}
//                       SGD: state "momentum_buffer"; groups "lr",
//                       "momentum", "dampening", "weight_decay",
//                       "nesterov", "maximize". AdamW: state "step" (float
//                       scalar tensor, as PyTorch >= 1.12), "exp_avg",
//                       "exp_avg_sq" ("max_exp_avg_sq" with amsgrad); groups
//                       "lr", "betas" (tuple), "eps", "weight_decay",
//                       "amsgrad", "maximize", "foreach", "capturable".
//                       Indices number the parameters group after group.
//   "epoch":            0-based epoch in progress (or next to start)
//   "step":             optimizer steps taken since the run began
//   "samples_in_epoch": samples of `epoch` consumed by all ranks together
//                       (the DistributedSampler position)
//   "world_size", "batch_size", "seed": of the run that saved it
//   "shuffle_block":    its LoaderOptions::shuffle_block (absent before it
//                       existed: 1)
//   "rng_state":        torch.get_rng_state() (uint8, the CPU generator)
//   "scaler":           GradScaler.state_dict() under fp16 loss scaling
//                       ({"scale", "growth_factor", "backoff_factor",
//                       "growth_interval", "_growth_tracker"}), else None
//                       (absent in older checkpoints)
//   "server_optimizer": with the optimizer on parameter servers (dtrain train
//                       --kvstore-optimizer server), the servers' state per
//                       parameter: {"momentum": {name: float32 tensor shaped
//                       like the parameter, MXNet's SGD momentum},
//                       "updates": {name: int, the servers' update count}};
//                       else None (absent in older checkpoints)
//   "comm_hook":        with a comm hook that keeps state (dtrain train
//                       --comm-hook powersgd), every rank's share of it:
//                       {"rank<r>.<entry>": tensor}, PowerSGD's entries
//                       "iter", "rng_draws", "total_numel_before_compression",
//                       "total_numel_after_compression", "next_stats_report"
//                       (int64 scalars), "error.<parameter>" (this rank's
//                       error feedback, PyTorch's divided by the world size)
//                       and "q.<parameter>" ([cols, rank]); else None (absent
//                       in older checkpoints)
//   "data_fingerprint": the training split's DataFingerprint (dtrain/data.h):
//                       {"samples", "classes", "names", "sizes", "etags"}
//                       (ints; the last three CRC-32s), so that a resume
//                       against changed data is refused; None when the
//                       loader gave none (absent in older checkpoints,
//                       which resume unchecked)
// The learning-rate schedule has no state of its own: the lr is a function of
// "step" (dtrain/lr_schedule.h), so "step" restores it.
//
/// Example:
/// ```
/// void save_then_resume(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
///                       int64_t step) {
///   dtrain::Checkpoint c;
///   c.model = dtrain::model_state(model);
///   c.optimizer = dtrain::optimizer_state(optimizer);
///   c.step = step;
///   dtrain::save_checkpoint("/ckpt", c);
///   std::vector<std::string> skipped;
///   if (auto found = dtrain::load_latest_checkpoint("/ckpt", &skipped)) {
///     dtrain::load_model_state(model, found->checkpoint.model, found->path);
///   }
/// }
/// ```

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dtrain/data.h"
#include "dtrain/optim.h"
#include "dtrain/weights.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace dtrain {

/// One parameter group's hyperparameters, as torch.optim's state_dict()
/// names them. Fields of the other optimizer keep their defaults.
struct ParamGroupState {
  double lr = 0.01;
  double weight_decay = 0;
  /// SGD.
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  /// AdamW.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool amsgrad = false;
  /// Parameters in the group; their indices follow the previous groups'.
  int64_t size = 0;
};

/// An optimizer's state in torch.optim's state_dict() layout (see the top of
/// this header).
struct OptimizerState {
  /// SGD or AdamW; in the file, AdamW's groups have "betas" and SGD's do
  /// not (the type itself is not written).
  OptimizerType type = OptimizerType::kSgd;
  std::vector<ParamGroupState> groups;
  /// One entry per parameter, in optimizer order (group after group): the
  /// state tensors by name (SGD "momentum_buffer"; AdamW "step", a float
  /// scalar, "exp_avg", "exp_avg_sq", "max_exp_avg_sq"); empty where the
  /// optimizer has no state for it yet.
  std::vector<std::map<std::string, at::Tensor>> state;
};

/// A GradScaler's state_dict() values (dtrain/amp.h, torch.cuda.amp.GradScaler).
struct ScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;
};

/// The parameter servers' optimizer state (KVStore::pull_optimizer_state) of
/// every parameter, by the parameter's name: what --kvstore-optimizer server
/// needs to resume exactly (the workers' own optimizer never steps there).
struct ServerOptimizerState {
  /// MXNet's SGD momentum (mom = momentum·mom − lr·(g + wd·w); w += mom),
  /// float32, shaped like the parameter, in the parameters' name order.
  NamedTensors momentum;
  /// The servers' update count of each parameter's key.
  std::map<std::string, int64_t> updates;
};

/// What a checkpoint holds (the file's layout is at the top of this header).
struct Checkpoint {
  NamedTensors model;
  OptimizerState optimizer;
  /// 0-based epoch in progress; after a finished epoch, the next one.
  int64_t epoch = 0;
  /// Optimizer steps since the run began (it names the file).
  int64_t step = 0;
  /// Samples of `epoch` consumed by all ranks together: steps taken in the
  /// epoch x batch size x world size. With DistributedSampler's layout these
  /// are exactly positions [0, samples_in_epoch) of the epoch's permutation,
  /// whatever the world size.
  int64_t samples_in_epoch = 0;
  int world_size = 1;
  int64_t batch_size = 0;
  uint64_t seed = 0;
  /// The training loader's shuffle block (Note [Block order]): the order
  /// samples_in_epoch counts positions of.
  int64_t shuffle_block = 1;
  /// The CPU generator's state (cpu_rng_state()); may be undefined.
  at::Tensor rng_state;
  /// The fp16 loss scaler's state; nullopt without loss scaling.
  std::optional<ScalerState> scaler;
  /// The parameter servers' optimizer state; nullopt when the optimizer ran
  /// on the workers (and in checkpoints written before it existed).
  std::optional<ServerOptimizerState> server_optimizer;
  /// Every rank's share of the comm hook's state (CommHook::state(), e.g.
  /// PowerSGD's error feedback and Qs), keyed "rank<r>.<entry>"; nullopt for
  /// a stateless hook (and in checkpoints written before it existed).
  std::optional<NamedTensors> comm_hook_state;
  /// The training split's fingerprint (Loader::fingerprint()); nullopt when
  /// unknown (and in checkpoints written before it existed: not checked).
  std::optional<DataFingerprint> data_fingerprint;
};

// ---- State of models, optimizers and generators -------------------------------

/// CPU copies of the module's parameters and buffers, keyed and ordered as
/// PyTorch's state_dict() (dtrain::state_dict() in dtrain/weights.h), so the
/// checkpoint's "model" loads into the torchvision model with strict=True.
NamedTensors model_state(const torch::nn::Module& module);

/// Copies `state` into the module's parameters and buffers (on their
/// devices). Throws DataError naming `origin` and the entry when a name is
/// missing or unexpected or a shape differs; the module is unchanged then.
void load_model_state(torch::nn::Module& module, const NamedTensors& state,
                      const std::string& origin);

/// The optimizer's hyperparameters and per-parameter state (CPU copies).
/// Supports torch::optim::SGD and torch::optim::AdamW (any number of
/// parameter groups); throws InvalidArgument for another optimizer.
OptimizerState optimizer_state(const torch::optim::Optimizer& optimizer);

/// Restores the per-parameter state into `optimizer` (on the parameters'
/// devices). Hyperparameters stay as configured: a resumed run may change
/// the learning rate. Throws DataError naming `origin` when the optimizer
/// type, the group sizes, a state entry's name or a tensor's shape differ;
/// the optimizer is unchanged then.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const OptimizerState& state,
                          const std::string& origin);

/// torch.get_rng_state() / torch.set_rng_state(): the default CPU generator.
/// Thread-safe (the generator's own mutex).
at::Tensor cpu_rng_state();
void set_cpu_rng_state(const at::Tensor& state);

// ---- The file format ------------------------------------------------------------

/// The bytes of a checkpoint file (torch.save's zip layout).
std::vector<char> encode_checkpoint(const Checkpoint& checkpoint);

/// Parses bytes from encode_checkpoint(). Files Python's torch.save wrote
/// are read as far as LibTorch's unpickler can: 1.13's knows neither
/// OrderedDict (read as None) nor one-entry dicts (SETITEM), so a checkpoint
/// edited and re-saved in Python is refused there. Throws DataError naming
/// `origin` when the bytes are not a dtrain-checkpoint-1 (unreadable pickle,
/// wrong format tag, missing key, wrong type).
Checkpoint decode_checkpoint(const std::vector<char>& bytes, const std::string& origin);

// ---- Checkpoint directories -------------------------------------------------------

/// `<dir>/checkpoint-<step, 8 digits>.pt`.
std::string checkpoint_path(const std::string& dir, int64_t step);

/// Checkpoint files (by name, valid or not) in `dir`, newest (highest step)
/// first; empty when `dir` does not exist.
std::vector<std::string> list_checkpoints(const std::string& dir);

/// Writes `checkpoint` as checkpoint_path(dir, checkpoint.step) atomically
/// (layout at the top of this header), creating `dir` if needed, then
/// removes all but the newest `keep_last` checkpoints (by name) and stray
/// temporary files: one writer per directory. Overwrites a checkpoint of the
/// same step. Returns the path. Throws InvalidArgument for keep_last < 1 and
/// Error naming the path and the failed operation (create, write, fsync,
/// rename) when the directory cannot be written; the previous checkpoints
/// are intact then.
std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint,
                            int keep_last = 3);

/// Why the checkpoint file at `path` is unusable, or "" when its checksum
/// file exists and matches its size and CRC-32 (the contents are not parsed).
std::string verify_checkpoint_file(const std::string& path);

struct LoadedCheckpoint {
  std::string path;
  Checkpoint checkpoint;
};

/// The newest checkpoint in `dir` that verifies and parses. Each newer one
/// passed over is appended to `skipped` (when not null) as "<path>: <reason>"
/// (no checksum file, truncated, checksum mismatch, not a dtrain checkpoint).
/// nullopt when `dir` is missing or holds no valid checkpoint. Never throws
/// for a bad file; throws Error only when `dir` cannot be listed.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir,
                                                       std::vector<std::string>* skipped = nullptr);

}  // namespace dtrain
