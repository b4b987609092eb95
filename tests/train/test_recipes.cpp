// The pieces of the ImageNet recipes against PyTorch of this LibTorch's
// release: one optimizer step of ResNet-18 (SGD with Nesterov momentum, AdamW;
// torchvision's weight decay groups), the learning-rate schedules, label
// smoothing, gradient clipping; top-5 counting on a known batch. The PyTorch
// side is tests/train/peer/*.py run by the reference Python
// (support/peer_version.h: 1.13's /usr/bin/python3 or the 2.x peer venv);
// those tests skip without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/utils.h>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/checkpoint.h"
#include "dtrain/lr_schedule.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/train.h"
#include "support/peer_version.h"
#include "support/ranks.h"
#include "train/fixtures.h"
#include "train/python.h"

namespace dtrain {
namespace {

using testing::ScratchDir;

// ---- One optimizer step of ResNet-18 ------------------------------------------------

// One intra-op thread while alive, as the peers (optimizer_step.py,
// adamw_continue.py): with two, LibTorch 2.11's CPU convolution backward sums
// in another order, and batch norm over 4 images amplifies that to 1e-3 in two
// steps (with one: equal bit for bit).
struct OneThread {
  int before = at::get_num_threads();
  OneThread() { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(before); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
};

class OptimizerStep : public ScratchDir {
 protected:
  // Two steps (so momentum and Adam's moments are used, not only created) on
  // one batch from the same weights in dtrain and in PyTorch; returns the
  // largest difference of any parameter or buffer afterwards.
  double max_difference_from_pytorch(const OptimizerOptions& o) {
    const OneThread one_thread;
    torch::manual_seed(3);
    ModelOptions mo;
    mo.in_channels = 3;
    mo.image_size = 32;
    mo.num_classes = 10;
    auto model = make_model("resnet18", mo);
    const at::Tensor inputs = at::randn({4, 3, 32, 32});
    const at::Tensor targets = at::tensor({1, 7, 3, 3}, at::kLong);
    std::vector<std::pair<std::string, at::Tensor>> before{{"inputs", inputs},
                                                           {"targets", targets}};
    for (const auto& [name, t] : model_state(*model)) before.emplace_back("model." + name, t);

    auto opt = make_optimizer(*model, o);
    std::ostringstream sizes;
    for (const auto& g : opt->param_groups())
      sizes << (sizes.tellp() ? " " : "") << g.params().size();
    constexpr int kSteps = 2;
    for (int i = 0; i < kSteps; ++i) {
      opt->zero_grad();
      classification_loss(model->forward(inputs), targets, 0.0).backward();
      opt->step();
    }
    testing::save_tensors((dir_ / "before.pt").string(), before);
    testing::save_tensors((dir_ / "after.pt").string(), model_state(*model));

    nlohmann::json cfg{{"optimizer", to_string(o.type)},
                       {"lr", o.lr},
                       {"momentum", o.momentum},
                       {"nesterov", o.nesterov},
                       {"beta1", o.beta1},
                       {"beta2", o.beta2},
                       {"eps", o.eps},
                       {"steps", kSteps},
                       {"num_classes", 10},
                       {"weight_decay", o.weight_decay}};
    cfg["norm_weight_decay"] = o.norm_weight_decay ? nlohmann::json(*o.norm_weight_decay) : nullptr;
    cfg["bias_weight_decay"] = o.bias_weight_decay ? nlohmann::json(*o.bias_weight_decay) : nullptr;
    const auto r = testing::run_peer(
        "optimizer_step.py",
        {cfg.dump(), (dir_ / "before.pt").string(), (dir_ / "after.pt").string()});
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(testing::value_of(r.output, "groups"), sizes.str()) << "parameter groups";
    const std::string diff = testing::value_of(r.output, "max_difference");
    if (diff.empty()) return 1e9;
    // The steps moved the weights by far more than the tolerance.
    EXPECT_GE(std::stod(testing::value_of(r.output, "moved")), 1e-3);
    std::cout << "  max |dtrain - PyTorch| after " << kSteps << " " << to_string(o.type)
              << " steps: " << diff << " (at " << testing::value_of(r.output, "at") << ")\n";
    return std::stod(diff);
  }
};

TEST_F(OptimizerStep, SgdWithNesterovMomentumAndWeightDecayGroupsEqualsPyTorch) {
  if (!testing::python_has_torch()) GTEST_SKIP() << testing::reference_python_missing();
  if (!testing::peer_is_same_release()) {
    GTEST_SKIP() << "the peer is torch " << testing::peer_torch_version() << ", this LibTorch "
                 << testing::libtorch_version()
                 << ": their CPU kernels differ, so steps are compared between the same release";
  }
  OptimizerOptions o;
  o.type = OptimizerType::kSgd;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-4;
  o.norm_weight_decay = 0.0;
  o.bias_weight_decay = 0.0;
  EXPECT_LE(max_difference_from_pytorch(o), 1e-5);
}

TEST_F(OptimizerStep, AdamWWithWeightDecayEqualsPyTorch) {
  if (!testing::python_has_torch()) GTEST_SKIP() << testing::reference_python_missing();
  if (!testing::peer_is_same_release()) {
    GTEST_SKIP() << "the peer is torch " << testing::peer_torch_version() << ", this LibTorch "
                 << testing::libtorch_version()
                 << ": their CPU kernels differ, so steps are compared between the same release";
  }
  OptimizerOptions o;
  o.type = OptimizerType::kAdamW;
  o.lr = 1e-3;
  o.weight_decay = 0.05;
  o.norm_weight_decay = 0.0;
  EXPECT_LE(max_difference_from_pytorch(o), 1e-5);
}

TEST_F(OptimizerStep, AnAdamWCheckpointContinuesInTorchOptimAdamWAsInDtrain) {
  if (!testing::python_has_torch()) GTEST_SKIP() << testing::reference_python_missing();
  const OneThread one_thread;  // as adamw_continue.py
  torch::manual_seed(4);
  ModelOptions mo;
  mo.in_channels = 3;
  mo.image_size = 32;
  mo.num_classes = 10;
  auto model = make_model("resnet18", mo);
  OptimizerOptions o;
  o.type = OptimizerType::kAdamW;
  o.lr = 1e-3;
  o.weight_decay = 0.05;
  o.norm_weight_decay = 0.0;
  auto opt = make_optimizer(*model, o);
  const at::Tensor inputs = at::randn({4, 3, 32, 32});
  const at::Tensor targets = at::tensor({0, 2, 4, 6}, at::kLong);
  auto step = [&] {
    opt->zero_grad();
    classification_loss(model->forward(inputs), targets, 0.0).backward();
    opt->step();
  };
  step();
  Checkpoint c;
  c.model = model_state(*model);
  c.optimizer = optimizer_state(*opt);
  c.step = 1;
  const std::string path = save_checkpoint((dir_ / "ckpt").string(), c);
  step();  // the step PyTorch takes from the checkpoint
  testing::save_tensors((dir_ / "batch.pt").string(), {{"inputs", inputs}, {"targets", targets}});
  testing::save_tensors((dir_ / "after.pt").string(), model_state(*model));
  const nlohmann::json cfg{{"num_classes", 10},
                           {"lr", o.lr},
                           {"weight_decay", o.weight_decay},
                           {"norm_weight_decay", 0.0}};
  const auto r = testing::run_peer(
      "adamw_continue.py",
      {cfg.dump(), path, (dir_ / "batch.pt").string(), (dir_ / "after.pt").string()});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(testing::value_of(r.output, "steps"), "1");
  const std::string diff = testing::value_of(r.output, "max_difference");
  ASSERT_FALSE(diff.empty()) << r.output;
  std::cout << "  max |dtrain - PyTorch| one AdamW step after loading the checkpoint: " << diff
            << "\n";
  EXPECT_LE(std::stod(diff), 1e-5);
}

TEST(ParameterGroups, FollowTorchvisionsSetWeightDecay) {
  ModelOptions mo;
  mo.in_channels = 3;
  mo.image_size = 32;
  auto model = make_model("resnet18", mo);
  OptimizerOptions o;
  EXPECT_EQ(parameter_groups(*model, o).names, std::vector<std::string>{"other"});
  o.norm_weight_decay = 0.0;
  ParameterGroups g = parameter_groups(*model, o);
  ASSERT_EQ(g.names, (std::vector<std::string>{"other", "norm"}));
  EXPECT_EQ(g.params[0].size(), 22u);  // 20 convolutions, fc.weight, fc.bias
  EXPECT_EQ(g.params[1].size(), 40u);  // 20 BatchNorms x (weight, bias)
  o.bias_weight_decay = 0.0;
  g = parameter_groups(*model, o);
  ASSERT_EQ(g.names, (std::vector<std::string>{"other", "norm", "bias"}));
  EXPECT_EQ(g.params[0].size(), 21u);  // convolutions, fc.weight
  EXPECT_EQ(g.params[1].size(), 20u);  // BatchNorm weights
  EXPECT_EQ(g.params[2].size(), 21u);  // BatchNorm biases and fc.bias
}

TEST(Optimizers, AnUnknownNameIsRefusedWithTheList) {
  EXPECT_EQ(testing::error_of([] { parse_optimizer_type("lamb"); }),
            "unknown optimizer 'lamb'; valid optimizers: sgd, adamw");
}

// ---- Learning-rate schedules -----------------------------------------------------

TEST(LrSchedules, EqualTorchOptimLrSchedulerStepByStep) {
  if (!testing::python_has_torch()) GTEST_SKIP() << testing::reference_python_missing();
  auto make = [](const std::string& kind, int64_t warmup) {
    LrSchedule s;
    s.kind = parse_lr_schedule(kind);
    s.base_lr = 0.1;
    s.warmup_steps = warmup;
    s.warmup_start_factor = 0.01;
    s.gamma = 0.1;
    return s;
  };
  std::vector<std::pair<LrSchedule, int64_t>> cases;  // schedule, steps to compare
  LrSchedule s = make("step", 0);
  s.step_size = 3;
  cases.push_back({s, 14});
  s.warmup_steps = 4;
  cases.push_back({s, 18});
  s = make("multistep", 0);
  s.milestones = {2, 5, 9};
  s.gamma = 0.5;
  cases.push_back({s, 14});
  s.warmup_steps = 3;
  s.warmup_start_factor = 0.25;
  cases.push_back({s, 16});
  s = make("cosine", 0);
  s.total_steps = 20;
  s.min_lr = 1e-3;
  cases.push_back({s, 20});
  s.warmup_steps = 5;
  s.total_steps = 25;
  cases.push_back({s, 25});
  s = make("cosine", 0);
  s.total_steps = 1000;  // a long run: recursive rounding accumulates in PyTorch
  cases.push_back({s, 1000});
  s = make("constant", 6);
  cases.push_back({s, 10});

  nlohmann::json configs = nlohmann::json::array();
  for (const auto& [c, n] : cases) {
    configs.push_back({{"kind", to_string(c.kind)},
                       {"base_lr", c.base_lr},
                       {"step_size", c.step_size},
                       {"milestones", c.milestones},
                       {"gamma", c.gamma},
                       {"total_steps", c.total_steps},
                       {"min_lr", c.min_lr},
                       {"warmup_steps", c.warmup_steps},
                       {"warmup_start_factor", c.warmup_start_factor},
                       {"n", n}});
  }
  const auto r = testing::run_peer("lr_schedules.py", {configs.dump()});
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  size_t k = 0;
  double worst = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("lrs ", 0) != 0) continue;
    ASSERT_LT(k, cases.size());
    const auto expected = nlohmann::json::parse(line.substr(4)).get<std::vector<double>>();
    const auto& [sched, n] = cases[k];
    ASSERT_EQ(static_cast<int64_t>(expected.size()), n);
    validate(sched);
    for (int64_t step = 0; step < n; ++step) {
      const double got = lr_at(sched, step);
      const double rel = std::abs(got - expected[step]) / expected[step];
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-12) << to_string(sched.kind) << " (warm-up " << sched.warmup_steps
                            << ") step " << step << ": dtrain " << got << ", PyTorch "
                            << expected[step];
    }
    ++k;
  }
  EXPECT_EQ(k, cases.size()) << r.output;
  std::cout << "  largest relative lr difference: " << worst << "\n";
}

