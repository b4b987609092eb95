// PowerSGD (dtrain/powersgd.h) against PyTorch's own powerSGD_hook, through
// DDP's staged schedule, and its state for checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/powersgd.h"
#include "support/peer_torch.h"
#include "support/ranks.h"
#include "support/shell.h"

namespace dtrain {
namespace {

using testing::run_ranks;
using testing::run_shell;
using Shapes = std::vector<std::vector<int64_t>>;

// Mirrors powersgd_reference.py's WORLD, STEPS, BUCKETS and CONFIGS.
constexpr int kWorld = 2;
constexpr int kSteps = 6;
const std::vector<Shapes> kBuckets = {
    {{10, 32}, {10}},
    {{12}, {5}},  // nothing to compress: PyTorch still draws a seed for it
    {{16, 8, 3, 3}, {16, 8, 3, 3}, {32, 144}, {32}, {3, 2}, {24, 20}},
    {{24, 20}, {40, 30}, {7}},
};

std::map<std::string, PowerSGDOptions> configs() {
  std::map<std::string, PowerSGDOptions> c;
  c["defaults_rank1"] =
      PowerSGDOptions().set_matrix_approximation_rank(1).set_start_powersgd_iter(2);
  c["rank2_batched"] = PowerSGDOptions()
                           .set_matrix_approximation_rank(2)
                           .set_start_powersgd_iter(3)
                           .set_batch_tensors_with_same_shape(true)
                           .set_random_seed(7);
  c["rank4_qr_no_warm_start"] = PowerSGDOptions()
                                    .set_matrix_approximation_rank(4)
                                    .set_start_powersgd_iter(2)
                                    .set_warm_start(false)
                                    .set_min_compression_rate(1.5)
                                    .set_random_seed(123);
  c["rank2_epsilon_no_error_feedback"] = PowerSGDOptions()
                                             .set_matrix_approximation_rank(2)
                                             .set_start_powersgd_iter(1)
                                             .set_use_error_feedback(false)
                                             .set_warm_start(false)
                                             .set_orthogonalization_epsilon(1e-3);
  return c;
}

int64_t numel(const Shapes& shapes) {
  int64_t n = 0;
  for (const auto& s : shapes) {
    int64_t k = 1;
    for (int64_t d : s) k *= d;
    n += k;
  }
  return n;
}

// A bucket as the reducer builds it: a flat buffer and shaped views.
struct TestBucket {
  GradBucket b;
  TestBucket(int index, int count, const Shapes& shapes) {
    b.index = index;
    b.bucket_count = count;
    b.buffer = torch::zeros({numel(shapes)});
    int64_t at = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      int64_t k = 1;
      for (int64_t d : shapes[i]) k *= d;
      b.gradients.push_back(b.buffer.narrow(0, at, k).view(shapes[i]));
      b.parameter_names.push_back(cat_name(index, i));
      at += k;
    }
  }
  static std::string cat_name(int bucket, size_t i) {
    return "b" + std::to_string(bucket) + ".p" + std::to_string(i);
  }
};

// One step over every bucket, in the reducer's order: start in bucket order,
// each later stage after the next bucket's start, the rest at the end.
void reduce_step(const ProcessGroup& pg, CommHook& hook, std::vector<TestBucket>& buckets) {
  std::vector<std::unique_ptr<PendingReduction>> works;
  for (auto& tb : buckets) {
    works.push_back(hook.start(pg, tb.b));
    if (works.size() >= 2 && works[works.size() - 2]->has_next_stage()) {
      works[works.size() - 2]->launch_next_stage();
    }
  }
  for (auto& w : works) {
    while (w->has_next_stage()) w->launch_next_stage();
  }
  for (auto& w : works) w->wait();
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Runs the reference under `python`, then the same steps through dtrain's
// hook, and compares every output.
void expect_equal_to_pytorch(const std::string& python) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dtrain-powersgd-" + std::to_string(::getpid()) + "-" +
                    std::to_string(std::hash<std::string>()(python) % 100000));
  std::filesystem::remove_all(dir);
  const auto run =
      run_shell("timeout -k 5 240 " + python +
                " " DTRAIN_SOURCE_DIR "/tests/ddp/powersgd_reference.py " + dir.string() + " 2>&1");
  ASSERT_EQ(run.code, 0) << run.output;
  for (const auto& [name, options] : configs()) {
    SCOPED_TRACE(name);
    run_ranks(kWorld, [&, name = name, options = options](const ProcessGroup& pg) {
      const auto data =
          read_floats((dir / (name + ".rank" + std::to_string(pg.rank()) + ".bin")).string());
      int64_t per_step = 0;
      for (const auto& s : kBuckets) per_step += 2 * numel(s);
      ASSERT_EQ(static_cast<int64_t>(data.size()), per_step * kSteps);
      auto hook = powersgd_hook(options);
      std::vector<TestBucket> buckets;
      for (size_t b = 0; b < kBuckets.size(); ++b) {
        buckets.emplace_back(static_cast<int>(b), static_cast<int>(kBuckets.size()), kBuckets[b]);
      }
      size_t at = 0;
      for (int step = 0; step < kSteps; ++step) {
        std::vector<torch::Tensor> expected;
        for (auto& tb : buckets) {
          const int64_t n = tb.b.buffer.numel();
          // PyTorch's hook gets the sum, dtrain's the sum / world size.
          tb.b.buffer.copy_(torch::from_blob(const_cast<float*>(&data[at]), {n}).div(kWorld));
          expected.push_back(torch::from_blob(const_cast<float*>(&data[at + n]), {n}).clone());
          at += 2 * n;
        }
        reduce_step(pg, *hook, buckets);
        for (size_t b = 0; b < buckets.size(); ++b) {
          const auto& got = buckets[b].b.buffer;
          const double err = (got - expected[b]).abs().max().item<double>();
          const double scale = expected[b].abs().max().item<double>();
          EXPECT_LE(err, 1e-4 * std::max(1.0, scale))
              << "rank " << pg.rank() << " step " << step << " bucket " << b;
        }
      }
      EXPECT_EQ(hook->stats().iterations, kSteps);
    });
  }
  std::filesystem::remove_all(dir);
}

