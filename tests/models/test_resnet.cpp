// ResNet-18: torchvision's architecture, names and parameter count.

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dtrain/models.h"

namespace dtrain {
namespace {

TEST(ResNet18, HasTorchvisionsParameterCountAndNames) {
  auto model = make_model("resnet18", {3, 1000, 224});
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(count, 11689512);  // sum(p.numel() for p in torchvision.models.resnet18().parameters())
  const auto params = model->named_parameters();
  for (const char* name :
       {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.bias", "layer4.1.bn2.weight", "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(params.contains(name)) << name;
  }
  EXPECT_TRUE(model->named_buffers().contains("layer3.1.bn1.running_mean"));
  EXPECT_EQ(params["layer3.0.conv1.weight"].sizes().vec(), (std::vector<int64_t>{256, 128, 3, 3}));
}

TEST(ResNet18, TakesAnyInputSizeChannelCountAndClassCount) {
  for (auto [channels, classes, size] :
       {std::tuple{3, 10, 32}, std::tuple{1, 7, 28}, std::tuple{3, 10, 96}}) {
    auto model = make_model("resnet18", {channels, classes, size});
    model->eval();
    const at::Tensor out = model->forward(torch::randn({2, channels, size, size}));
    EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, classes}));
  }
}

}  // namespace
}  // namespace dtrain
