// The registry: names, torchvision's published parameter counts, computed counts against built
// models, input-size checks, and the per-variant details that do not show in a state_dict.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "models/zoo.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

int64_t parameters_of(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(ModelRegistry, InfosListEveryModelWithTorchvisionsPublishedCounts) {
  const std::vector<ModelInfo> infos = model_infos();
  ASSERT_EQ(infos.size(), model_names().size());
  ASSERT_EQ(infos.size(), 22u);  // cnn, 5 ResNets, 8 VGGs, 8 EfficientNets
  // torchvision's documented counts (3 channels, 1000 classes).
  EXPECT_EQ(model_info("resnet18").parameters, 11689512);
  EXPECT_EQ(model_info("resnet50").parameters, 25557032);
  EXPECT_EQ(model_info("vgg16").parameters, 138357544);
  EXPECT_EQ(model_info("vgg16_bn").parameters, 138365992);
  EXPECT_EQ(model_info("efficientnet_b0").parameters, 5288548);
  EXPECT_EQ(model_info("efficientnet_b7").parameters, 66347960);
  const std::pair<const char*, int64_t> sizes[] = {
      {"resnet50", 224},        {"vgg19_bn", 224},        {"efficientnet_b0", 224},
      {"efficientnet_b1", 240}, {"efficientnet_b2", 260}, {"efficientnet_b3", 300},
      {"efficientnet_b4", 380}, {"efficientnet_b5", 456}, {"efficientnet_b6", 528},
      {"efficientnet_b7", 600}};
  for (const auto& [name, size] : sizes) EXPECT_EQ(model_info(name).default_image_size, size);
  EXPECT_EQ(model_info("vgg11").min_image_size, 32);
}

TEST(ModelRegistry, ComputedCountsEqualTheBuiltModelsForOneChannelAndTenClasses) {
  ModelOptions o;  // 1 channel, 10 classes, 28 px
  o.image_size = 32;
  for (const char* name : {"cnn", "resnet18", "resnet50", "efficientnet_b0", "efficientnet_b5"}) {
    auto model = make_model(name, o);
    EXPECT_EQ(count_parameters(name, o), parameters_of(*model)) << name;
  }
}

TEST(ModelRegistry, UnknownModelIsRefusedWithTheValidList) {
  const std::string err = testing::error_of([] { make_model("resnet51", ModelOptions{}); });
  EXPECT_NE(err.find("unknown model 'resnet51'; valid models: cnn, resnet18, resnet34"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("efficientnet_b7"), std::string::npos) << err;
  EXPECT_THROW(model_info("resnet51"), InvalidArgument);
}

TEST(ModelRegistry, ImageBelowTheMinimumIsRefusedNamingTheMinimum) {
  ModelOptions o;
  o.in_channels = 3;
  o.image_size = 28;
  EXPECT_THROW(make_model("vgg16", o), InvalidArgument);
  const std::string err = testing::error_of([&] { make_model("vgg16", o); });
  EXPECT_NE(err.find("model 'vgg16' needs images of at least 32x32, got 28x28; resize them to "
                     "at least that, e.g. with DatasetOptions::image_size 32 "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("or to the model's default 224"), std::string::npos) << err;
  o.image_size = 3;
  EXPECT_NE(testing::error_of([&] { make_model("cnn", o); }).find("at least 4x4"),
            std::string::npos);
  o.image_size = 0;
  EXPECT_NE(testing::error_of([&] { make_model("resnet18", o); }).find("must be positive"),
            std::string::npos);
}

TEST(ModelRegistry, ChannelsAndClassesShapeTheFirstConvolutionAndTheClassifier) {
  ModelOptions o;
  o.in_channels = 1;
  o.num_classes = 7;
  o.image_size = 32;
  auto resnet = make_model("resnet34", o);
  EXPECT_EQ(resnet->named_parameters()["conv1.weight"].sizes(), at::IntArrayRef({64, 1, 7, 7}));
  EXPECT_EQ(resnet->named_parameters()["fc.weight"].sizes(), at::IntArrayRef({7, 512}));
  auto effnet = make_model("efficientnet_b1", o);
  EXPECT_EQ(effnet->named_parameters()["features.0.0.weight"].sizes(),
            at::IntArrayRef({32, 1, 3, 3}));
  EXPECT_EQ(effnet->named_parameters()["classifier.1.weight"].sizes(), at::IntArrayRef({7, 1280}));
  torch::NoGradGuard no_grad;
  effnet->eval();
  EXPECT_EQ(effnet->forward(at::randn({2, 1, 32, 32})).sizes(), at::IntArrayRef({2, 7}));
}

// Not visible in a state_dict: B5-B7 use BatchNorm(eps=1e-3, momentum=0.01), the rest the
// defaults; dropout before the classifier grows with the variant.
TEST(ModelRegistry, EfficientNetB5ToB7UseEps1e3AndMomentum001) {
  ModelOptions o;
  o.in_channels = 3;
  o.image_size = 32;
  for (const char* name : {"efficientnet_b4", "efficientnet_b5"}) {
    auto model = make_model(name, o);
    const bool tf = std::string(name) == "efficientnet_b5";
    int norms = 0;
    for (const auto& m : model->modules()) {
      if (const auto* bn = m->as<torch::nn::BatchNorm2d>()) {
        ++norms;
        EXPECT_DOUBLE_EQ(bn->options.eps(), tf ? 1e-3 : 1e-5) << name;
        EXPECT_DOUBLE_EQ(bn->options.momentum().value(), tf ? 0.01 : 0.1) << name;
      }
    }
    EXPECT_GT(norms, 50) << name;
    const auto* dropout = model->named_modules()["classifier.0"]->as<torch::nn::Dropout>();
    ASSERT_NE(dropout, nullptr) << name;
    EXPECT_DOUBLE_EQ(dropout->options.p(), 0.4) << name;
  }
}

// Stochastic depth draws random numbers in training mode only: `features` (everything but
// the classifier's dropout) gives the same output for any seed in eval mode, and different
// outputs for different seeds in training mode.
TEST(ModelRegistry, StochasticDepthActsInTrainingModeOnly) {
  ModelOptions o;
  o.in_channels = 3;
  o.num_classes = 10;
  o.image_size = 32;
  torch::manual_seed(0);
  auto model = make_model("efficientnet_b0", o);
  auto* features = model->named_modules()["features"]->as<models::ChainImpl>();
  ASSERT_NE(features, nullptr);
  const at::Tensor x = at::randn({4, 3, 32, 32});
  torch::NoGradGuard no_grad;
  model->eval();
  torch::manual_seed(1);
  const at::Tensor a = features->forward(x);
  torch::manual_seed(2);
  EXPECT_TRUE(at::equal(a, features->forward(x)));
  model->train();
  torch::manual_seed(1);
  const at::Tensor b = features->forward(x);
  torch::manual_seed(1);
  EXPECT_TRUE(at::equal(b, features->forward(x)));  // same seed, same drops
  torch::manual_seed(2);
  EXPECT_FALSE(at::allclose(b, features->forward(x)));
}

// Training mode end to end: forward with batch statistics, dropout and stochastic depth, then
// backward reaches every parameter.
TEST(ModelRegistry, BackwardInTrainingModeGivesEveryParameterAGradient) {
  ModelOptions o;
  o.in_channels = 3;
  o.num_classes = 10;
  o.image_size = 32;
  for (const char* name : {"resnet50", "efficientnet_b0"}) {
    auto model = make_model(name, o);
    model->train();
    model->forward(at::randn({2, 3, 32, 32})).logsumexp(1).sum().backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << name << " " << p.key();
    }
  }
}

// `dtrain models` prints one row per model: name, parameters (thousands separated), default
// and minimum input size.
TEST(ModelRegistry, DtrainModelsPrintsEveryModelWithCountAndInputSize) {
  FILE* pipe = ::popen(DTRAIN_BINARY_DIR "/dtrain models 2>&1", "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ASSERT_EQ(::pclose(pipe), 0) << out;
  for (const ModelInfo& m : model_infos()) EXPECT_NE(out.find(m.name + " "), std::string::npos);
  EXPECT_NE(out.find("resnet50               25,557,032     224     1"), std::string::npos) << out;
  EXPECT_NE(out.find("efficientnet_b7        66,347,960     600     1"), std::string::npos) << out;
  EXPECT_NE(out.find("vgg16                 138,357,544     224    32"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrain
