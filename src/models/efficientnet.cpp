// torchvision's EfficientNet-B0 ... B7 (Tan & Le, 2019), module for module.
//
// Note [EfficientNet as torchvision builds it]
// - Stages: torchvision's base table (expand ratio, kernel, stride, in, out, layers) scaled by
//   the variant's width multiplier (channels -> _make_divisible(c * w, 8): nearest multiple of
//   8, at least 8, never more than 10% below) and depth multiplier (layers -> ceil(n * d)).
// - features.0 is conv 3x3/2 + BN + SiLU; features.1..7 are the stages, each a Sequential of
//   MBConv blocks whose `block` Sequential holds [expand 1x1 CNA when the ratio is not 1],
//   depthwise kxk CNA, squeeze-excitation (fc1/fc2 1x1 convs with bias, squeeze width
//   max(1, block_in // 4), SiLU then sigmoid), project 1x1 conv + BN (no activation);
//   features.8 is conv 1x1 to 4x the last stage's width + BN + SiLU. Then AdaptiveAvgPool2d(1)
//   and classifier = Dropout(p) (classifier.0), Linear (classifier.1).
// - A block adds its input only when stride 1 and in == out; the branch goes through
//   stochastic depth in "row" mode (each sample's branch dropped with probability p, survivors
//   scaled by 1/(1-p)), p = 0.2 * block_index / total_blocks, and only in training mode.
// - B5-B7 use BatchNorm(eps=1e-3, momentum=0.01); B0-B4 PyTorch's defaults. LibTorch's momentum
//   has PyTorch's meaning (weight of the new batch statistic).
// - Initialisation: Kaiming-normal fan_out convs, zero conv biases, BN 1 / 0, Linear
//   U(-1/sqrt(out), 1/sqrt(out)) with zero bias.

#include <cmath>

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

struct Variant {
  double width, depth, dropout;
  bool tf_norm;  // BatchNorm eps 1e-3, momentum 0.01
};

// torchvision.models.efficientnet_b0 ... b7
constexpr Variant kVariants[8] = {
    {1.0, 1.0, 0.2, false}, {1.0, 1.1, 0.2, false}, {1.1, 1.2, 0.3, false}, {1.2, 1.4, 0.3, false},
    {1.4, 1.8, 0.4, false}, {1.6, 2.2, 0.4, true},  {1.8, 2.6, 0.5, true},  {2.0, 3.1, 0.5, true},
};

struct Stage {
  double expand;
  int64_t kernel, stride, in, out, layers;
};

// torchvision's _efficientnet_conf("efficientnet_b*") before scaling.
constexpr Stage kBase[7] = {
    {1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2},   {6, 3, 2, 40, 80, 3},
    {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1},
};

// torchvision.models._utils._make_divisible(v, 8)
int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t n = std::max(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (n < 0.9 * v) n += divisor;
  return n;
}

std::vector<Stage> stages(int variant) {
  const Variant& v = kVariants[variant];
  std::vector<Stage> out;
  for (Stage s : kBase) {
    s.in = make_divisible(s.in * v.width);
    s.out = make_divisible(s.out * v.width);
    s.layers = static_cast<int64_t>(std::ceil(s.layers * v.depth));
    out.push_back(s);
  }
  return out;
}

/// One block's shape, after torchvision's per-block adjustments.
struct BlockShape {
  int64_t in, expanded, squeeze, out, kernel, stride;
};

BlockShape block_shape(const Stage& s, bool first) {
  BlockShape b;
  b.in = first ? s.in : s.out;
  b.stride = first ? s.stride : 1;
  b.expanded = make_divisible(b.in * s.expand);
  b.squeeze = std::max<int64_t>(1, b.in / 4);
  b.out = s.out;
  b.kernel = s.kernel;
  return b;
}

nn::BatchNorm2d norm(int64_t channels, bool tf_norm) {
  auto o = nn::BatchNorm2dOptions(channels);
  if (tf_norm) o.eps(1e-3).momentum(0.01);
  return nn::BatchNorm2d(o);
}

/// torchvision.ops.Conv2dNormActivation: conv (padding (k-1)/2, no bias), BN, [SiLU].
Chain conv_norm_act(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                    bool tf_norm, bool activation) {
  Chain s;
  s->push_back(conv2d(in, out, kernel, stride, (kernel - 1) / 2, false, groups));
  s->push_back(norm(out, tf_norm));
  if (activation) s->push_back(nn::SiLU());
  return s;
}

/// torchvision.ops.SqueezeExcitation with SiLU: x * sigmoid(fc2(silu(fc1(avgpool(x))))).
class SqueezeExcitationImpl : public nn::Module {
 public:
  SqueezeExcitationImpl(int64_t channels, int64_t squeeze)
      : fc1_(register_module("fc1", conv2d(channels, squeeze, 1, 1, 0, /*bias=*/true))),
        fc2_(register_module("fc2", conv2d(squeeze, channels, 1, 1, 0, /*bias=*/true))) {}

