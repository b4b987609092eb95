// GradScaler on one process (CPU): skipping, growth, PyTorch's trajectory,
// unscale-before-clip, state_dict.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "amp/amp_test_util.h"
#include "dtrain/amp.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::make_reference_model;
using testing::snapshot;

at::Tensor reference_input(int64_t k) {
  return torch::linspace(-1, 1, 12).reshape({4, 3}) * (1 + 0.1 * static_cast<double>(k));
}

at::Tensor reference_loss(torch::nn::Linear& lin, int64_t k) {
  const at::Tensor y = torch::linspace(0.5, -0.5, 8).reshape({4, 2});
  return (lin->forward(reference_input(k)) - y).pow(2).mean();
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].equal(b[i])) return false;
  }
  return true;
}

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.options().growth_factor, 2.0);
  EXPECT_EQ(scaler.options().backoff_factor, 0.5);
  EXPECT_EQ(scaler.options().growth_interval, 2000);
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, AnInjectedInfSkipsTheStepLeavesWeightsUnchangedAndHalvesTheScale) {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  GradScaler scaler;
  scaler.scale(reference_loss(lin, 0)).backward();
  lin->weight.mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
  const auto before = snapshot(*lin);
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_TRUE(same(before, snapshot(*lin)));
  EXPECT_TRUE(opt.state().empty()) << "a skipped step must not create momentum buffers";
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, ANaNGradientSkipsTheStepToo) {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.1);
  GradScaler scaler;
  scaler.scale(reference_loss(lin, 0)).backward();
  lin->bias.mutable_grad()[1] = std::numeric_limits<float>::quiet_NaN();
  const auto before = snapshot(*lin);
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_TRUE(same(before, snapshot(*lin)));
}

TEST(GradScaler, TheScaleDoublesAfterGrowthIntervalCleanSteps) {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.01);
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler scaler(o);
  std::vector<double> scales;
  std::vector<int64_t> trackers;
  for (int64_t k = 0; k < 7; ++k) {
    opt.zero_grad();
    scaler.scale(reference_loss(lin, k)).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    scales.push_back(scaler.get_scale());
    trackers.push_back(scaler.growth_tracker());
  }
  EXPECT_EQ(scales, (std::vector<double>{65536, 65536, 131072, 131072, 131072, 262144, 262144}));
  EXPECT_EQ(trackers, (std::vector<int64_t>{1, 2, 0, 1, 2, 0, 1}));
}

