// lr(step) for the schedules in dtrain/lr_schedule.h.
//
// Note [Closed-form schedules]
// PyTorch's schedulers mostly update the lr recursively (StepLR multiplies
// the current lr by gamma, CosineAnnealingLR scales the distance to eta_min
// by a ratio of cosines, LinearLR by a ratio of factors); SequentialLR
// restarts the second scheduler with step(0), i.e. at its closed form, at the
// milestone. The recursive and closed forms are equal in exact arithmetic, so
// a closed form per step gives PyTorch's values to rounding, needs no state
// (a resumed run recomputes the lr from the step in the checkpoint), and
// costs O(1) per step.

#include "dtrain/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {

std::vector<std::string> lr_schedule_names() { return {"constant", "step", "multistep", "cosine"}; }

void validate(const LrSchedule& s) {
  const auto names = lr_schedule_names();
  if (std::find(names.begin(), names.end(), s.kind) == names.end()) {
    throw InvalidArgument(
        cat("unknown lr schedule '", s.kind, "'; valid schedules: ", join(names, ", ")));
  }
  if (!(s.base_lr > 0)) throw InvalidArgument(cat("--lr must be positive, got ", s.base_lr));
  if (s.warmup_steps < 0) {
    throw InvalidArgument(cat("--lr-warmup must be >= 0, got ", s.warmup_steps, " steps"));
  }
  if (s.warmup_steps > 0 && !(s.warmup_start_factor > 0 && s.warmup_start_factor <= 1)) {
    throw InvalidArgument(cat("--lr-warmup-decay must be in (0, 1], got ", s.warmup_start_factor));
  }
  if ((s.kind == "step" || s.kind == "multistep") && !(s.gamma > 0)) {
    throw InvalidArgument(cat("--lr-gamma must be positive, got ", s.gamma));
  }
  if (s.kind == "step" && s.step_size < 1) {
    throw InvalidArgument(
        cat("--lr-schedule step needs --lr-step-size >= 1 (got ", s.step_size, " steps)"));
  }
  if (s.kind == "multistep") {
    if (s.milestones.empty()) {
      throw InvalidArgument("--lr-schedule multistep needs --lr-milestones, e.g. 30,60,80");
    }
    for (size_t i = 0; i < s.milestones.size(); ++i) {
      if (s.milestones[i] < 1 || (i > 0 && s.milestones[i] <= s.milestones[i - 1])) {
        throw InvalidArgument("--lr-milestones must be positive and increasing");
      }
    }
  }
  if (s.kind == "cosine" && s.total_steps <= s.warmup_steps) {
    throw InvalidArgument(cat("--lr-schedule cosine needs more steps (", s.total_steps,
                              ") than the warm-up (", s.warmup_steps, ")"));
  }
  if (s.kind == "cosine" && s.min_lr < 0) {
    throw InvalidArgument(cat("--lr-min must be >= 0, got ", s.min_lr));
  }
}

double lr_at(const LrSchedule& s, int64_t step) {
  const int64_t w = s.warmup_steps;
  if (w > 0 && step < w) {  // LinearLR's closed form
    const double f = s.warmup_start_factor;
    return s.base_lr * (f + (1.0 - f) * static_cast<double>(step) / static_cast<double>(w));
  }
  const int64_t t = step - w;  // the main scheduler's own count (SequentialLR)
  if (s.kind == "step") return s.base_lr * std::pow(s.gamma, static_cast<double>(t / s.step_size));
  if (s.kind == "multistep") {
    const auto passed =
        std::upper_bound(s.milestones.begin(), s.milestones.end(), t) - s.milestones.begin();
    return s.base_lr * std::pow(s.gamma, static_cast<double>(passed));
  }
  if (s.kind == "cosine") {
    const double pi = std::acos(-1.0);
    const double period = static_cast<double>(s.total_steps - w);
    return s.min_lr +
           (s.base_lr - s.min_lr) * (1 + std::cos(pi * static_cast<double>(t) / period)) / 2;
  }
  return s.base_lr;
}

}  // namespace dtrain
