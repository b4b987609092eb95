// Dynamic loss scaling (include/dtrain/amp.h).
//
// Note [GradScaler]
// A port of PyTorch's GradScaler (torch/cuda/amp/grad_scaler.py, 1.13; the
// same algorithm as torch/amp/grad_scaler.py in 2.x):
//   scale(loss)   loss * scale; the scale ([1] float32) and the growth tracker
//                 ([1] int32) are created lazily on the loss's device.
//   unscale_(opt) inv_scale = float(1 / double(scale)); every gradient, grouped
//                 by (device, dtype), goes through
//                 _amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
//                 inv_scale): found_inf = 1 if any element is inf/NaN, and
//                 grad *= inv_scale. The per-device found_inf are summed on
//                 the scale's device. Once per optimizer and iteration.
//   step(opt)     unscale_ if not done; optimizer.step() iff found_inf == 0.
//   update()      found = sum of every optimizer's found_inf;
//                 _amp_update_scale_(scale, tracker, found, growth, backoff,
//                 interval), which is (float arithmetic as in the kernel):
//                   found != 0:  scale = float(scale * backoff); tracker = 0
//                   else:        tracker + 1 == interval ?
//                                  (scale = float(scale * growth) if finite;
//                                   tracker = 0)
//                                : tracker += 1
//                 then forgets the per-optimizer records.
// Additions for data parallelism (Note [Agreeing on skipped steps]).
//
// Note [ATen's AMP kernels]
// LibTorch 1.13 registers both kernels for CUDA only; 2.3 added CPU kernels.
// Where a kernel is missing (CPU tensors before 2.3, compat::kAmpKernelsOnCpu)
// the same arithmetic runs as plain tensor ops: isfinite().all() for the
// check, grad.mul_(inv_scale) computed in fp32 (or fp64 for fp64 gradients),
// as the kernel's opmath does, and the update rule above on host values.
//
// Note [Agreeing on skipped steps]
// With DDP or DistributedOptimizer an inf on one rank usually reaches every
// rank through the gradient average, but not always: a rank can overflow
// after the reduction (its own unscale or clipping), gradients reduced by a
// lossy comm hook may differ, and gradients that are not reduced at all
// (local steps) certainly do. If ranks disagreed, one would step and another
// would not, and their weights would silently diverge. So when the scaler has
// a group of more than one rank, unscale_ sums found_inf across it before
// anyone decides; step() and update() then see the same value everywhere.
//
// Note [GradScaler and DistributedOptimizer]
// DistributedOptimizer::step() averages and then steps. Gradients must be
// averaged before they are unscaled and clipped (clipping per-rank gradients
// would clip something no rank applies), and averaged only once. So
// unscale_(DistributedOptimizer&) calls synchronize() and then unscales the
// wrapped optimizer, and step(DistributedOptimizer&) steps the wrapped
// optimizer directly, after unscale_ if that was not called.

#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/jit_type.h>
#include <torch/optim/optimizer.h>

#include "common/strings.h"
#include "common/torch_compat.h"
#include "dtrain/amp.h"
#include "dtrain/errors.h"
#include "dtrain/horovod.h"