// As in PyTorch, found-inf is recorded per optimizer: an overflow in one
// optimizer's gradients skips only its step, and update() backs off if any
// optimizer found one.
TEST(GradScaler, EachOptimizerSkipsOnlyForItsOwnInfAndUpdateBacksOffForAny) {
  auto a = make_reference_model(), b = make_reference_model();
  torch::optim::SGD opt_a(a->parameters(), 0.1), opt_b(b->parameters(), 0.1);
  GradScaler scaler;
  scaler.scale(reference_loss(a, 0) + reference_loss(b, 1)).backward();
  b->weight.mutable_grad()[1][2] = INFINITY;
  const auto before_a = snapshot(*a), before_b = snapshot(*b);
  EXPECT_TRUE(scaler.step(opt_a));
  EXPECT_FALSE(scaler.step(opt_b));
  EXPECT_FALSE(same(before_a, snapshot(*a)));
  EXPECT_TRUE(same(before_b, snapshot(*b)));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

// The reference is PyTorch 1.13's own GradScaler class (torch/cuda/amp/
// grad_scaler.py) run on the CPU with its two CUDA kernels replaced by their
// arithmetic transcribed from AmpKernels.cu; see grad_scaler_reference.py.
// Both sides train the same Linear with SGD + momentum through the same
// pattern of clean, inf and NaN iterations; the per-iteration scale, growth
// tracker and skip decision must be equal, and the final weights equal
// within float rounding.
void expect_trajectory_matches_pytorch(const std::string& pattern, double init_scale,
                                       int64_t interval) {
  std::ostringstream args;
  args.precision(17);
  args << "trajectory " << pattern << " " << init_scale << " " << interval;
  std::istringstream python(testing::run_reference(args.str()));

  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = interval;
  GradScaler scaler(o);
  for (size_t k = 0; k < pattern.size(); ++k) {
    opt.zero_grad();
    scaler.scale(reference_loss(lin, static_cast<int64_t>(k))).backward();
    if (pattern[k] == 'x') lin->weight.mutable_grad()[0][0] = INFINITY;
    if (pattern[k] == 'n') lin->bias.mutable_grad()[1] = NAN;
    const bool stepped = scaler.step(opt);
    scaler.update();
    std::string word;
    int py_stepped = -1;
    double py_scale = 0;
    int64_t py_tracker = -1;
    python >> word >> py_stepped >> py_scale >> py_tracker;
    ASSERT_EQ(word, "step") << "iteration " << k;
    EXPECT_EQ(stepped, py_stepped == 1) << "iteration " << k << " (" << pattern[k] << ")";
    EXPECT_EQ(scaler.get_scale(), py_scale) << "iteration " << k;
    EXPECT_EQ(scaler.growth_tracker(), py_tracker) << "iteration " << k;
  }
  std::string word;
  python >> word;
  ASSERT_EQ(word, "weights");
  const at::Tensor mine = torch::cat({lin->weight.detach().reshape({-1}), lin->bias.detach()});
  for (int64_t i = 0; i < mine.numel(); ++i) {
    double v = 0;
    python >> v;
    EXPECT_NEAR(mine[i].item<double>(), v, 1e-6) << "weight " << i;
  }
}

TEST(GradScaler, ScaleTrajectoryOverCleanInfAndNaNStepsEqualsPyTorchs) {
  if (!testing::python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  expect_trajectory_matches_pytorch("ccxcccnccccxcxxcccc", 65536.0, 3);
}

TEST(GradScaler, ScaleStopsGrowingBelowFloatOverflowLikePyTorchs) {
  if (!testing::python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  expect_trajectory_matches_pytorch("ccccc", std::ldexp(1.0, 126), 1);
}

// Clipping must see the true gradients: scaled loss + unscale_ + clip + step
// equals unscaled loss + clip + step (the scale is a power of two, so
// unscaling is exact up to the rounding of the scaled backward).
TEST(GradScaler, UnscaleThenClipThenStepEqualsClippingTheUnscaledGradients) {
  auto reference = make_reference_model();
  torch::optim::SGD ref_opt(reference->parameters(), 0.5);
  reference_loss(reference, 0).backward();
  const double ref_norm = torch::nn::utils::clip_grad_norm_(reference->parameters(), 0.05);
  ref_opt.step();

  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.5);
  GradScaler scaler;
  scaler.scale(reference_loss(lin, 0)).backward();
  scaler.unscale_(opt);
  const double norm = torch::nn::utils::clip_grad_norm_(lin->parameters(), 0.05);
  EXPECT_NEAR(norm, ref_norm, 1e-6 * ref_norm);
  ASSERT_GT(ref_norm, 0.05) << "the test must actually clip";
  EXPECT_TRUE(scaler.step(opt));  // must not unscale a second time
  scaler.update();
  const auto want = snapshot(*reference), got = snapshot(*lin);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i].allclose(want[i], 0, 1e-7)) << i;
}

TEST(GradScaler, UnscaleTwiceInOneIterationIsRefusedNamingTheFix) {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.1);
  GradScaler scaler;
  scaler.scale(reference_loss(lin, 0)).backward();
  scaler.unscale_(opt);
  EXPECT_EQ(testing::error_of([&] { scaler.unscale_(opt); }),
            "GradScaler::unscale_ has already been called on this optimizer since the last "
            "update(); call it once per iteration, after the last backward");
  scaler.step(opt);
  EXPECT_THROW(scaler.step(opt), InvalidArgument);
  scaler.update();
  EXPECT_THROW(scaler.update(), InvalidArgument);  // no step since
}

TEST(GradScaler, UnscaleBeforeScaleIsRefused) {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.1);
  GradScaler scaler;
  EXPECT_EQ(testing::error_of([&] { scaler.unscale_(opt); }),
            "GradScaler::unscale_ before scale(): call scaler.scale(loss).backward() earlier in "
            "the iteration");
}

TEST(GradScaler, Fp16GradientsAreRefusedAsInPyTorch) {
  torch::nn::Linear lin(3, 2);
  lin->to(torch::kHalf);
  torch::optim::SGD opt(lin->parameters(), 0.1);
  GradScaler scaler;
  scaler.scale(torch::tensor(1.0f));
  for (auto& p : lin->parameters()) p.mutable_grad() = torch::ones_like(p);
  EXPECT_THROW(scaler.unscale_(opt), InvalidArgument);
}

TEST(GradScaler, BadOptionsAreRefused) {
  GradScalerOptions o;
  o.growth_factor = 1.0;
  EXPECT_THROW(GradScaler{o}, InvalidArgument);
  o = {};
  o.backoff_factor = 1.0;
  EXPECT_THROW(GradScaler{o}, InvalidArgument);
  o = {};
  o.growth_interval = 0;
  EXPECT_THROW(GradScaler{o}, InvalidArgument);
}

