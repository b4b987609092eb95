#pragma once
// Learning-rate schedules as a pure function of the optimizer step, equal to
// torch.optim.lr_scheduler's values for the same settings when the scheduler
// is stepped once per optimizer step (per iteration).
//
// (set_learning_rate is in dtrain/optim.h)
/// Example:
/// ```
/// void cosine(torch::optim::Optimizer& opt, int64_t steps_per_epoch) {
///   dtrain::LrSchedule s;
///   s.kind = dtrain::LrScheduleKind::kCosine;
///   s.base_lr = 0.1;
///   s.total_steps = 90 * steps_per_epoch;
///   s.warmup_steps = 5 * steps_per_epoch;
///   for (int64_t step = 0; step < s.total_steps; ++step) {
///     dtrain::set_learning_rate(opt, dtrain::lr_at(s, step));
///   }
/// }
/// ```
//
// No LibTorch: this header and its source are plain C++.

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain {

/// The schedules lr_at() knows (LrSchedule's list says which PyTorch
/// scheduler each one is).
enum class LrScheduleKind { kConstant, kStep, kMultiStep, kCosine };

/// "constant", "step", "multistep", "cosine".
std::string to_string(LrScheduleKind kind);

/// The kind to_string() spells `name` as; throws InvalidArgument naming the
/// value and listing lr_schedule_names() otherwise.
LrScheduleKind parse_lr_schedule(const std::string& name);

/// A schedule in optimizer steps. Which PyTorch scheduler each kind is:
///   constant   the optimizer's lr, unchanged (no scheduler)
///   step       StepLR(step_size, gamma)
///   multistep  MultiStepLR(milestones, gamma)
///   cosine     CosineAnnealingLR(T_max = total_steps - warmup_steps, eta_min = min_lr)
/// With warmup_steps W > 0 the main scheduler is preceded by
/// LinearLR(start_factor = warmup_start_factor, total_iters = W) and both are
/// chained with SequentialLR(milestones=[W]), as torchvision's reference
/// scripts do; the main scheduler's own count then starts at step W (so a
/// StepLR decays at W + step_size, W + 2 step_size, ...).
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  /// The optimizer's lr (after any scaling rule), > 0.
  double base_lr = 0.01;
  /// step: decay every this many steps (> 0).
  int64_t step_size = 0;
  /// multistep: steps (counted from the end of the warm-up) at which the lr
  /// is multiplied by gamma; increasing, > 0.
  std::vector<int64_t> milestones;
  /// step, multistep: the decay factor.
  double gamma = 0.1;
  /// cosine: steps of the whole run, warm-up included (> warmup_steps).
  int64_t total_steps = 0;
  /// cosine: the lr reached at the end (eta_min).
  double min_lr = 0;
  /// Linear warm-up over this many steps (0: none).
  int64_t warmup_steps = 0;
  /// The warm-up starts at base_lr x this factor, in (0, 1] (torchvision's
  /// --lr-warmup-decay, default 0.01).
  double warmup_start_factor = 0.01;
};

/// The names of the kinds lr_at() knows: constant, step, multistep, cosine.
std::vector<std::string> lr_schedule_names();

/// Throws InvalidArgument naming the field (e.g. "LrSchedule::gamma") when
/// `s` is not a usable schedule.
void validate(const LrSchedule& s);

/// The learning rate of optimizer step `step` (0-based): what
/// optimizer.param_groups[0]["lr"] holds in PyTorch after `step` calls of
/// scheduler.step(). Closed forms; PyTorch updates most schedulers
/// recursively, so values agree to rounding (relative 1e-12). Pure and
/// thread-safe; `s` must have passed validate().
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace dtrain
