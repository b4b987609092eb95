// Pieces the torchvision families share (models/zoo.h).

#include <torch/nn/init.h>

#include "models/zoo.h"

namespace dtrain::models {

namespace nn = torch::nn;

nn::Conv2d conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                  bool bias, int64_t groups) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).groups(groups).bias(bias));
}

void init_convs_and_norms(nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& m : model.modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (c->bias.defined()) nn::init::zeros_(c->bias);
    } else if (auto* b = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(b->weight);
      nn::init::zeros_(b->bias);
    }
  }
}

}  // namespace dtrain::models
