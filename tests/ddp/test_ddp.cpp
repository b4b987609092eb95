// DDP's contract: gradients and parameters equal those of one process trained
// on the concatenated batches; errors name what diverged.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "ddp/bucketing.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::error_of;
using testing::run_ranks;

constexpr int64_t kPerRank = 4;  // samples per rank per step

struct NetImpl : torch::nn::Module {
  // `branches` adds `extra` (used when forward is asked to) and `never`
  // (never used), for the unused-parameter tests.
  explicit NetImpl(int64_t hidden = 16, bool batch_norm = false, bool branches = false)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(4 * 6 * 6, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 3))) {
    if (batch_norm) bn = register_module("bn", torch::nn::BatchNorm2d(4));
    if (branches) {
      extra = register_module("extra", torch::nn::Linear(3, 3));
      never = register_module("never", torch::nn::Linear(3, 3));
    }
  }
  torch::Tensor forward(torch::Tensor x, bool use_extra = false) {
    x = conv->forward(x);
    if (!bn.is_empty()) x = bn->forward(x);
    x = torch::relu(fc1->forward(torch::relu(x).flatten(1)));
    x = fc2->forward(x);
    return use_extra ? extra->forward(x) : x;
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc1, fc2;
  torch::nn::Linear extra{nullptr}, never{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(Net);

// The reference and every rank's replica start from this seed; replicas other
// than rank 0's are perturbed so that only DDP's broadcast can make them equal.
Net make_net(int rank, bool batch_norm = false, bool branches = false) {
  torch::manual_seed(7);
  Net net(16, batch_norm, branches);
  if (rank != 0) {
    torch::NoGradGuard g;
    for (auto& p : net->parameters()) p.add_(0.1 * (rank + 1));
  }
  return net;
}

torch::Tensor inputs(int64_t step, int64_t n) {
  return torch::randn({n, 1, 8, 8}, torch::TensorOptions().dtype(torch::kFloat))
      .mul(0.5)
      .add(step * 0.01);
}

struct Data {
  std::vector<torch::Tensor> x, y;  // per step, all ranks concatenated
};

Data make_data(int world, int steps, int64_t per_rank = kPerRank) {
  torch::manual_seed(123);
  Data d;
  for (int s = 0; s < steps; ++s) {
    d.x.push_back(inputs(s, world * per_rank));
    d.y.push_back(torch::randn({world * per_rank, 3}));
  }
  return d;
}

torch::Tensor shard(const torch::Tensor& t, int rank, int64_t per_rank = kPerRank) {
  return t.narrow(0, rank * per_rank, per_rank);
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                  double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() || !b[i].defined()) {
      EXPECT_EQ(a[i].defined(), b[i].defined()) << what << " #" << i;
      continue;
    }
    double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << " #" << i;
  }
}

std::vector<torch::Tensor> grads(Net& net) {
  std::vector<torch::Tensor> g;
  for (auto& p : net->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
  return g;
}

std::vector<torch::Tensor> params(Net& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

class DdpWorldSize : public ::testing::TestWithParam<int> {};

// One backward pass through DDP on every rank, and the reference: one
// process on the concatenated batch.
struct GradRun {
  std::vector<torch::Tensor> expected;
  std::vector<std::vector<torch::Tensor>> got;  // per rank
  std::vector<DdpStats> stats;                  // per rank
};

GradRun one_backward(int world, const DdpOptions& options) {
  Data d = make_data(world, 1);
  Net ref = make_net(0);
  torch::mse_loss(ref->forward(d.x[0]), d.y[0]).backward();
  GradRun run{grads(ref), std::vector<std::vector<torch::Tensor>>(world),
              std::vector<DdpStats>(world)};
  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r));
  run_ranks(world, [&](const ProcessGroup& pg) {
    Net& net = nets[pg.rank()];
    DistributedDataParallel ddp(net.ptr(), pg, options);
    torch::mse_loss(ddp.forward(shard(d.x[0], pg.rank())), shard(d.y[0], pg.rank())).backward();
    run.got[pg.rank()] = grads(net);
    run.stats[pg.rank()] = ddp.stats();
  });
  return run;
}

