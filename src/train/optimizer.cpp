// make_optimizer() and the per-step helpers of dtrain/optim.h.
//
// Note [Parameter groups]
// torchvision's references (references/classification/utils.py,
// set_weight_decay) walk the modules depth-first; a parameter whose own name
// is a custom key ("bias") goes to that key's group, else a parameter of a
// normalisation layer goes to "norm" when a norm weight decay is given, else
// to "other"; the groups are "other", "norm", then the custom keys, empty ones
// left out. Reproducing that order exactly makes the optimizer's parameter
// indices, and so the checkpoint's "optimizer" entry, the ones a PyTorch user
// of the same recipe has.

#include "dtrain/optim.h"

#include <algorithm>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

bool is_norm_layer(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m) ||
         dynamic_cast<const torch::nn::InstanceNorm1dImpl*>(&m) ||
         dynamic_cast<const torch::nn::InstanceNorm2dImpl*>(&m) ||
         dynamic_cast<const torch::nn::InstanceNorm3dImpl*>(&m) ||
         dynamic_cast<const torch::nn::LayerNormImpl*>(&m) ||
         dynamic_cast<const torch::nn::GroupNormImpl*>(&m);
}

// Note [Parameter groups]: group index 0 other, 1 norm, 2 bias.
void collect(torch::nn::Module& m, const OptimizerOptions& o,
             std::vector<std::vector<at::Tensor>>& groups) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    if (!p.value().requires_grad()) continue;
    if (o.bias_weight_decay && p.key() == "bias") {
      groups[2].push_back(p.value());
    } else if (o.norm_weight_decay && is_norm_layer(m)) {
      groups[1].push_back(p.value());
    } else {
      groups[0].push_back(p.value());
    }
  }
  for (const auto& child : m.named_children()) collect(*child.value(), o, groups);
}

}  // namespace

constexpr OptimizerType kOptimizerTypes[] = {OptimizerType::kSgd, OptimizerType::kAdamW};

std::string to_string(OptimizerType type) {
  return type == OptimizerType::kAdamW ? "adamw" : "sgd";
}

OptimizerType parse_optimizer_type(const std::string& name) {
  for (OptimizerType t : kOptimizerTypes) {
    if (name == to_string(t)) return t;
  }
  throw InvalidArgument(
      cat("unknown optimizer '", name, "'; valid optimizers: ", join(optimizer_names(), ", ")));
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (OptimizerType t : kOptimizerTypes) names.push_back(to_string(t));
  return names;
}

void validate(const OptimizerOptions& o) {
  // Messages name the fields; the CLI maps them to its flags.
  if (!(o.lr > 0)) throw InvalidArgument(cat("OptimizerOptions::lr must be positive, got ", o.lr));
  if (o.momentum < 0) {
    throw InvalidArgument(cat("OptimizerOptions::momentum must be >= 0, got ", o.momentum));
  }
  if (o.type == OptimizerType::kSgd && o.nesterov && o.momentum <= 0) {
    throw InvalidArgument("OptimizerOptions::nesterov needs OptimizerOptions::momentum > 0");
  }
  for (auto [field, v] : {std::pair<const char*, double>{"weight_decay", o.weight_decay},
                          {"norm_weight_decay", o.norm_weight_decay.value_or(0)},
                          {"bias_weight_decay", o.bias_weight_decay.value_or(0)}}) {
    if (v < 0) throw InvalidArgument(cat("OptimizerOptions::", field, " must be >= 0, got ", v));
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1)) {
    throw InvalidArgument(
        cat("OptimizerOptions::beta1 and beta2 must be in [0, 1), got ", o.beta1, ",", o.beta2));
  }
  if (!(o.eps >= 0)) throw InvalidArgument(cat("OptimizerOptions::eps must be >= 0, got ", o.eps));
}

ParameterGroups parameter_groups(torch::nn::Module& module, const OptimizerOptions& o) {
  std::vector<std::vector<at::Tensor>> groups(3);
  collect(module, o, groups);
  const std::vector<std::string> names{"other", "norm", "bias"};
  const std::vector<double> decay{o.weight_decay, o.norm_weight_decay.value_or(o.weight_decay),
                                  o.bias_weight_decay.value_or(o.weight_decay)};
  ParameterGroups out;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) continue;
    out.names.push_back(names[g]);
    out.params.push_back(std::move(groups[g]));
    out.weight_decay.push_back(decay[g]);
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& module,
                                                        const OptimizerOptions& o) {
  validate(o);
  ParameterGroups groups = parameter_groups(module, o);
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  if (o.type == OptimizerType::kAdamW) {
    auto options = [&](double wd) {
      return torch::optim::AdamWOptions(o.lr)
          .betas(std::make_tuple(o.beta1, o.beta2))
          .eps(o.eps)
          .weight_decay(wd);
    };
    for (size_t g = 0; g < groups.params.size(); ++g) {
      param_groups.emplace_back(groups.params[g], std::make_unique<torch::optim::AdamWOptions>(
                                                      options(groups.weight_decay[g])));
    }
    return std::make_unique<torch::optim::AdamW>(std::move(param_groups), options(o.weight_decay));
  }
  auto options = [&](double wd) {
    return torch::optim::SGDOptions(o.lr)
        .momentum(o.momentum)
        .nesterov(o.nesterov)
        .weight_decay(wd);
  };
  for (size_t g = 0; g < groups.params.size(); ++g) {
    param_groups.emplace_back(groups.params[g], std::make_unique<torch::optim::SGDOptions>(
                                                    options(groups.weight_decay[g])));
  }
  return std::make_unique<torch::optim::SGD>(std::move(param_groups), options(o.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double learning_rate(const torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().empty() ? 0.0 : optimizer.param_groups()[0].options().get_lr();
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  return torch::nn::utils::clip_grad_norm_(params, max_norm, 2.0);
}

}  // namespace dtrain
