// Every torchvision model against torchvision 0.14 itself: parameter count (computed and
// built), state_dict keys, order and shapes, eval-mode logits (and training-mode logits from
// the same seed) with torchvision's weights loaded into dtrain, and torchvision's logits with
// dtrain's weights loaded into it (load_state_dict strict=True). One Python process serves a whole
// family; 2 images of 32 px.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtrain/models.h"
#include "dtrain/weights.h"
#include "models/python_peer.h"
#include "support/peer_version.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kImageSize = 32;
constexpr double kTolerance = 1e-4;

c10::impl::GenericDict read_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return torch::pickle_load(std::vector<char>((std::istreambuf_iterator<char>(in)), {}))
      .toGenericDict();
}

std::string shape_text(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? "," : "") + std::to_string(sizes[i]);
  return out + "]";
}

// Random BatchNorm statistics and affine parameters, so that eval logits depend on every
// buffer reaching the right place.
void randomize_norms(torch::nn::Module& model) {
  for (auto& m : model.modules()) {
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.uniform_(0.4, 0.8);  // as the peer's: logits near 1 even for ResNet-152
      bn->bias.uniform_(-0.2, 0.2);
      bn->running_mean.uniform_(-0.2, 0.2);
      bn->running_var.uniform_(1.0, 2.0);
    }
  }
}

class Torchvision : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::python_has_torchvision()) {
      GTEST_SKIP() << "/usr/bin/python3 cannot import torch and torchvision";
    }
    at::set_num_threads(2);  // the peer uses 2 as well
    same_release = testing::peer_is_same_release();
    dir_ = fs::temp_directory_path() /
           ("dtrain-torchvision-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void check_family(const std::vector<std::string>& names) {
    testing::PythonPeer peer;
    for (const std::string& name : names) {
      SCOPED_TRACE(name);
      check_model(peer, name);
    }
  }

  void check_model(testing::PythonPeer& peer, const std::string& name) {
    const std::string base = (dir_ / name).string();
    const std::string answer =
        peer.ask("ref " + name + " " + std::to_string(kImageSize) + " " + dir_.string());
    ASSERT_EQ(answer.rfind("ok ", 0), 0u) << answer;
    const int64_t torchvision_count = std::stoll(answer.substr(3));

    ModelOptions o;
    o.in_channels = 3;
    o.num_classes = 1000;
    o.image_size = kImageSize;
    auto model = make_model(name, o);
    int64_t built = 0;
    for (const auto& p : model->parameters()) built += p.numel();
    EXPECT_EQ(built, torchvision_count);
    EXPECT_EQ(count_parameters(name, o), torchvision_count);
    EXPECT_EQ(model_info(name).parameters, torchvision_count);

    // state_dict keys, order and shapes ("key [d0,d1,...]" per line).
    std::ifstream keys(base + ".keys.txt");
    const NamedTensors state = state_dict(*model);
    size_t i = 0;
    std::string key, shape;
    while (keys >> key >> shape) {
      ASSERT_LT(i, state.size()) << "dtrain's state_dict ends before '" << key << "'";
      ASSERT_EQ(state[i].first, key) << "entry " << i;
      ASSERT_EQ(shape_text(state[i].second.sizes()), shape) << key;
      ++i;
    }
    ASSERT_EQ(i, state.size()) << "dtrain has more entries, from '" << state[i].first << "'";

    // Python -> dtrain: torchvision's weights, torchvision's logits.
    load_weights(*model, base + ".weights.pt");
    fs::remove(base + ".weights.pt");
    const c10::impl::GenericDict io = read_dict(base + ".io.pt");
    const at::Tensor x = io.at("x").toTensor();
    torch::NoGradGuard no_grad;
    model->eval();
    const double into_dtrain =
        (model->forward(x) - io.at("logits").toTensor()).abs().max().item<double>();
    EXPECT_LE(into_dtrain, kTolerance);
    // Training mode draws the same random numbers in the same order (dropout, stochastic
    // depth) and normalises with batch statistics.
    // Only between the same release: the random stream differs across releases.
    double training = -1;
    if (same_release) {
      model->train();
      torch::manual_seed(5);
      training = (model->forward(x) - io.at("train_logits").toTensor()).abs().max().item<double>();
      EXPECT_LE(training, kTolerance);
    }
    model->eval();

    // dtrain -> Python: other weights (each parameter scaled by its own factor in [0.9, 1.1),
    // new BatchNorm statistics), loaded by torchvision strictly. (Rebuilding the model
    // instead costs seconds for VGG.)
    torch::manual_seed(7);
    for (auto& t : model->parameters()) t.mul_(0.9 + 0.2 * at::rand({1}).item<double>());
    randomize_norms(*model);
    const at::Tensor logits = model->forward(x);
    save_weights(*model, base + ".dtrain.pt");
    const std::string back = base + ".back.pt";
    ASSERT_EQ(peer.ask("check " + name + " " + base + ".io.pt " + base + ".dtrain.pt " + back),
              "ok");
    fs::remove(base + ".dtrain.pt");
    const double into_torchvision =
        (read_dict(back).at("logits").toTensor() - logits).abs().max().item<double>();
    EXPECT_LE(into_torchvision, kTolerance);
    std::printf(
        "%-16s parameters %11lld  max |logits diff| torchvision->dtrain %.3g "
        "(training mode %.3g, -1: another release), dtrain->torchvision %.3g (|logits| up to "
        "%.3g)\n",
        name.c_str(), static_cast<long long>(torchvision_count), into_dtrain, training,
        into_torchvision, logits.abs().max().item<double>());
  }

  fs::path dir_;
  bool same_release = true;  ///< training-mode logits compared (see peer_version.h)
};

TEST_F(Torchvision, ResNetsEqualTorchvisionInCountKeysShapesAndLogitsBothWays) {
  check_family({"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"});
}

TEST_F(Torchvision, VggsEqualTorchvisionInCountKeysShapesAndLogitsBothWays) {
  check_family(
      {"vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"});
}

TEST_F(Torchvision, EfficientNetsEqualTorchvisionInCountKeysShapesAndLogitsBothWays) {
  check_family({"efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
                "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7"});
}

}  // namespace
}  // namespace dtrain