TEST(GradScaler, DisabledScalerPassesTheLossThroughAndStepsUnconditionally) {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.1);
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  const at::Tensor loss = reference_loss(lin, 0);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  const auto before = snapshot(*lin);
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_FALSE(same(before, snapshot(*lin)));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.state_dict().size(), 0u);
}

GradScaler scaler_after_some_steps() {
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.01);
  GradScalerOptions o;
  o.growth_interval = 5;
  GradScaler scaler(o);
  for (int64_t k = 0; k < 4; ++k) {
    opt.zero_grad();
    scaler.scale(reference_loss(lin, k)).backward();
    if (k == 1) lin->bias.mutable_grad()[0] = INFINITY;
    scaler.step(opt);
    scaler.update();
  }
  return scaler;  // scale 32768, tracker 2
}

TEST(GradScaler, StateDictRoundTripRestoresScaleTrackerAndFactors) {
  GradScaler a = scaler_after_some_steps();
  ASSERT_EQ(a.get_scale(), 32768.0);
  ASSERT_EQ(a.growth_tracker(), 2);
  const auto dict = a.state_dict();
  std::vector<std::string> keys;
  for (const auto& e : dict) keys.push_back(e.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"scale", "growth_factor", "backoff_factor",
                                            "growth_interval", "_growth_tracker"}));

  // Bytes as torch.save writes them, read back into a default scaler.
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  GradScaler b;
  b.load_state_dict(torch::pickle_load(bytes).toGenericDict());
  EXPECT_EQ(b.get_scale(), 32768.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_EQ(b.options().growth_interval, 5);

  // ... and it continues exactly where `a` would: 3 more clean steps grow it.
  auto lin = make_reference_model();
  torch::optim::SGD opt(lin->parameters(), 0.01);
  for (int64_t k = 0; k < 3; ++k) {
    opt.zero_grad();
    b.scale(reference_loss(lin, k)).backward();
    b.step(opt);
    b.update();
  }
  EXPECT_EQ(b.get_scale(), 65536.0);
  EXPECT_EQ(b.growth_tracker(), 0);
}

TEST(GradScaler, LoadingAnEmptyOrIncompleteStateDictIsRefusedNamingTheKey) {
  GradScaler s;
  EXPECT_THROW(
      s.load_state_dict(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get())),
      InvalidArgument);
  auto d = scaler_after_some_steps().state_dict();
  EXPECT_EQ(d.erase(std::string("_growth_tracker")), 1u);
  const std::string e = testing::error_of([&] { s.load_state_dict(d); });
  EXPECT_NE(e.find("'_growth_tracker'"), std::string::npos) << e;
  EXPECT_EQ(s.get_scale(), 65536.0) << "a refused state_dict must change nothing";
}

TEST(GradScaler, StateDictLoadsIntoPyTorchsGradScalerAndBack) {
  if (!testing::python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const auto mine = testing::scratch_path("scaler.pt");
  const auto back = testing::scratch_path("scaler-python.pt");
  {
    const std::vector<char> bytes =
        torch::pickle_save(c10::IValue(scaler_after_some_steps().state_dict()));
    std::ofstream(mine, std::ios::binary).write(bytes.data(), static_cast<long>(bytes.size()));
  }
  std::istringstream out(testing::run_reference("state " + mine.string() + " " + back.string()));
  std::string word, line;
  out >> word;
  ASSERT_EQ(word, "keys");
  std::getline(out, line);
  EXPECT_EQ(line, " _growth_tracker backoff_factor growth_factor growth_interval scale");
  double scale = 0, growth = 0, backoff = 0;
  int64_t tracker = 0, interval = 0;
  out >> word >> scale >> tracker >> growth >> backoff >> interval;
  EXPECT_EQ(word, "loaded");
  EXPECT_EQ(scale, 32768.0);
  EXPECT_EQ(tracker, 2);
  EXPECT_EQ(growth, 2.0);
  EXPECT_EQ(backoff, 0.5);
  EXPECT_EQ(interval, 5);

  std::ifstream in(back, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  GradScaler s;
  s.load_state_dict(torch::pickle_load(bytes).toGenericDict());
  EXPECT_EQ(s.get_scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 2);
  EXPECT_EQ(s.options().growth_interval, 5);
  std::filesystem::remove(mine);
  std::filesystem::remove(back);
}

}  // namespace
}  // namespace dtrain
