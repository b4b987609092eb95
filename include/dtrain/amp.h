#pragma once
// Automatic mixed precision, as torch.autocast and torch.cuda.amp.GradScaler
// do it in Python:
//   - AutocastGuard runs the ops of a region (the forward pass and the loss)
//     in bf16 or fp16 where that is safe, on the calling thread;
//   - GradScaler multiplies the loss by a large factor so that small fp16
//     gradients do not underflow, divides the gradients back before the
//     optimizer step, skips steps whose gradients overflowed, and adapts the
//     factor (PyTorch's algorithm and defaults).
// bf16 needs no scaler (its range is fp32's); fp16 does. Parameters stay
// fp32: autocast casts inside the ops.
//
// fp16 on a GPU (with bf16, drop the scaler or construct it disabled):
/// Example:
/// ```
/// void train_fp16(dtrain::DistributedDataParallel<torch::nn::SequentialImpl>& ddp,
///                 torch::optim::Optimizer& opt, dtrain::Loader& loader) {
///   dtrain::GradScaler scaler;  // 2^16, x2 after 2000 clean steps
///   for (dtrain::Batch& batch : loader) {
///     opt.zero_grad();
///     at::Tensor loss;
///     {
///       dtrain::AutocastGuard autocast(c10::DeviceType::CUDA, at::kHalf);
///       loss = torch::nn::functional::cross_entropy(ddp.forward(batch.inputs), batch.targets);
///     }                               // autocast off, cache cleared
///     scaler.scale(loss).backward();  // DDP averages scaled gradients
///     scaler.unscale_(opt);           // optional: to clip true gradients
///     torch::nn::utils::clip_grad_norm_(ddp.module().parameters(), 1.0);
///     scaler.step(opt);  // skipped on inf/NaN
///     scaler.update();   // x0.5 after a skip, x2 after 2000 clean
///   }
/// }
/// ```
//
// With several ranks, give the scaler the ProcessGroup: unscale_ then sums
// found-inf across ranks, so all ranks skip or step together even when only
// one rank's gradients overflowed after the reduction (or were never reduced).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "dtrain/comm.h"
#include "dtrain/options.h"

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace dtrain {

class DistributedOptimizer;

// ---- Autocast ---------------------------------------------------------------

/// Mixed precision of a training run (TrainOptions::amp): none, autocast to
/// bfloat16, or autocast to float16 with dynamic loss scaling.
enum class AmpMode { kNone, kBf16, kFp16 };

/// "none", "bf16", "fp16".
std::string to_string(AmpMode mode);

/// The mode to_string() spells `name` as; throws InvalidArgument naming the
/// value and listing the valid ones otherwise.
AmpMode parse_amp_mode(const std::string& name);

/// The autocast dtype of `mode`: kBFloat16, kHalf; kNone has none (throws
/// InvalidArgument).
at::ScalarType amp_dtype(AmpMode mode);

/// The autocast dtype named by an AmpMode name: "bf16" -> kBFloat16, "fp16" ->
/// kHalf. Throws InvalidArgument naming the value and the valid ones
/// otherwise ("none" is the caller's business: no autocast at all).
at::ScalarType amp_dtype_from_name(const std::string& name);

/// Throws InvalidArgument when autocast to `dtype` on `device_type` is not
/// supported: fp16 on the CPU ("fp16 autocast needs a CUDA device; use bf16
/// on the CPU"), CUDA without a GPU, a device type other than CPU and CUDA,
/// a dtype other than bf16 (CPU) or fp16/bf16 (CUDA). Lets a program refuse
/// bad settings before training starts; AutocastGuard checks the same.
void check_autocast(c10::DeviceType device_type, at::ScalarType dtype);

/// True for the dtypes whose gradients need loss scaling (fp16).
bool needs_grad_scaler(at::ScalarType dtype);

/// Enables autocast for `device_type` (CPU or CUDA) with `dtype` on the
/// calling thread for its lifetime, like Python's `with torch.autocast(...)`:
/// the previous enabled flag and dtype of that device type are restored on
/// destruction, and the cast cache is cleared when the outermost guard ends
/// (autocast keeps fp16/bf16 copies of fp32 leaf tensors, i.e. weights, for
/// the region; they must not outlive the forward pass, or an optimizer step
/// would leave them stale). With enabled = false the region runs with
/// autocast off (torch.autocast(enabled=False) nested in an enabled region)
/// and nothing is checked. Throws what check_autocast throws; the thread's
/// state is unchanged then. Autocast state is per thread: a guard affects
/// only ops run on the thread that created it, and must be destroyed there.
/// Not copyable or movable.
///
/// Preconditions: (device_type, dtype) is a pair check_autocast() accepts;
/// nested guards on one thread end in the reverse order of their creation.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
};

