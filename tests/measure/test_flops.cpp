// forward_macs() against torchvision's published "GFLOPS" (multiply-adds of
// the convolutions and linear layers at 224 px) and the exact counts that
// PyTorch forward hooks on torchvision 0.14's Conv2d/Linear modules give
// (the peer bench/peer/pytorch_train_bench.py counts the same way).
#include <gtest/gtest.h>

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "dtrain/bench.h"
#include "dtrain/models.h"

namespace dtrain {
namespace {

int64_t macs_of(const std::string& name, int64_t image_size, int64_t num_classes = 1000) {
  ModelOptions o;
  o.in_channels = 3;
  o.num_classes = num_classes;
  o.image_size = image_size;
  torch::manual_seed(0);
  auto model = make_model(name, o);
  return forward_macs(*model, 3, image_size);
}

TEST(ForwardMacs, EqualTorchvisionsPublishedCountsAndPytorchHooksExactly) {
  struct Case {
    const char* name;
    int64_t hooks;     // torch 1.13 forward hooks, torchvision 0.14, 1x3x224x224
    double published;  // torchvision's model table, "GFLOPS" (multiply-adds)
  };
  for (const Case& c :
       {Case{"resnet18", 1814073344, 1.81}, Case{"resnet50", 4089184256, 4.09},
        Case{"vgg16", 15470264320, 15.47}, Case{"efficientnet_b0", 385814752, 0.39}}) {
    const int64_t macs = macs_of(c.name, 224);
    EXPECT_EQ(macs, c.hooks) << c.name;
    // Within 1%, or within the table's rounding to two decimals (0.39 G).
    EXPECT_NEAR(static_cast<double>(macs) / 1e9, c.published, std::max(0.01 * c.published, 0.005))
        << c.name;
  }
  EXPECT_EQ(macs_of("resnet18", 32, 10), 37016576);  // spatial sizes rounded as the convs do
}

TEST(ForwardMacs, LeavesTheTrainingModeAndBatchNormStatisticsAsTheyWere) {
  ModelOptions o;
  o.in_channels = 3;
  o.num_classes = 10;
  o.image_size = 32;
  torch::manual_seed(0);
  auto model = make_model("resnet18", o);
  std::vector<at::Tensor> before;
  for (const auto& b : model->buffers()) before.push_back(b.clone());
  EXPECT_GT(forward_macs(*model, 3, 32), 0);
  EXPECT_TRUE(model->is_training());
  const auto after = model->buffers();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(after[i].equal(before[i])) << i;
  model->eval();
  forward_macs(*model, 3, 32);
  EXPECT_FALSE(model->is_training());
}

}  // namespace
}  // namespace dtrain
