#pragma once
// Optimizers as the ImageNet recipes configure them: SGD (momentum,
// Nesterov) and AdamW, with weight decay per parameter group as
// torchvision's references set it (set_weight_decay: --norm-weight-decay,
// --bias-weight-decay), plus the per-step helpers the trainer uses.
//
/// Example:
/// ```
/// void adamw_step(torch::nn::Module& model, const dtrain::LrSchedule& schedule, int64_t step) {
///   dtrain::OptimizerOptions o;
///   o.type = dtrain::OptimizerType::kAdamW;
///   o.lr = 1e-3;
///   o.weight_decay = 0.05;
///   o.norm_weight_decay = 0.0;  // no decay on BatchNorm/LayerNorm/GroupNorm parameters
///   o.bias_weight_decay = 0.0;  // nor on any parameter named "bias"
///   auto opt = dtrain::make_optimizer(model, o);
///   // ... forward, backward ...
///   dtrain::set_learning_rate(*opt, dtrain::lr_at(schedule, step));
///   dtrain::clip_grad_norm(model.parameters(), 1.0);
///   opt->step();
/// }
/// ```

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dtrain/options.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace dtrain {

/// The optimizers: torch.optim.SGD and torch.optim.AdamW (LibTorch's AdamW
/// computes the same update).
enum class OptimizerType { kSgd, kAdamW };
/// "sgd", "adamw": the names of --optimizer, of the training log and of the
/// metrics file's "optimizer".
std::string to_string(OptimizerType type);
/// The optimizer to_string() spells `name` as; throws InvalidArgument naming
/// the value and listing the valid ones otherwise.
OptimizerType parse_optimizer_type(const std::string& name);

struct OptimizerOptions {
  /// SGD (with momentum and Nesterov below) or AdamW (betas and eps below).
  OptimizerType type = OptimizerType::kSgd;
  /// The initial learning rate (a schedule overwrites it each step).
  double lr = 0.01;
  /// SGD: momentum and Nesterov momentum (requires momentum > 0).
  double momentum = 0.9;
  bool nesterov = false;
  /// AdamW: betas and eps (PyTorch's defaults).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// L2 penalty (SGD) or decoupled weight decay (AdamW) of every parameter
  /// not covered by the two fields below.
  double weight_decay = 0;
  /// Weight decay of the parameters of normalisation layers (BatchNorm,
  /// LayerNorm, GroupNorm, InstanceNorm); nullopt: weight_decay.
  std::optional<double> norm_weight_decay;
  /// Weight decay of every parameter named "bias" (before the norm rule, as
  /// in torchvision); nullopt: weight_decay.
  std::optional<double> bias_weight_decay;

  DTRAIN_SETTER(OptimizerOptions, type)
  DTRAIN_SETTER(OptimizerOptions, lr)
  DTRAIN_SETTER(OptimizerOptions, momentum)
  DTRAIN_SETTER(OptimizerOptions, nesterov)
  DTRAIN_SETTER(OptimizerOptions, beta1)
  DTRAIN_SETTER(OptimizerOptions, beta2)
  DTRAIN_SETTER(OptimizerOptions, eps)
  DTRAIN_SETTER(OptimizerOptions, weight_decay)
  DTRAIN_SETTER(OptimizerOptions, norm_weight_decay)
  DTRAIN_SETTER(OptimizerOptions, bias_weight_decay)
};

/// "sgd", "adamw": to_string() of every OptimizerType.
std::vector<std::string> optimizer_names();

/// Throws InvalidArgument naming the field (OptimizerOptions::lr, ...) when
/// `o` is unusable.
void validate(const OptimizerOptions& o);

/// A trainable parameter and the group it goes to.
struct ParameterGroups {
  /// torchvision's set_weight_decay() order: "other", then "norm" (only when
  /// norm_weight_decay is set), then "bias" (only when bias_weight_decay is
  /// set); empty groups are left out. Parameters in module order.
  std::vector<std::string> names;
  std::vector<std::vector<at::Tensor>> params;
  std::vector<double> weight_decay;
};

/// Splits the module's trainable parameters (requires_grad) into groups as
/// torchvision's set_weight_decay() does for the same settings.
ParameterGroups parameter_groups(torch::nn::Module& module, const OptimizerOptions& o);

/// The optimizer for `module`'s parameters, one parameter group per entry
/// of parameter_groups(). The optimizer refers to the module's tensors: keep
/// the module alive (and on its device) while using it. Throws
/// InvalidArgument for bad options.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& module,
                                                        const OptimizerOptions& o);

/// Sets the learning rate of every parameter group (what a PyTorch
/// scheduler's step() does).
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

/// The learning rate of the first parameter group.
double learning_rate(const torch::optim::Optimizer& optimizer);

/// torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm: scales
/// all gradients by min(1, max_norm / (total_norm + 1e-6)), where total_norm
/// is the norm of all gradients together; returns total_norm (before
/// clipping). Parameters without a gradient are ignored. Synchronises with
/// the gradients' device.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace dtrain
