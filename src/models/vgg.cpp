// torchvision's VGG (Simonyan & Zisserman, 2014), module for module: `features` is one
// Sequential of Conv2d [BatchNorm2d] ReLU ... MaxPool2d at torchvision's indices (so
// features.0.weight, features.1.running_mean, ... match), then AdaptiveAvgPool2d(7) and the
// classifier Sequential Linear-ReLU-Dropout-Linear-ReLU-Dropout-Linear (classifier.0/3/6).
// Initialisation as torchvision's: Kaiming-normal fan_out convs with zero bias, BN 1 / 0,
// Linear N(0, 0.01) with zero bias.

#include <cstring>

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "models/zoo.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kPool = 0;  // "M" in torchvision's cfgs

// torchvision.models.vgg.cfgs
std::vector<int64_t> layout(char name) {
  const int64_t M = kPool;
  switch (name) {
    case 'A':
      return {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
    case 'B':
      return {64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
    case 'D':
      return {64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M};
    default:  // 'E'
      return {64,  64,  M,   128, 128, M,   256, 256, 256, 256, M,
              512, 512, 512, 512, M,   512, 512, 512, 512, M};
  }
}

constexpr int64_t kHidden = 4096;
constexpr int64_t kPooled = 512 * 7 * 7;

class Vgg : public ImageClassifier {
 public:
  Vgg(const VggConfig& c, const ModelOptions& o) {
    nn::Sequential features;
    int64_t in = o.in_channels;
    for (int64_t v : layout(c.layout)) {
      if (v == kPool) {
        features->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
        continue;
      }
      features->push_back(conv2d(in, v, 3, 1, 1, /*bias=*/true));
      if (c.batch_norm) features->push_back(nn::BatchNorm2d(v));
      features->push_back(nn::ReLU(nn::ReLUOptions(/*inplace=*/true)));
      in = v;
    }
    features_ = register_module("features", features);
    avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(7));
    classifier_ = register_module(
        "classifier", nn::Sequential(nn::Linear(kPooled, kHidden), nn::ReLU(nn::ReLUOptions(true)),
                                     nn::Dropout(0.5), nn::Linear(kHidden, kHidden),
                                     nn::ReLU(nn::ReLUOptions(true)), nn::Dropout(0.5),
                                     nn::Linear(kHidden, o.num_classes)));
    init_convs_and_norms(*this);
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* l = m->as<nn::Linear>()) {
        nn::init::normal_(l->weight, 0, 0.01);
        nn::init::zeros_(l->bias);
      }
    }
  }

  at::Tensor forward(at::Tensor x) override {
    x = avgpool_->forward(features_->forward(x));
    return classifier_->forward(x.flatten(1));
  }

 private:
  nn::Sequential features_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Sequential classifier_{nullptr};
};

}  // namespace

std::shared_ptr<ImageClassifier> make_vgg(const VggConfig& config, const ModelOptions& options) {
  return std::make_shared<Vgg>(config, options);
}

int64_t count_vgg(const VggConfig& c, const ModelOptions& o) {
  int64_t n = 0;
  int64_t in = o.in_channels;
  for (int64_t v : layout(c.layout)) {
    if (v == kPool) continue;
    n += conv_params(in, v, 3, /*bias=*/true) + (c.batch_norm ? bn_params(v) : 0);
    in = v;
  }
  return n + kPooled * kHidden + kHidden + kHidden * kHidden + kHidden + kHidden * o.num_classes +
         o.num_classes;
}

}  // namespace dtrain::models
