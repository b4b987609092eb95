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

namespace {
constexpr LrScheduleKind kKinds[] = {LrScheduleKind::kConstant, LrScheduleKind::kStep,
                                     LrScheduleKind::kMultiStep, LrScheduleKind::kCosine};
}  // namespace

std::string to_string(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant:
      return "constant";
    case LrScheduleKind::kStep:
      return "step";
    case LrScheduleKind::kMultiStep:
      return "multistep";
    case LrScheduleKind::kCosine:
      return "cosine";
  }
  return "?";
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  for (LrScheduleKind k : kKinds) {
    if (name == to_string(k)) return k;
  }
  throw InvalidArgument(
      cat("unknown lr schedule '", name, "'; valid schedules: ", join(lr_schedule_names(), ", ")));
}

std::vector<std::string> lr_schedule_names() {
  std::vector<std::string> names;
  for (LrScheduleKind k : kKinds) names.push_back(to_string(k));
  return names;
}

// Messages name LrSchedule's fields; the CLI maps them to its flags.
void validate(const LrSchedule& s) {
  using K = LrScheduleKind;
  if (!(s.base_lr > 0)) {
    throw InvalidArgument(cat("LrSchedule::base_lr must be positive, got ", s.base_lr));
  }
  if (s.warmup_steps < 0) {
    throw InvalidArgument(cat("LrSchedule::warmup_steps must be >= 0, got ", s.warmup_steps));
  }
  if (s.warmup_steps > 0 && !(s.warmup_start_factor > 0 && s.warmup_start_factor <= 1)) {
    throw InvalidArgument(
        cat("LrSchedule::warmup_start_factor must be in (0, 1], got ", s.warmup_start_factor));
  }
  if ((s.kind == K::kStep || s.kind == K::kMultiStep) && !(s.gamma > 0)) {
    throw InvalidArgument(cat("LrSchedule::gamma must be positive, got ", s.gamma));
  }
  if (s.kind == K::kStep && s.step_size < 1) {
    throw InvalidArgument(
        cat("the step schedule needs LrSchedule::step_size >= 1 (got ", s.step_size, " steps)"));
  }
  if (s.kind == K::kMultiStep) {
    if (s.milestones.empty()) {
      throw InvalidArgument(
          "the multistep schedule needs LrSchedule::milestones, e.g. 30,60,80 epochs' steps");
    }
    for (size_t i = 0; i < s.milestones.size(); ++i) {
      if (s.milestones[i] < 1 || (i > 0 && s.milestones[i] <= s.milestones[i - 1])) {
        throw InvalidArgument("LrSchedule::milestones must be positive and increasing");
      }
    }
  }
  if (s.kind == K::kCosine && s.total_steps <= s.warmup_steps) {
    throw InvalidArgument(cat("the cosine schedule needs more LrSchedule::total_steps (",
                              s.total_steps, ") than LrSchedule::warmup_steps (", s.warmup_steps,
                              ")"));
  }
  if (s.kind == K::kCosine && s.min_lr < 0) {
    throw InvalidArgument(cat("LrSchedule::min_lr must be >= 0, got ", s.min_lr));
  }
}

double lr_at(const LrSchedule& s, int64_t step) {
  const int64_t w = s.warmup_steps;
  if (w > 0 && step < w) {  // LinearLR's closed form
    const double f = s.warmup_start_factor;
    return s.base_lr * (f + (1.0 - f) * static_cast<double>(step) / static_cast<double>(w));
  }
  const int64_t t = step - w;  // the main scheduler's own count (SequentialLR)
  if (s.kind == LrScheduleKind::kStep)
    return s.base_lr * std::pow(s.gamma, static_cast<double>(t / s.step_size));
  if (s.kind == LrScheduleKind::kMultiStep) {
    const auto passed =
        std::upper_bound(s.milestones.begin(), s.milestones.end(), t) - s.milestones.begin();
    return s.base_lr * std::pow(s.gamma, static_cast<double>(passed));
  }
  if (s.kind == LrScheduleKind::kCosine) {
    const double pi = std::acos(-1.0);
    const double period = static_cast<double>(s.total_steps - w);
    return s.min_lr +
           (s.base_lr - s.min_lr) * (1 + std::cos(pi * static_cast<double>(t) / period)) / 2;
  }
  return s.base_lr;
}

}  // namespace dtrain
