#pragma once
// Constructors of the model zoo and their parameter counts; the registry (registry.cpp) maps
// names to them. Each count_* is the parameter count of what the matching make_* builds,
// computed from the same configuration (tests/models checks one against the other).

#include <array>
#include <string>
#include <vector>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>

#include "dtrain/models.h"

namespace dtrain::models {

/// The slice's CNN: conv(C->32, 5x5, pad 2)-ReLU-maxpool 2 -> conv(32->64, 5x5,
/// pad 2)-ReLU-maxpool 2 -> linear(64*(S/4)^2 -> 128)-ReLU -> linear(128->K).
std::shared_ptr<ImageClassifier> make_cnn(const ModelOptions& options);
int64_t count_cnn(const ModelOptions& options);

/// torchvision's ResNet: BasicBlock (18, 34) or Bottleneck (50, 101, 152; v1.5, the stride on
/// the 3x3 convolution) with `layers` blocks per stage.
struct ResNetConfig {
  bool bottleneck = false;
  std::array<int64_t, 4> layers{2, 2, 2, 2};
};
std::shared_ptr<ImageClassifier> make_resnet(const ResNetConfig& config,
                                             const ModelOptions& options);
int64_t count_resnet(const ResNetConfig& config, const ModelOptions& options);

/// torchvision's VGG: configuration 'A' (11), 'B' (13), 'D' (16) or 'E' (19), optionally with
/// BatchNorm after every convolution.
struct VggConfig {
  char layout = 'D';
  bool batch_norm = false;
};
std::shared_ptr<ImageClassifier> make_vgg(const VggConfig& config, const ModelOptions& options);
int64_t count_vgg(const VggConfig& config, const ModelOptions& options);

/// torchvision's EfficientNet-B<variant>, variant 0..7.
std::shared_ptr<ImageClassifier> make_efficientnet(int variant, const ModelOptions& options);
int64_t count_efficientnet(int variant, const ModelOptions& options);

// ---- Shared by the torchvision families -----------------------------------------------------

/// Parameters of a KxK convolution (groups dividing both channel counts) and of a BatchNorm.
inline int64_t conv_params(int64_t in, int64_t out, int64_t kernel, bool bias = false,
                           int64_t groups = 1) {
  return in / groups * out * kernel * kernel + (bias ? out : 0);
}
inline int64_t bn_params(int64_t channels) { return 2 * channels; }

/// nn.Conv2d(in, out, kernel, stride, padding, groups=groups, bias=bias).
torch::nn::Conv2d conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                         bool bias = false, int64_t groups = 1);

/// nn.Sequential for nesting: children named "0", "1", ... run in order. (LibTorch's
/// nn::Sequential has a templated forward, so it cannot sit inside another Sequential.)
class ChainImpl : public torch::nn::Module {
 public:
  template <typename ModuleHolder>
  void push_back(ModuleHolder module) {
    register_module(std::to_string(items_.size()), module.ptr());
    items_.emplace_back(std::move(module));
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& item : items_) x = item.forward(x);
    return x;
  }

 private:
  std::vector<torch::nn::AnyModule> items_;
};
TORCH_MODULE(Chain);

/// torchvision's initialisation of convolutions and BatchNorms, shared by all three families:
/// Kaiming-normal (fan_out, ReLU gain) conv weights, zero conv biases, BatchNorm weight 1 and
/// bias 0. Linear layers are left to the caller (each family differs).
void init_convs_and_norms(torch::nn::Module& model);

}  // namespace dtrain::models