TEST(LrSchedules, EpochsBecomeStepsAndLinearScalingUsesTheGlobalBatch) {
  TrainOptions o;
  o.optimizer.lr = 0.1;
  o.batch_size = 32;
  o.accumulation_steps = 2;
  o.lr_scaling = LrScaling::kLinear;
  o.lr_schedule = LrScheduleKind::kMultiStep;
  o.lr_milestones = {2, 4};
  o.lr_warmup_epochs = 1;
  o.epochs = 5;
  const LrSchedule s = lr_schedule_for(o, 10, 4);  // 10 steps per epoch, 4 ranks
  EXPECT_DOUBLE_EQ(s.base_lr, 0.1 * 32 * 4 * 2 / 256);
  EXPECT_EQ(s.milestones, (std::vector<int64_t>{20, 40}));
  EXPECT_EQ(s.warmup_steps, 10);
  EXPECT_EQ(s.total_steps, 50);
}

TEST(LrSchedules, AnUnknownKindIsRefusedWithTheList) {
  EXPECT_EQ(testing::error_of([] { parse_lr_schedule("onecycle"); }),
            "unknown lr schedule 'onecycle'; valid schedules: constant, step, multistep, cosine");
  for (const std::string& name : lr_schedule_names()) {
    EXPECT_EQ(to_string(parse_lr_schedule(name)), name);
  }
  TrainOptions o;
  o.lr_schedule = LrScheduleKind::kCosine;
  o.epochs = 3;
  o.lr_warmup_epochs = 3;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "the cosine schedule needs more LrSchedule::total_steps (3) than "
            "LrSchedule::warmup_steps (3)");
}

