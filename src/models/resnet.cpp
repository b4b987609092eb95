// torchvision's ResNet (He et al., "Deep Residual Learning", 2015) in its v1.5 form, module
// for module: the submodule names (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, ..., fc)
// match torchvision.models.resnet* so a state_dict maps one to one, and the initialisation
// follows torchvision's (Kaiming-normal fan_out convs, BN weight 1 / bias 0, PyTorch's default
// Linear init; zero_init_residual=False).

#include <torch/nn/init.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "common/strings.h"
#include "models/zoo.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

nn::Sequential downsample(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(conv2d(in, out, 1, stride, 0), nn::BatchNorm2d(out));
}

/// Two 3x3 convolutions with a residual connection; a 1x1 convolution + BN ("downsample")
/// projects the input when the shape changes.
class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", conv2d(in, planes, 3, stride, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv2d(planes, planes, 3, 1, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
    if (stride != 1 || in != planes) {
      downsample_ = register_module("downsample", downsample(in, planes, stride));
    }
  }

  static int64_t count(int64_t in, int64_t planes, int64_t stride) {
    int64_t n = conv_params(in, planes, 3) + bn_params(planes) + conv_params(planes, planes, 3) +
                bn_params(planes);
    if (stride != 1 || in != planes) n += conv_params(in, planes, 1) + bn_params(planes);
    return n;
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

/// 1x1 (reduce) -> 3x3 (with the stride: ResNet v1.5) -> 1x1 (expand x4), residual.
class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1_(register_module("conv1", conv2d(in, planes, 1, 1, 0))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv2d(planes, planes, 3, stride, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
        conv3_(register_module("conv3", conv2d(planes, planes * kExpansion, 1, 1, 0))),
        bn3_(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))) {
    if (stride != 1 || in != planes * kExpansion) {
      downsample_ = register_module("downsample", downsample(in, planes * kExpansion, stride));
    }
  }

  static int64_t count(int64_t in, int64_t planes, int64_t stride) {
    const int64_t out = planes * kExpansion;
    int64_t n = conv_params(in, planes, 1) + bn_params(planes) + conv_params(planes, planes, 3) +
                bn_params(planes) + conv_params(planes, out, 1) + bn_params(out);
    if (stride != 1 || in != out) n += conv_params(in, out, 1) + bn_params(out);
    return n;
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor identity = downsample_ ? downsample_->forward(x) : x;
    at::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = torch::relu(bn2_->forward(conv2_->forward(y)));
    y = bn3_->forward(conv3_->forward(y));
    return torch::relu(y + identity);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv3_;
  nn::BatchNorm2d bn3_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

constexpr int64_t kPlanes[4] = {64, 128, 256, 512};
constexpr int64_t kStrides[4] = {1, 2, 2, 2};

// torchvision's ResNet._make_layer: the first block strides and projects.
template <typename Block, typename BlockImpl>
nn::Sequential make_layer(int64_t* in, int64_t planes, int64_t blocks, int64_t stride) {
  nn::Sequential layer;
  layer->push_back(Block(*in, planes, stride));
  *in = planes * BlockImpl::kExpansion;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(Block(*in, planes, 1));
  return layer;
}

class ResNet : public ImageClassifier {
 public:
  ResNet(const ResNetConfig& c, const ModelOptions& o)
      : conv1_(register_module("conv1", conv2d(o.in_channels, 64, 7, 2, 3))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))),
        maxpool_(register_module("maxpool",
                                 nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)))) {
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      layers_[i] = register_module(
          cat("layer", i + 1),
          c.bottleneck
              ? make_layer<Bottleneck, BottleneckImpl>(&in, kPlanes[i], c.layers[i], kStrides[i])
              : make_layer<BasicBlock, BasicBlockImpl>(&in, kPlanes[i], c.layers[i], kStrides[i]));
    }
    avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    fc_ = register_module("fc", nn::Linear(in, o.num_classes));
    init_convs_and_norms(*this);
  }

  at::Tensor forward(at::Tensor x) override {
    x = maxpool_->forward(torch::relu(bn1_->forward(conv1_->forward(x))));
    for (auto& layer : layers_) x = layer->forward(x);
    return fc_->forward(avgpool_->forward(x).flatten(1));
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::MaxPool2d maxpool_;
  nn::Sequential layers_[4] = {nullptr, nullptr, nullptr, nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Linear fc_{nullptr};
};

}  // namespace

std::shared_ptr<ImageClassifier> make_resnet(const ResNetConfig& config,
                                             const ModelOptions& options) {
  return std::make_shared<ResNet>(config, options);
}

int64_t count_resnet(const ResNetConfig& c, const ModelOptions& o) {
  int64_t n = conv_params(o.in_channels, 64, 7) + bn_params(64);
  int64_t in = 64;
  for (int i = 0; i < 4; ++i) {
    for (int64_t b = 0; b < c.layers[i]; ++b) {
      const int64_t stride = b == 0 ? kStrides[i] : 1;
      if (c.bottleneck) {
        n += BottleneckImpl::count(in, kPlanes[i], stride);
        in = kPlanes[i] * BottleneckImpl::kExpansion;
      } else {
        n += BasicBlockImpl::count(in, kPlanes[i], stride);
        in = kPlanes[i];
      }
    }
  }
  return n + in * o.num_classes + o.num_classes;
}

}  // namespace dtrain::models