namespace dtrain {
namespace {

bool has_amp_kernels(const at::Device& device) {
  return device.is_cuda() || compat::kAmpKernelsOnCpu;
}

// _amp_foreach_non_finite_check_and_unscale_ (Note [ATen's AMP kernels]).
void non_finite_check_and_unscale(const std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                                  const at::Tensor& inv_scale) {
  if (has_amp_kernels(found_inf.device())) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    return;
  }
  const bool unit = inv_scale.item<float>() == 1.0f;
  for (const at::Tensor& grad : grads) {
    if (!at::isfinite(grad).all().item<bool>()) found_inf.fill_(1.0);
    if (!unit) grad.mul_(inv_scale);
  }
}

// _amp_update_scale_ (Note [ATen's AMP kernels]).
void update_scale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (has_amp_kernels(scale.device())) {
    at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                           growth_interval);
    return;
  }
  float current = scale.item<float>();
  int32_t tracker = growth_tracker.item<int32_t>();
  if (found_inf.item<float>() != 0.0f) {
    current = static_cast<float>(current * backoff_factor);
    tracker = 0;
  } else {
    const int32_t successful = tracker + 1;
    if (successful == static_cast<int32_t>(growth_interval)) {
      const auto grown = static_cast<float>(current * growth_factor);
      if (std::isfinite(grown)) current = grown;
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
  scale.fill_(current);
  growth_tracker.fill_(tracker);
}

const c10::IValue& entry(const c10::impl::GenericDict& state, const std::string& key) {
  auto it = state.find(c10::IValue(key));
  if (it == state.end()) {
    throw DataError(cat("GradScaler state_dict has no '", key,
                        "' entry; expected the keys of GradScaler.state_dict(): scale, "
                        "growth_factor, backoff_factor, growth_interval, _growth_tracker"));
  }
  return it->value();
}

double number(const c10::impl::GenericDict& state, const std::string& key) {
  const c10::IValue& v = entry(state, key);
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  throw DataError(
      cat("GradScaler state_dict entry '", key, "' is a ", v.tagKind(), ", expected a float"));
}

int64_t integer(const c10::impl::GenericDict& state, const std::string& key) {
  const c10::IValue& v = entry(state, key);
  if (v.isInt()) return v.toInt();
  throw DataError(
      cat("GradScaler state_dict entry '", key, "' is a ", v.tagKind(), ", expected an int"));
}

void check_options(const GradScalerOptions& o) {
  if (!o.enabled) return;
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale)) {
    throw InvalidArgument(
        cat("GradScaler: init_scale must be positive and finite, got ", o.init_scale));
  }
  if (!(o.growth_factor > 1.0)) {
    throw InvalidArgument(cat("GradScaler: growth_factor must be > 1, got ", o.growth_factor));
  }
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0)) {
    throw InvalidArgument(
        cat("GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor));
  }
  if (o.growth_interval < 1 || o.growth_interval > INT32_MAX) {
    throw InvalidArgument(
        cat("GradScaler: growth_interval must be in [1, 2^31), got ", o.growth_interval));
  }
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), init_scale_(options_.init_scale) {
  check_options(options_);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled) return loss;
  if (!scale_.defined()) {
    const auto on = at::TensorOptions().device(loss.device());
    scale_ = at::full({1}, init_scale_, on.dtype(at::kFloat));
    growth_tracker_ = at::full({1}, init_growth_tracker_, on.dtype(at::kInt));
  }
  return loss * scale_.to(loss.device(), scale_.scalar_type(), /*non_blocking=*/true);
}

void GradScaler::check_initialised(const char* operation) const {
  if (!scale_.defined()) {
    throw InvalidArgument(cat("GradScaler::", operation,
                              " before scale(): call scaler.scale(loss).backward() earlier in "
                              "the iteration"));
  }
}

GradScaler::OptimizerState& GradScaler::state_of(const void* optimizer) {
  for (auto& s : optimizer_states_) {
    if (s.optimizer == optimizer) return s;
  }
  optimizer_states_.push_back({optimizer, Stage::kReady, {}, false});
  return optimizer_states_.back();
}

void GradScaler::unscale_grads(torch::optim::Optimizer& optimizer, OptimizerState& state) {
  check_initialised("unscale_");
  if (state.stage == Stage::kUnscaled) {
    throw InvalidArgument(
        "GradScaler::unscale_ has already been called on this optimizer since the last "
        "update(); call it once per iteration, after the last backward");
  }
  if (state.stage == Stage::kStepped) {
    throw InvalidArgument(
        "GradScaler::unscale_ called after step(); unscale_ before step, or call update() to "
        "start the next iteration");
  }
  at::NoGradGuard no_grad;
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // Gradients grouped by device, then dtype, in a stable order.
  std::map<std::string, std::pair<at::Device, std::map<int, std::vector<at::Tensor>>>> groups;
  size_t count = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      at::Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (grad.scalar_type() == at::kHalf) {
        throw InvalidArgument(
            "GradScaler: attempting to unscale fp16 gradients; keep the parameters in fp32 and "
            "let autocast cast inside the ops");
      }
      at::Tensor values = grad.is_sparse() ? grad._values() : grad;
      auto& per_device = groups
                             .try_emplace(values.device().str(), values.device(),
                                          std::map<int, std::vector<at::Tensor>>{})
                             .first->second;
      per_device.second[static_cast<int>(values.scalar_type())].push_back(values);
      ++count;
    }
  }
  if (count == 0) {
    throw InvalidArgument(
        "GradScaler: no parameter of the optimizer has a gradient; call "
        "scaler.scale(loss).backward() before unscale_/step");
  }
  at::Tensor found = at::zeros({1}, scale_.options().dtype(at::kFloat));
  for (auto& [name, per_device] : groups) {
    const at::Device& device = per_device.first;
    at::Tensor found_here = at::zeros({1}, at::TensorOptions().device(device).dtype(at::kFloat));
    const at::Tensor inv_here = inv_scale.to(device);
    for (auto& [dtype, grads] : per_device.second) {
      non_finite_check_and_unscale(grads, found_here, inv_here);
    }
    found.add_(found_here.to(scale_.device()));
  }
  // Note [Agreeing on skipped steps]
  if (options_.process_group.size() > 1) {
    std::vector<at::Tensor> tensors{found};
    options_.process_group.all_reduce_sum(tensors);
    found = tensors[0];
  }
  state.found_inf = found;
  state.stage = Stage::kUnscaled;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerState& state = state_of(&optimizer);
  unscale_grads(optimizer, state);
  state.synchronized = false;
}

