// torchvision's ResNet-18 (He et al., "Deep Residual Learning", 2015), module
// for module: the submodule names (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0,
// ..., fc) match torchvision.models.resnet18 so a state_dict maps one to one,
// and the initialisation follows torchvision's (Kaiming-normal fan_out convs,
// BN weight 1 / bias 0, PyTorch's default Linear init).

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/utils.h>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "models/zoo.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

/// Two 3x3 convolutions with a residual connection; a 1x1 convolution + BN
/// ("downsample") projects the input when the shape changes.
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1_(register_module("conv1", conv(in, out, 3, stride, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", conv(out, out, 3, 1, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      downsample_ = register_module(
          "downsample", nn::Sequential(conv(in, out, 1, stride, 0), nn::BatchNorm2d(out)));
    }
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor identity = downsample_ ? downsample_->forward(x) : x;
    at::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    return torch::relu(y + identity);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

nn::Sequential make_layer(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(BasicBlock(in, out, stride), BasicBlock(out, out, 1));
}

class ResNet18 : public ImageClassifier {
 public:
  explicit ResNet18(const ModelOptions& o)
      : conv1_(register_module("conv1", conv(o.in_channels, 64, 7, 2, 3))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))),
        maxpool_(register_module("maxpool",
                                 nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)))),
        layer1_(register_module("layer1", make_layer(64, 64, 1))),
        layer2_(register_module("layer2", make_layer(64, 128, 2))),
        layer3_(register_module("layer3", make_layer(128, 256, 2))),
        layer4_(register_module("layer4", make_layer(256, 512, 2))),
        avgpool_(register_module("avgpool", nn::AdaptiveAvgPool2d(1))),
        fc_(register_module("fc", nn::Linear(512, o.num_classes))) {
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* b = m->as<nn::BatchNorm2d>()) {
        nn::init::ones_(b->weight);
        nn::init::zeros_(b->bias);
      }
    }
  }

  at::Tensor forward(at::Tensor x) override {
    x = maxpool_->forward(torch::relu(bn1_->forward(conv1_->forward(x))));
    x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
    return fc_->forward(avgpool_->forward(x).flatten(1));
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::MaxPool2d maxpool_;
  nn::Sequential layer1_, layer2_, layer3_, layer4_;
  nn::AdaptiveAvgPool2d avgpool_;
  nn::Linear fc_;
};

}  // namespace

std::shared_ptr<ImageClassifier> make_resnet18(const ModelOptions& options) {
  if (options.in_channels < 1 || options.num_classes < 1 || options.image_size < 1) {
    throw InvalidArgument(cat("model 'resnet18': in_channels (", options.in_channels,
                              "), num_classes (", options.num_classes, ") and image_size (",
                              options.image_size, ") must be positive"));
  }
  return std::make_shared<ResNet18>(options);
}

}  // namespace dtrain::models