bool imports_torch(const std::string& python) {
  return run_shell("timeout -k 5 120 " + python + " -c 'import torch, numpy' >/dev/null 2>&1")
             .code == 0;
}

TEST(PowerSGD, EqualsDebiansPyTorch113HookStepAfterStep) {
  const std::string python = "/usr/bin/python3";
  if (!imports_torch(python)) GTEST_SKIP() << python << " cannot import torch (python3-torch)";
  expect_equal_to_pytorch(python);
}

TEST(PowerSGD, EqualsPyTorch211HookStepAfterStep) {
  // scripts/peer-torch.sh's venv, run as that script prints it (with the
  // LD_LIBRARY_PATH its CUDA wheel needs on a machine without a GPU).
  const char* env = std::getenv("DTRAIN_PEER_PYTHON_2");
  const std::string python = env && *env ? std::string(env) : testing::python_torch_2x();
  if (python.empty() || !imports_torch(python)) {
    GTEST_SKIP() << testing::kNoPeer2x
                 << " (or set DTRAIN_PEER_PYTHON_2 to a python with torch 2.x and numpy)";
  }
  expect_equal_to_pytorch(python);
}

// Weights from a formula (the rank threads must not race on LibTorch's
// process-wide generator). Tanh, not ReLU: a dead layer's all-zero bias
// gradient has no direction to orthogonalize (NaN, as in PyTorch).
torch::nn::Sequential make_powersgd_net() {
  torch::nn::Sequential net(torch::nn::Linear(12, 16), torch::nn::Tanh(), torch::nn::Linear(16, 8),
                            torch::nn::Tanh(), torch::nn::Linear(8, 3));
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& p : net->parameters()) {
    p.copy_(torch::arange(offset, offset + p.numel(), torch::kFloat)
                .mul(0.37)
                .sin()
                .reshape(p.sizes()));
    offset += p.numel();
  }
  return net;
}