TEST_P(DdpWorldSize, AveragedGradientsEqualOneProcessOnTheConcatenatedBatch) {
  GradRun run = one_backward(GetParam(), DdpOptions{});
  for (size_t r = 0; r < run.got.size(); ++r) {
    expect_close(run.got[r], run.expected, 1e-5, "grad rank " + std::to_string(r));
  }
}

TEST_P(DdpWorldSize, SgdWithMomentumStepsMatchOneProcess) {
  const int world = GetParam();
  const int steps = 4;
  Data d = make_data(world, steps);
  Net ref = make_net(0);
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    ref_opt.zero_grad();
    torch::mse_loss(ref->forward(d.x[s]), d.y[s]).backward();
    ref_opt.step();
  }
  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r));
  for (bool as_view : {false, true}) {
    std::vector<Net> replicas;
    for (int r = 0; r < world; ++r) replicas.push_back(make_net(r));
    run_ranks(world, [&](const ProcessGroup& pg) {
      Net& net = replicas[pg.rank()];
      DdpOptions o;
      o.gradient_as_bucket_view = as_view;
      o.bucket_cap_mb = 0.001;  // several buckets
      o.first_bucket_cap_mb = 0.0005;
      DistributedDataParallel ddp(net.ptr(), pg, o);
      torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      for (int s = 0; s < steps; ++s) {
        opt.zero_grad();
        torch::mse_loss(ddp.forward(shard(d.x[s], pg.rank())), shard(d.y[s], pg.rank())).backward();
        opt.step();
      }
      EXPECT_GT(ddp.bucket_parameter_names().size(), 1u);
    });
    for (int r = 0; r < world; ++r) {
      expect_close(params(replicas[r]), params(ref), 1e-5,
                   (as_view ? "bucket-view params rank " : "params rank ") + std::to_string(r));
    }
  }
}

TEST_P(DdpWorldSize, NoSyncAccumulationMatchesOneProcessOnAllMicroBatches) {
  const int world = GetParam();
  const int micro = 3;
  Data d = make_data(world, micro);
  Net ref = make_net(0);
  torch::mse_loss(ref->forward(torch::cat(d.x)), torch::cat(d.y)).backward();
  auto expected = grads(ref);

  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r));
  std::vector<std::vector<torch::Tensor>> got(world);
  run_ranks(world, [&](const ProcessGroup& pg) {
    Net& net = nets[pg.rank()];
    DistributedDataParallel ddp(net.ptr(), pg);
    // As with PyTorch's no_sync(), it is the forward that runs in the scope.
    for (int m = 0; m < micro; ++m) {
      auto step = [&] {
        torch::mse_loss(ddp.forward(shard(d.x[m], pg.rank())), shard(d.y[m], pg.rank()))
            .div(micro)
            .backward();
      };
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        step();
      } else {
        step();
      }
    }
    got[pg.rank()] = grads(net);
  });
  for (int r = 0; r < world; ++r)
    expect_close(got[r], expected, 1e-5, "grad rank " + std::to_string(r));
}

TEST_P(DdpWorldSize, ParametersUnusedOnSomeRanksGetTheAverageAndUnusedEverywhereStayUntouched) {
  const int world = GetParam();
  Data d = make_data(world, 1);
  // Rank r uses the `extra` layer when r is even; `never` is never used.
  Net ref = make_net(0, false, true);
  torch::Tensor loss = torch::zeros({});
  for (int r = 0; r < world; ++r) {
    loss = loss + torch::mse_loss(ref->forward(shard(d.x[0], r), r % 2 == 0), shard(d.y[0], r));
  }
  (loss / world).backward();
  auto expected = grads(ref);

  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r, false, true));
  std::vector<std::vector<torch::Tensor>> got(world);
  run_ranks(world, [&](const ProcessGroup& pg) {
    Net& net = nets[pg.rank()];
    DdpOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(net.ptr(), pg, o);
    const int r = pg.rank();
    torch::mse_loss(ddp.forward(shard(d.x[0], r), r % 2 == 0), shard(d.y[0], r)).backward();
    got[r] = grads(net);
  });
  for (int r = 0; r < world; ++r) {
    expect_close(got[r], expected, 1e-5, "grad rank " + std::to_string(r));
    EXPECT_FALSE(nets[r]->never->weight.grad().defined()) << "rank " << r;
  }
}