/// Whether autocast is enabled for `device_type` on the calling thread, and
/// with which dtype (for tests and diagnostics).
bool autocast_enabled(c10::DeviceType device_type);
at::ScalarType autocast_dtype(c10::DeviceType device_type);

// ---- Gradient scaling --------------------------------------------------------

struct GradScalerOptions {
  /// Scale of the first step (PyTorch: 2^16).
  double init_scale = 65536.0;
  /// The scale is multiplied by this after growth_interval consecutive
  /// steps without inf/NaN gradients; must be > 1.
  double growth_factor = 2.0;
  /// ... and by this after a step with inf/NaN gradients; must be in (0, 1).
  double backoff_factor = 0.5;
  /// Clean steps before the scale grows; must be >= 1.
  int64_t growth_interval = 2000;
  /// false: scale() returns the loss unchanged, step() is the optimizer's
  /// step, everything else does nothing (PyTorch's `enabled`). Use it for
  /// fp32 and bf16 runs so the training loop is written once.
  bool enabled = true;
  /// The ranks that must agree on skipping a step. With more than one rank,
  /// unscale_ (and step, which calls it) sums found-inf across the group:
  /// one small allreduce per optimizer and step, a collective that every
  /// rank must reach. The default single-process group adds nothing.
  ProcessGroup process_group;

  DTRAIN_SETTER(GradScalerOptions, init_scale)
  DTRAIN_SETTER(GradScalerOptions, growth_factor)
  DTRAIN_SETTER(GradScalerOptions, backoff_factor)
  DTRAIN_SETTER(GradScalerOptions, growth_interval)
  DTRAIN_SETTER(GradScalerOptions, enabled)
  DTRAIN_SETTER(GradScalerOptions, process_group)
};

/// PyTorch's GradScaler (torch/cuda/amp/grad_scaler.py in 1.13,
/// torch/amp/grad_scaler.py in 2.x) for CPU and CUDA tensors: same defaults,
/// same update rule (ATen's _amp_update_scale_), same order of operations
/// and errors, same state_dict keys. Per iteration:
///   scale(loss).backward(); [unscale_(opt); clip;] step(opt); update();
/// The scale lives on the device of the first loss passed to scale().
///
/// Gradients must be fp32 (or fp64): keep parameters in fp32 and let
/// autocast cast inside ops; unscaling fp16 gradients throws, as in PyTorch.
///
/// Data parallelism: with DistributedDataParallel the gradients are already
/// averaged when backward returns, so unscale_/step see the averaged scaled
/// gradients (with no_sync accumulation, call unscale_/step only after the
/// synchronising backward). With DistributedOptimizer use the overloads
/// below: unscale_ averages the gradients first (synchronize()), then
/// unscales, and step never averages twice.
///
/// Not thread-safe. Optimizers are identified by address; they are not
/// owned and must stay alive between unscale_/step and update(). Movable,
/// not copyable (a copy would share the scale tensor).
///
/// Preconditions: with a process group, every rank calls scale, unscale_,
/// step and update in the same sequence (unscale_ is collective there).
class GradScaler {
 public:
  /// Throws InvalidArgument for factors or an interval out of range.
  explicit GradScaler(GradScalerOptions options = {});
  GradScaler(GradScaler&&) = default;
  GradScaler& operator=(GradScaler&&) = default;
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  /// loss * scale (a new tensor; the loss's dtype promoted with fp32, as in
  /// PyTorch). The first call creates the scale on loss's device. Disabled:
  /// returns `loss`.
  at::Tensor scale(const at::Tensor& loss);

