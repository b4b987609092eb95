// Every torchvision model against torchvision of this LibTorch's release (0.14 for 1.13, 0.26
// for 2.11: support/peer_version.h): parameter count (computed and built), state_dict keys,
// order and shapes, eval-mode logits (and training-mode logits from the same seed) with
// torchvision's weights loaded into dtrain, and torchvision's logits with dtrain's weights loaded
// into it (load_state_dict strict=True). One Python process serves a whole family; 2 images of
// 32 px. The initialisation as constructed: each state_dict entry's
// statistics against torchvision's (Note [Initialisation statistics]).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
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
      GTEST_SKIP() << testing::reference_python_missing();
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

// Note [Initialisation statistics]
// Independent draws cannot be compared value by value, so each state_dict entry's
// distribution is (over its first 2^20 elements, to spare memory): its size, mean, standard
// deviation and (from 10,000 elements) kurtosis against the same entry of torchvision's model, as
// constructed. For n draws of standard deviation s two samples' means differ by about s*sqrt(2/n),
// their standard deviations by about s/sqrt(n) (normal; less for uniform) and their kurtoses by
// sqrt(48/n) (normal: 3; uniform: 1.8); each is allowed 6 of those. That tells Kaiming-normal
// fan_out from fan_in (a factor sqrt(2) in std for a 3x3 conv doubling its channels), N(0, 0.01)
// from other scales, normal from uniform. A uniform entry's largest magnitude (its bound) must also
// agree within 40/n of it (the chance that n draws all miss the top 20/n is e^-20). Constant
// entries (BatchNorm 1 / 0, zero biases, running statistics, counters) must be equal exactly.
constexpr int64_t kInitSample = 1 << 20;  // elements of an entry compared (the first ones)

struct InitStats {
  int64_t n = 0;
  double mean = 0, std = 0, min = 0, max = 0, kurtosis = 0;
};

InitStats stats_of(const at::Tensor& value) {
  const at::Tensor t = value.detach().flatten().slice(0, 0, kInitSample).to(at::kDouble);
  InitStats s;
  s.n = t.numel();
  s.mean = t.mean().item<double>();
  const at::Tensor d = t - s.mean;
  s.std = d.pow(2).mean().sqrt().item<double>();
  s.kurtosis = s.std > 0 ? (d.pow(4).mean().item<double>() / std::pow(s.std, 4)) : 0.0;
  s.min = t.min().item<double>();
  s.max = t.max().item<double>();
  return s;
}

// The largest statistic difference in units of its tolerance, per entry.
double compare_init(const std::string& key, const InitStats& ours, const InitStats& ref) {
  EXPECT_EQ(ours.n, ref.n) << key;
  if (ref.std == 0) {
    EXPECT_EQ(ours.std, 0.0) << key << " is constant in torchvision";
    EXPECT_EQ(ours.mean, ref.mean) << key;
    return ours.std == 0 && ours.mean == ref.mean ? 0.0 : 1e9;
  }
  const double n = static_cast<double>(ref.n), s = std::max(ours.std, ref.std);
  double worst = std::max(std::abs(ours.mean - ref.mean) / (6 * s * std::sqrt(2 / n)),
                          std::abs(ours.std - ref.std) / (6 * s / std::sqrt(n)));
  if (ref.n >= 10000) {
    worst = std::max(worst, std::abs(ours.kurtosis - ref.kurtosis) / (6 * std::sqrt(48 / n)));
  }
  if (ref.kurtosis < 2.2 && ref.n >= 1000) {  // uniform: compare the bounds
    const double bound = std::max(-ref.min, ref.max);
    worst = std::max(worst, std::abs(std::max(-ours.min, ours.max) - bound) / (bound * 40 / n));
  }
  EXPECT_LE(worst, 1.0) << key << ": n " << ours.n << ", mean " << ours.mean << " vs " << ref.mean
                        << ", std " << ours.std << " vs " << ref.std << ", kurtosis "
                        << ours.kurtosis << " vs " << ref.kurtosis << ", range [" << ours.min
                        << ", " << ours.max << "] vs [" << ref.min << ", " << ref.max << "]";
  return worst;
}

// Both models with their own initialisation, 1000 classes, from different seeds: with the
// same seed the two draw the very same numbers (same generator, same order of draws), which
// would make any comparison of statistics pass trivially.
void check_initialisation(testing::PythonPeer& peer, const std::string& name, const fs::path& dir) {
  const std::string file = (dir / (name + ".init.txt")).string();
  ASSERT_EQ(peer.ask("init " + name + " 1 " + file), "ok");
  torch::manual_seed(2);
  ModelOptions o;
  o.in_channels = 3;
  o.num_classes = 1000;
  o.image_size = model_info(name).default_image_size;
  const NamedTensors state = state_dict(*make_model(name, o));
  std::ifstream in(file);
  std::string key;
  InitStats ref;
  size_t i = 0, random = 0;
  double worst = 0;
  while (in >> key >> ref.n >> ref.mean >> ref.std >> ref.min >> ref.max >> ref.kurtosis) {
    ASSERT_LT(i, state.size()) << "dtrain's state_dict ends before '" << key << "'";
    ASSERT_EQ(state[i].first, key);
    worst = std::max(worst, compare_init(key, stats_of(state[i].second), ref));
    random += ref.std > 0;
    ++i;
  }
  EXPECT_EQ(i, state.size());
  std::printf("%-16s %zu entries (%zu random): largest difference %.2f of its tolerance\n",
              name.c_str(), i, random, worst);
}

TEST_F(Torchvision, InitialisationStatisticsEqualTorchvisionsPerStateDictEntry) {
  testing::PythonPeer peer;
  // ResNet: Kaiming-normal fan_out convs, BN 1/0 (zero_init_residual=False), the fc's
  // default Linear init; VGG: conv biases 0, Linear N(0, 0.01); EfficientNet: Linear
  // U(+-1/sqrt(out)), SE convs with biases.
  for (const std::string name : {"resnet50", "vgg11_bn", "efficientnet_b0"}) {
    SCOPED_TRACE(name);
    check_initialisation(peer, name, dir_);
  }
}

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