TEST_P(DdpWorldSize, Fp16HookGradientsAgreeWithinHalfPrecision) {
  DdpOptions o;
  o.comm_hook = fp16_compress_hook();
  GradRun run = one_backward(GetParam(), o);
  // fp16 keeps 11 significant bits: relative error below 2^-10 per element,
  // plus the rounding of the world-size sum.
  for (size_t r = 0; r < run.got.size(); ++r) {
    expect_close(run.got[r], run.expected, 2e-3, "fp16 grad rank " + std::to_string(r));
    EXPECT_EQ(run.stats[r].comm_hook, "fp16");
  }
}

TEST_P(DdpWorldSize, Bf16HookGradientsAgreeWithinBfloat16Precision) {
  DdpOptions o;
  o.comm_hook = bf16_compress_hook();
  GradRun run = one_backward(GetParam(), o);
  // bfloat16 keeps 8 significant bits: relative error below 2^-8 per element.
  for (size_t r = 0; r < run.got.size(); ++r) {
    for (size_t i = 0; i < run.expected.size(); ++i) {
      double scale = run.expected[i].abs().max().item<double>();
      EXPECT_LE((run.got[r][i] - run.expected[i]).abs().max().item<double>(), 2e-2 * scale + 1e-6)
          << "bf16 grad rank " << r << " #" << i;
    }
    EXPECT_EQ(run.stats[r].comm_hook, "bf16");
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DdpWorldSize, ::testing::Values(1, 2, 3, 4));

TEST(Ddp, NoopHookLeavesEachRankItsOwnGradientDividedByTheWorldSize) {
  const int world = 2;
  Data d = make_data(world, 1);
  // The reference: one process's backward of each rank's own batch (the
  // replicas start equal: DDP broadcasts rank 0's parameters).
  std::vector<std::vector<torch::Tensor>> expected;
  for (int r = 0; r < world; ++r) {
    Net ref = make_net(0);
    torch::mse_loss(ref->forward(shard(d.x[0], r)), shard(d.y[0], r)).backward();
    expected.push_back(grads(ref));
  }
  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r));
  std::vector<std::vector<torch::Tensor>> got(world);
  std::vector<DdpStats> stats(world);
  run_ranks(world, [&](const ProcessGroup& pg) {
    Net& net = nets[pg.rank()];
    DdpOptions o;
    o.comm_hook = comm_hook_by_name("noop");
    o.bucket_cap_mb = 0.001;  // several buckets
    o.first_bucket_cap_mb = 0.0005;
    DistributedDataParallel ddp(net.ptr(), pg, o);
    torch::mse_loss(ddp.forward(shard(d.x[0], pg.rank())), shard(d.y[0], pg.rank())).backward();
    got[pg.rank()] = grads(net);
    stats[pg.rank()] = ddp.stats();
  });
  for (int r = 0; r < world; ++r) {
    std::vector<torch::Tensor> local;
    for (const auto& g : expected[r]) local.push_back(g / world);
    expect_close(got[r], local, 1e-6, "noop grad rank " + std::to_string(r));
    EXPECT_EQ(stats[r].comm_hook, "noop");
    EXPECT_GT(stats[r].bucket_bytes.size(), 1u);
  }
  // The ranks' batches differ, so their gradients must too (nothing was summed).
  EXPECT_GT((got[0][0] - got[1][0]).abs().max().item<double>(), 1e-4);
}

