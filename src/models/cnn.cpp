#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "models/zoo.h"

namespace dtrain::models {
namespace {

namespace F = torch::nn::functional;

class Cnn : public ImageClassifier {
 public:
  explicit Cnn(const ModelOptions& o)
      : conv1_(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.in_channels, 32, 5).padding(2)))),
        conv2_(register_module("conv2",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 5).padding(2)))),
        fc1_(register_module("fc1",
                             torch::nn::Linear(64 * (o.image_size / 4) * (o.image_size / 4), 128))),
        fc2_(register_module("fc2", torch::nn::Linear(128, o.num_classes))) {}

  at::Tensor forward(at::Tensor x) override {
    x = F::max_pool2d(torch::relu(conv1_->forward(x)), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(torch::relu(conv2_->forward(x)), F::MaxPool2dFuncOptions(2));
    x = torch::relu(fc1_->forward(x.flatten(1)));
    return fc2_->forward(x);
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::Conv2d conv2_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};

}  // namespace

std::shared_ptr<ImageClassifier> make_cnn(const ModelOptions& options) {
  return std::make_shared<Cnn>(options);
}

int64_t count_cnn(const ModelOptions& o) {
  const int64_t flat = 64 * (o.image_size / 4) * (o.image_size / 4);
  return (o.in_channels * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (flat * 128 + 128) +
         (128 * o.num_classes + o.num_classes);
}

}  // namespace dtrain::models