// Gradients after `steps` DDP iterations of SGD on rank-dependent data.
std::vector<torch::Tensor> train(const ProcessGroup& pg, std::shared_ptr<CommHook> hook,
                                 int steps) {
  auto net = make_powersgd_net();
  DistributedDataParallel<torch::nn::SequentialImpl> ddp(net.ptr(), pg,
                                                         DdpOptions()
                                                             .set_comm_hook(std::move(hook))
                                                             .set_first_bucket_cap_mb(1e-9)
                                                             .set_bucket_cap_mb(1e-9));
  torch::optim::SGD opt(net->parameters(), 0.05);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    torch::Tensor x = torch::arange(48, torch::kFloat)
                          .reshape({4, 12})
                          .mul(0.05 * (pg.rank() + 1) + 0.01 * s)
                          .cos();
    ddp.forward(x).pow(2).sum().backward();
    opt.step();
  }
  std::vector<torch::Tensor> grads;
  for (const auto& p : net->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(PowerSGD, AtFullRankThroughDdpsStagedScheduleGivesTheAllreduceGradients) {
  // rank = min(rows, cols) reconstructs every matrix exactly, so the
  // gradients must equal plain allreduce's; one parameter per bucket puts
  // P and Q stages of many buckets on the wavefront schedule.
  run_ranks(2, [](const ProcessGroup& pg) {
    auto hook = powersgd_hook(PowerSGDOptions()
                                  .set_matrix_approximation_rank(16)
                                  .set_min_compression_rate(0)
                                  .set_start_powersgd_iter(2)
                                  .set_use_error_feedback(false));
    const auto ours = train(pg, hook, 4);
    const auto reference = train(pg, allreduce_hook(), 4);
    ASSERT_EQ(ours.size(), reference.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], reference[i], 1e-3, 1e-5))
          << "parameter " << i << ": " << (ours[i] - reference[i]).abs().max().item<double>();
    }
    EXPECT_EQ(hook->stats().iterations, 4);
    EXPECT_GT(hook->stats().numel_after_compression, 0);
  });
}

TEST(PowerSGD, StateLoadedIntoAFreshHookContinuesExactlyAsTheUninterruptedHook) {
  run_ranks(2, [](const ProcessGroup& pg) {
    const auto options =
        PowerSGDOptions().set_start_powersgd_iter(2).set_matrix_approximation_rank(2);
    auto make_buckets = [] {
      std::vector<TestBucket> buckets;
      for (size_t b = 0; b < kBuckets.size(); ++b) {
        buckets.emplace_back(static_cast<int>(b), static_cast<int>(kBuckets.size()), kBuckets[b]);
      }
      return buckets;
    };
    auto fill = [&pg](std::vector<TestBucket>& buckets, int step) {
      for (auto& tb : buckets) {
        tb.b.buffer.copy_(torch::arange(tb.b.buffer.numel(), torch::kFloat)
                              .mul(0.13 * (pg.rank() + 1) + 0.07 * step + tb.b.index)
                              .sin());
      }
    };
    auto whole = powersgd_hook(options);
    auto first = powersgd_hook(options);
    auto buckets = make_buckets();
    for (int step = 0; step < 4; ++step) {
      fill(buckets, step);
      reduce_step(pg, *whole, buckets);
      fill(buckets, step);
      reduce_step(pg, *first, buckets);
    }
    auto resumed = powersgd_hook(options);
    resumed->load_state(first->state());
    for (int step = 4; step < 8; ++step) {
      fill(buckets, step);
      reduce_step(pg, *whole, buckets);
      std::vector<torch::Tensor> expected;
      for (auto& tb : buckets) expected.push_back(tb.b.buffer.clone());
      fill(buckets, step);
      reduce_step(pg, *resumed, buckets);
      for (size_t b = 0; b < buckets.size(); ++b) {
        EXPECT_TRUE(torch::equal(buckets[b].b.buffer, expected[b]))
            << "rank " << pg.rank() << " step " << step << " bucket " << b;
      }
    }
    EXPECT_EQ(resumed->stats().iterations, 8);
  });
}

TEST(PowerSGD, InvalidOptionsAreRefusedNamingTheOption) {
  try {
    powersgd_hook(PowerSGDOptions().set_matrix_approximation_rank(0));
    FAIL() << "rank 0 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("matrix_approximation_rank must be at least 1"),
              std::string::npos)
        << e.what();
  }
  try {
    powersgd_hook(PowerSGDOptions().set_start_powersgd_iter(1));
    FAIL() << "start_powersgd_iter 1 with error feedback accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("start_powersgd_iter must be > 1"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(powersgd_hook(
      PowerSGDOptions().set_start_powersgd_iter(1).set_use_error_feedback(false).set_warm_start(
          false)));
  EXPECT_EQ(comm_hook_by_name("powersgd")->name(), "powersgd");
}

TEST(PowerSGD, MaxRankIsTheLargestMinimumOfRowsAndColumnsOverMatrices) {
  EXPECT_EQ(powersgd_max_rank({{10}, {32, 1, 3, 3}, {64, 9216}, {10, 64}}), 64);
  EXPECT_EQ(powersgd_max_rank({{10}, {5}}), 0);
  EXPECT_EQ(powersgd_max_rank({{3, 100}}), 3);
}

}  // namespace
}  // namespace dtrain