  /// Divides the gradients of `optimizer`'s parameters by the scale in place
  /// and records whether any was inf or NaN (summed across
  /// options.process_group). At most once per optimizer between update()s,
  /// and before step(); throws InvalidArgument otherwise, or when scale()
  /// has not been called yet, or for fp16 gradients. Collective when the
  /// group has more than one rank.
  void unscale_(torch::optim::Optimizer& optimizer);
  /// Averages the gradients across the DistributedOptimizer's group
  /// (synchronize()), then unscales them as above.
  void unscale_(DistributedOptimizer& optimizer);

  /// Unscales (unless unscale_ was called for this optimizer since the last
  /// update) and runs optimizer.step() unless an inf/NaN was found. Returns
  /// whether the optimizer stepped; every rank of options.process_group
  /// returns the same. Once per optimizer between update()s; collective
  /// when it unscales. Disabled: optimizer.step(), returns true.
  bool step(torch::optim::Optimizer& optimizer);
  /// The same for a DistributedOptimizer: averages (once, through unscale_),
  /// then steps the wrapped optimizer. Throws InvalidArgument when the
  /// wrapped optimizer was unscaled directly (its gradients were unscaled
  /// before being averaged, so clipping saw per-rank gradients).
  bool step(DistributedOptimizer& optimizer);

  /// Ends the iteration: multiplies the scale by backoff_factor if any
  /// optimizer's step found inf/NaN (and resets the clean-step count), else
  /// counts a clean step and multiplies by growth_factor when the count
  /// reaches growth_interval (never growing to inf). Requires at least one
  /// unscale_/step since the last update (InvalidArgument otherwise).
  void update();
  /// Ends the iteration with the scale set to `new_scale` (the growth
  /// tracker is kept, as in PyTorch).
  void update(double new_scale);

  /// The current scale (init_scale before the first scale()); 1.0 when
  /// disabled. Synchronises with the device on CUDA.
  double get_scale() const;
  /// Consecutive clean steps counted toward the next growth (0 disabled).
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  /// Python's state_dict(): {"scale": float, "growth_factor": float,
  /// "backoff_factor": float, "growth_interval": int, "_growth_tracker":
  /// int} (string keys); empty when disabled. torch::pickle_save of it is
  /// what torch.save(scaler.state_dict()) writes, and pickle_load(...)
  /// .toGenericDict() of a torch.save'd one loads back. Take it after
  /// update().
  c10::impl::GenericDict state_dict() const;
  /// Restores a state_dict() (from dtrain or Python). Does nothing when
  /// disabled. Throws InvalidArgument for an empty dict (saved from a
  /// disabled scaler) and DataError naming a missing or mistyped key.
  void load_state_dict(const c10::impl::GenericDict& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    const void* optimizer = nullptr;
    Stage stage = Stage::kReady;
    /// Non-zero when an unscaled gradient was inf/NaN (on scale_'s device).
    at::Tensor found_inf;
    /// Gradients were averaged by a DistributedOptimizer before unscaling.
    bool synchronized = false;
  };

  OptimizerState& state_of(const void* optimizer);
  void check_initialised(const char* operation) const;
  void unscale_grads(torch::optim::Optimizer& optimizer, OptimizerState& state);
  bool maybe_step(torch::optim::Optimizer& optimizer, OptimizerState& state);

  GradScalerOptions options_;
  /// Until scale() creates the tensors, the values they will start from.
  double init_scale_;
  int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           // float32 [1]
  at::Tensor growth_tracker_;  // int32 [1]
  std::vector<OptimizerState> optimizer_states_;
};

}  // namespace dtrain