TEST(Ddp, BuffersAreBroadcastFromRankZeroBeforeEachForward) {
  const int world = 2;
  Data d = make_data(world, 2);
  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r, /*batch_norm=*/true));
  run_ranks(world, [&](const ProcessGroup& pg) {
    Net& net = nets[pg.rank()];
    DistributedDataParallel ddp(net.ptr(), pg);
    torch::optim::SGD opt(net->parameters(), 0.1);
    for (int s = 0; s < 2; ++s) {
      opt.zero_grad();
      torch::mse_loss(ddp.forward(shard(d.x[s], pg.rank())), shard(d.y[s], pg.rank())).backward();
      opt.step();
    }
    // Each rank's running mean moved with its own data...
    auto before = pg.all_gather(net->bn->running_mean);
    EXPECT_FALSE(before[0].equal(before[1]));
    // ...and the next forward starts from rank 0's.
    ddp.prepare_forward();
    auto after = pg.all_gather(net->bn->running_mean);
    EXPECT_TRUE(after[0].equal(after[1]));
    EXPECT_TRUE(after[1].equal(before[0]));
    ddp.finish_forward();
  });
}

// DdpOptions::init_sync (PyTorch's init_sync): on, the ranks start from rank
// 0's parameters; off (live recovery's later generations, whose members hold
// the same values already), each rank keeps its own and nothing is sent.
TEST(Ddp, InitSyncBroadcastsRankZerosParametersAndOffLeavesEachRanksOwn) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync);
    std::vector<Net> nets{make_net(0), make_net(1)};
    const torch::Tensor own1 = nets[1]->parameters()[0].detach().clone();
    ASSERT_FALSE(own1.equal(nets[0]->parameters()[0]));
    std::vector<torch::Tensor> first(2);
    run_ranks(2, [&](const ProcessGroup& pg) {
      DistributedDataParallel ddp(nets[pg.rank()].ptr(), pg, DdpOptions().set_init_sync(sync));
      first[pg.rank()] = nets[pg.rank()]->parameters()[0].detach().clone();
    });
    EXPECT_EQ(first[0].equal(first[1]), sync);
    EXPECT_EQ(first[1].equal(own1), !sync);
  }
}

// Statistics are per synchronised iteration: a step under no_sync() is not
// one, the times are averages (not sums) that add up, and the buckets are the
// ones the model's parameters fill (one, under the 1 MiB first-bucket cap).
TEST(Ddp, StatisticsArePopulatedAfterSynchronisedSteps) {
  using Clock = std::chrono::steady_clock;
  std::vector<Net> nets{make_net(0), make_net(1)};
  Data d = make_data(2, 4);
  std::vector<DdpStats> stats(2);
  std::vector<double> wall(2);
  run_ranks(2, [&](const ProcessGroup& pg) {
    DistributedDataParallel ddp(nets[pg.rank()].ptr(), pg);
    const auto start = Clock::now();
    for (int s = 0; s < 4; ++s) {
      auto step = [&] {
        torch::mse_loss(ddp.forward(shard(d.x[s], pg.rank())), shard(d.y[s], pg.rank())).backward();
      };
      if (s == 1) {
        auto guard = ddp.no_sync();
        step();
      } else {
        step();
      }
    }
    wall[pg.rank()] = std::chrono::duration<double>(Clock::now() - start).count();
    stats[pg.rank()] = ddp.stats();
  });
  int64_t bytes = 0, tensors = 0;
  for (auto& p : nets[0]->parameters()) {
    bytes += p.numel() * 4;
    ++tensors;
  }
  ASSERT_EQ(tensors, 6);  // conv, fc1, fc2: weight and bias each
  for (int r = 0; r < 2; ++r) {
    const DdpStats& s = stats[r];
    EXPECT_EQ(s.iterations, 3) << "the no_sync() step is not a synchronised iteration";
    EXPECT_EQ(s.bucket_bytes, (std::vector<int64_t>{bytes}));
    EXPECT_EQ(s.bucket_parameters, (std::vector<int64_t>{6}));
    EXPECT_EQ(s.comm_hook, "allreduce");
    EXPECT_GT(s.forward_seconds, 0);
    EXPECT_GT(s.backward_compute_seconds, 0);
    EXPECT_GT(s.comm_seconds, 0);
    EXPECT_GE(s.overlapped_comm_seconds, 0);
    EXPECT_GE(s.exposed_comm_seconds, 0);
    // The communication time is split into its hidden and exposed parts.
    EXPECT_NEAR(s.overlapped_comm_seconds + s.exposed_comm_seconds, s.comm_seconds,
                1e-9 * std::max(1.0, s.comm_seconds));
    EXPECT_NEAR(s.overlap_fraction(), s.overlapped_comm_seconds / s.comm_seconds, 1e-12);
    // Averages over 3 iterations: forward and backward of one iteration fit
    // in a third of the 4 steps' wall time (sums would not).
    EXPECT_LE(s.forward_seconds + s.backward_compute_seconds, wall[r] / 3) << "rank " << r;
  }
}