// ---- Loss, clipping, top-5 --------------------------------------------------------

class LossAndClip : public ScratchDir {};

TEST_F(LossAndClip, LabelSmoothingAndClipGradNormEqualPyTorch) {
  if (!testing::python_has_torch()) GTEST_SKIP() << testing::reference_python_missing();
  torch::manual_seed(5);
  const at::Tensor logits = at::randn({6, 5}) * 3;
  const at::Tensor targets = at::tensor({0, 4, 2, 2, 1, 3}, at::kLong);
  std::vector<at::Tensor> grads{at::randn({3, 4}), at::randn({7}), at::randn({2, 2, 2})};
  std::vector<std::pair<std::string, at::Tensor>> tensors{{"logits", logits}, {"targets", targets}};
  for (size_t i = 0; i < grads.size(); ++i) tensors.emplace_back("g" + std::to_string(i), grads[i]);
  testing::save_tensors((dir_ / "t.pt").string(), tensors);

  const auto r =
      testing::run_peer("loss_and_clip.py", {(dir_ / "t.pt").string(), "0.0,0.1,0.3", "1.0,100.0"});
  ASSERT_EQ(r.code, 0) << r.output;
  double worst_loss = 0, worst_grad = 0;
  for (const char* smoothing : {"0.0", "0.1", "0.3"}) {
    const double loss = classification_loss(logits, targets, std::stod(smoothing)).item<double>();
    const double expected = std::stod(testing::value_of(r.output, cat("loss ", smoothing)));
    worst_loss = std::max(worst_loss, std::abs(loss - expected));
    EXPECT_NEAR(loss, expected, 1e-6) << "label_smoothing " << smoothing;
  }
  for (const char* max_norm : {"1.0", "100.0"}) {  // clips; leaves alone
    std::vector<at::Tensor> params;
    for (const at::Tensor& g : grads) {
      at::Tensor p = at::zeros_like(g).requires_grad_(true);
      p.mutable_grad() = g.clone();
      params.push_back(p);
    }
    const double norm = clip_grad_norm(params, std::stod(max_norm));
    EXPECT_NEAR(norm, std::stod(testing::value_of(r.output, cat("total_norm ", max_norm))), 1e-6);
    std::istringstream clipped(testing::value_of(r.output, cat("clipped ", max_norm)));
    for (const at::Tensor& p : params) {
      const at::Tensor flat = p.grad().flatten();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        double v = 0;
        ASSERT_TRUE(clipped >> v) << r.output;
        worst_grad = std::max(worst_grad, std::abs(v - flat[i].item<double>()));
      }
    }
  }
  EXPECT_LE(worst_grad, 1e-6);
  std::cout << "  max |dtrain - PyTorch|: loss " << worst_loss << ", clipped gradients "
            << worst_grad << "\n";
}

TEST(ClassificationCounts, CountTop1AndTop5OnAKnownBatch) {
  // Rows: the target is the largest logit; the 3rd largest; the smallest.
  const at::Tensor logits = at::tensor({0.1f, 0.9f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f,  //
                                        0.7f, 0.1f, 0.2f, 0.3f, 0.6f, 0.5f, 0.9f,  //
                                        0.5f, 0.4f, 0.3f, 0.6f, 0.7f, 0.8f, 0.0f})
                                .view({3, 7});
  const at::Tensor targets = at::tensor({1, 4, 6}, at::kLong);
  const ClassificationCounts c = classification_counts(logits, targets);
  EXPECT_EQ(c.samples, 3);
  EXPECT_EQ(c.top1, 1);
  EXPECT_EQ(c.top5, 2);
  // Fewer than 5 classes: top-5 is top-3, every sample.
  const ClassificationCounts three =
      classification_counts(logits.narrow(1, 0, 3), at::tensor({2, 0, 1}, at::kLong));
  EXPECT_EQ(three.top1, 1);
  EXPECT_EQ(three.top5, 3);
}

}  // namespace
}  // namespace dtrain