  at::Tensor forward(at::Tensor x) {
    at::Tensor scale = at::adaptive_avg_pool2d(x, {1, 1});
    scale = torch::sigmoid(fc2_->forward(torch::silu(fc1_->forward(scale))));
    return scale * x;
  }

 private:
  nn::Conv2d fc1_, fc2_;
};
TORCH_MODULE(SqueezeExcitation);

class MBConvImpl : public nn::Module {
 public:
  MBConvImpl(const BlockShape& b, double drop_prob, bool tf_norm)
      : residual_(b.stride == 1 && b.in == b.out), drop_prob_(drop_prob) {
    Chain block;
    if (b.expanded != b.in) {
      block->push_back(conv_norm_act(b.in, b.expanded, 1, 1, 1, tf_norm, true));
    }
    block->push_back(
        conv_norm_act(b.expanded, b.expanded, b.kernel, b.stride, b.expanded, tf_norm, true));
    block->push_back(SqueezeExcitation(b.expanded, b.squeeze));
    block->push_back(conv_norm_act(b.expanded, b.out, 1, 1, 1, tf_norm, false));
    block_ = register_module("block", block);
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor y = block_->forward(x);
    if (!residual_) return y;
    if (is_training() && drop_prob_ > 0) {  // torchvision.ops.stochastic_depth(mode="row")
      const double survival = 1.0 - drop_prob_;
      std::vector<int64_t> size(y.dim(), 1);
      size[0] = y.size(0);
      at::Tensor noise = at::empty(size, y.options()).bernoulli_(survival);
      if (survival > 0) noise.div_(survival);
      y = y * noise;
    }
    return y + x;
  }

 private:
  bool residual_;
  double drop_prob_;
  Chain block_{nullptr};
};
TORCH_MODULE(MBConv);

constexpr double kStochasticDepth = 0.2;

class EfficientNet : public ImageClassifier {
 public:
  EfficientNet(int variant, const ModelOptions& o) {
    const Variant& v = kVariants[variant];
    const std::vector<Stage> table = stages(variant);
    int64_t total = 0;
    for (const Stage& s : table) total += s.layers;
    Chain features;
    features->push_back(conv_norm_act(o.in_channels, table[0].in, 3, 2, 1, v.tf_norm, true));
    int64_t index = 0;
    for (const Stage& s : table) {
      Chain stage;
      for (int64_t i = 0; i < s.layers; ++i, ++index) {
        const double p = kStochasticDepth * static_cast<double>(index) / total;
        stage->push_back(MBConv(block_shape(s, i == 0), p, v.tf_norm));
      }
      features->push_back(stage);
    }
    const int64_t last_in = table.back().out;
    features->push_back(conv_norm_act(last_in, 4 * last_in, 1, 1, 1, v.tf_norm, true));
    features_ = register_module("features", features);
    avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    nn::Linear fc(4 * last_in, o.num_classes);
    Chain classifier;
    classifier->push_back(nn::Dropout(v.dropout));
    classifier->push_back(fc);
    classifier_ = register_module("classifier", classifier);
    init_convs_and_norms(*this);
    torch::NoGradGuard no_grad;
    const double range = 1.0 / std::sqrt(static_cast<double>(o.num_classes));
    nn::init::uniform_(fc->weight, -range, range);
    nn::init::zeros_(fc->bias);
  }

  at::Tensor forward(at::Tensor x) override {
    x = avgpool_->forward(features_->forward(x));
    return classifier_->forward(x.flatten(1));
  }

 private:
  Chain features_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  Chain classifier_{nullptr};
};

}  // namespace

std::shared_ptr<ImageClassifier> make_efficientnet(int variant, const ModelOptions& options) {
  return std::make_shared<EfficientNet>(variant, options);
}

int64_t count_efficientnet(int variant, const ModelOptions& o) {
  const std::vector<Stage> table = stages(variant);
  int64_t n = conv_params(o.in_channels, table[0].in, 3) + bn_params(table[0].in);
  for (const Stage& s : table) {
    for (int64_t i = 0; i < s.layers; ++i) {
      const BlockShape b = block_shape(s, i == 0);
      if (b.expanded != b.in) n += conv_params(b.in, b.expanded, 1) + bn_params(b.expanded);
      n += conv_params(b.expanded, b.expanded, b.kernel, false, b.expanded) + bn_params(b.expanded);
      n +=
          conv_params(b.expanded, b.squeeze, 1, true) + conv_params(b.squeeze, b.expanded, 1, true);
      n += conv_params(b.expanded, b.out, 1) + bn_params(b.out);
    }
  }
  const int64_t last = 4 * table.back().out;
  n += conv_params(table.back().out, last, 1) + bn_params(last);
  return n + last * o.num_classes + o.num_classes;
}

}  // namespace dtrain::models