TEST(Ddp, DifferentParameterShapesAcrossRanksNameTheFirstMismatch) {
  std::vector<std::shared_ptr<NetImpl>> nets{std::make_shared<NetImpl>(16),
                                             std::make_shared<NetImpl>(32)};
  std::vector<std::string> errors(2);
  run_ranks(2, [&](const ProcessGroup& pg) {
    errors[pg.rank()] = error_of([&] { DistributedDataParallel ddp(nets[pg.rank()], pg); });
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("ranks 0 and 1 have different parameters"), std::string::npos) << e;
    EXPECT_NE(e.find("fc1.weight [16, 144]"), std::string::npos) << e;
    EXPECT_NE(e.find("fc1.weight [32, 144]"), std::string::npos) << e;
  }
}

TEST(Ddp, ParameterWithoutGradientIsAnErrorNamingItUnlessFindUnusedIsOn) {
  Net net = make_net(0, false, true);
  ProcessGroup single;
  DistributedDataParallel ddp(net.ptr(), single);
  std::string e = error_of([&] {
    torch::mse_loss(ddp.forward(inputs(0, 2)), torch::zeros({2, 3})).backward();
  });
  EXPECT_NE(e.find("got no gradient: extra.weight, extra.bias, never.weight, never.bias"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("find_unused_parameters"), std::string::npos) << e;
}

TEST(Ddp, RankThatSkipsBackwardMakesTheOthersFailWithinTheTimeoutNamingTheBucket) {
  std::vector<Net> nets{make_net(0), make_net(1)};
  Data d = make_data(2, 1);
  std::string error;
  double waited = 0;
  run_ranks(
      2,
      [&](const ProcessGroup& pg) {
        DdpOptions o;
        o.find_unused_parameters = true;
        DistributedDataParallel ddp(nets[pg.rank()].ptr(), pg, o);
        auto out = ddp.forward(shard(d.x[0], pg.rank()));
        if (pg.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(4));  // never runs backward
          return;
        }
        auto start = std::chrono::steady_clock::now();
        error = error_of([&] { torch::mse_loss(out, shard(d.y[0], 0)).backward(); });
        waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
      std::chrono::seconds(2));
  EXPECT_NE(error.find("rank 0"), std::string::npos) << error;
  EXPECT_NE(error.find("gradient bucket 0"), std::string::npos) << error;
  EXPECT_NE(error.find("fc2.bias"), std::string::npos) << error;
  EXPECT_LT(waited, 10.0);
}

struct ThrowingImpl : torch::nn::Module {
  ThrowingImpl()
      : a(register_module("a", torch::nn::Linear(3, 3))),
        b(register_module("b", torch::nn::Linear(3, 3))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = a->forward(x);
    // Backward reaches this hook after b's gradients were reduced-ready.
    x.register_hook([](torch::Tensor g) -> torch::Tensor { throw std::runtime_error("boom"); });
    return b->forward(x);
  }
  torch::nn::Linear a, b;
};

TEST(Ddp, ForwardAfterAnUnfinishedReductionIsAnErrorNamingTheMissingParameters) {
  auto net = std::make_shared<ThrowingImpl>();
  ProcessGroup single;
  DistributedDataParallel ddp(net, single);
  std::string first = error_of([&] { ddp.forward(torch::ones({2, 3})).sum().backward(); });
  EXPECT_NE(first.find("boom"), std::string::npos) << first;
  std::string second = error_of([&] { ddp.forward(torch::ones({2, 3})); });
  EXPECT_NE(second.find("previous iteration did not finish"), std::string::npos) << second;
  EXPECT_NE(second.find("a.weight, a.bias"), std::string::npos) << second;
}

// GPU paths: skipped cleanly where LibTorch has no usable GPU (always in CI).
void expect_cuda_matches_cpu_reference(int world, const std::string& backend) {
  Data d = make_data(world, 1);
  Net ref = make_net(0);
  torch::mse_loss(ref->forward(d.x[0]), d.y[0]).backward();
  auto expected = grads(ref);
  std::vector<Net> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make_net(r));
  std::vector<std::vector<torch::Tensor>> got(world);
  run_ranks(
      world,
      [&](const ProcessGroup& pg) {
        torch::Device dev(torch::kCUDA, static_cast<c10::DeviceIndex>(pg.rank()));
        Net& net = nets[pg.rank()];
        net->to(dev);
        DistributedDataParallel ddp(net.ptr(), pg);
        torch::mse_loss(ddp.forward(shard(d.x[0], pg.rank()).to(dev)),
                        shard(d.y[0], pg.rank()).to(dev))
            .backward();
        for (auto& g : grads(net)) got[pg.rank()].push_back(g.cpu());
      },
      std::chrono::seconds(60), backend);
  for (int r = 0; r < world; ++r) {
    expect_close(got[r], expected, 1e-4, backend + " cuda grad rank " + std::to_string(r));
  }
}