void GradScaler::unscale_(DistributedOptimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerState& state = state_of(&optimizer.optimizer());
  // Note [GradScaler and DistributedOptimizer]: refuse before averaging, so
  // a misuse does not average twice.
  check_initialised("unscale_");
  if (state.stage == Stage::kReady) optimizer.synchronize();
  unscale_grads(optimizer.optimizer(), state);
  state.synchronized = true;
}

bool GradScaler::maybe_step(torch::optim::Optimizer& optimizer, OptimizerState& state) {
  const bool clean = state.found_inf.item<float>() == 0.0f;
  if (clean) optimizer.step();
  state.stage = Stage::kStepped;
  return clean;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_initialised("step");
  OptimizerState& state = state_of(&optimizer);
  if (state.stage == Stage::kStepped) {
    throw InvalidArgument(
        "GradScaler::step has already been called for this optimizer since the last update(); "
        "call update() once per iteration, after the steps");
  }
  if (state.stage == Stage::kReady) unscale_(optimizer);
  return maybe_step(optimizer, state_of(&optimizer));
}

bool GradScaler::step(DistributedOptimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_initialised("step");
  OptimizerState& state = state_of(&optimizer.optimizer());
  if (state.stage == Stage::kStepped) {
    throw InvalidArgument(
        "GradScaler::step has already been called for this optimizer since the last update(); "
        "call update() once per iteration, after the steps");
  }
  if (state.stage == Stage::kUnscaled && !state.synchronized) {
    throw InvalidArgument(
        "GradScaler::step(DistributedOptimizer): its wrapped optimizer was unscaled directly, "
        "before the gradients were averaged; call scaler.unscale_(distributed_optimizer) instead");
  }
  if (state.stage == Stage::kReady) unscale_(optimizer);
  return maybe_step(optimizer.optimizer(), state_of(&optimizer.optimizer()));
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_initialised("update");
  at::Tensor found;
  for (const auto& s : optimizer_states_) {
    if (!s.found_inf.defined()) continue;
    found = found.defined() ? found + s.found_inf : s.found_inf.clone();
  }
  if (!found.defined()) {
    throw InvalidArgument(
        "GradScaler::update: no unscale_ or step since the last update; call "
        "scaler.step(optimizer) before update()");
  }
  update_scale(scale_, growth_tracker_, found, options_.growth_factor, options_.backoff_factor,
               options_.growth_interval);
  optimizer_states_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_initialised("update");
  scale_.fill_(new_scale);
  optimizer_states_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<float>() : init_scale_;
}

int64_t GradScaler::growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int32_t>() : init_growth_tracker_;
}

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  if (!options_.enabled) return d;
  d.insert(std::string("scale"), get_scale());
  d.insert(std::string("growth_factor"), options_.growth_factor);
  d.insert(std::string("backoff_factor"), options_.backoff_factor);
  d.insert(std::string("growth_interval"), options_.growth_interval);
  d.insert(std::string("_growth_tracker"), growth_tracker());
  return d;
}

void GradScaler::load_state_dict(const c10::impl::GenericDict& state) {
  if (!options_.enabled) return;
  if (state.empty()) {
    throw InvalidArgument(
        "GradScaler::load_state_dict: the state dict is empty, so it was saved from a disabled "
        "GradScaler; load it into a disabled scaler or start from the defaults");
  }
  GradScalerOptions loaded = options_;
  loaded.growth_factor = number(state, "growth_factor");
  loaded.backoff_factor = number(state, "backoff_factor");
  loaded.growth_interval = integer(state, "growth_interval");
  loaded.init_scale = number(state, "scale");
  const int64_t tracker = integer(state, "_growth_tracker");
  check_options(loaded);
  options_ = std::move(loaded);
  init_scale_ = options_.init_scale;
  init_growth_tracker_ = tracker;
  if (scale_.defined()) scale_.fill_(init_scale_);
  if (growth_tracker_.defined()) growth_tracker_.fill_(tracker);
}

}  // namespace dtrain