// A GPU per thread rank, up to two (Note [Thread ranks on one GPU]).
TEST(DdpCuda, GlooOnCudaTensorsMatchesTheCpuReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  expect_cuda_matches_cpu_reference(testing::thread_ranks_on_gpus(2), "gloo");
}

TEST(DdpCuda, NcclOnOneGpuMatchesTheCpuReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  expect_cuda_matches_cpu_reference(1, "nccl");
}

TEST(BucketAssignment, FirstBucketIsSmallThenCapAndKeysNeverMix) {
  using ddp::TensorInfo;
  // Sizes in bytes, in launch (reverse registration) order.
  std::vector<TensorInfo> t = {{400, "f"}, {700, "f"}, {300, "h"}, {2000, "f"},
                               {100, "f"}, {900, "h"}, {500, "f"}};
  auto b = ddp::assign_buckets(t, {1000, 2500});
  // f: [0,1] reaches 1100 >= 1000 -> closes; [3,4,6] = 2600 >= 2500 -> closes.
  // h: [2,5] = 1200 >= 1000 -> closes.
  std::vector<std::vector<size_t>> expected = {{0, 1}, {2, 5}, {3, 4, 6}};
  EXPECT_EQ(b, expected);
}

TEST(BucketAssignment, LeftoverTensorsFormAFinalBucketPerKey) {
  using ddp::TensorInfo;
  std::vector<TensorInfo> t = {{10, "f"}, {10, "h"}, {10, "f"}};
  auto b = ddp::assign_buckets(t, {1000, 2500});
  std::vector<std::vector<size_t>> expected = {{0, 2}, {1}};
  EXPECT_EQ(b, expected);
}

}  // namespace
}  // namespace dtrain
