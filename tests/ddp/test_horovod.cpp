#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/ddp.h"
#include "dtrain/horovod.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::run_ranks;

torch::nn::Sequential make_model(int rank) {
  torch::manual_seed(11);
  torch::nn::Sequential m(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  if (rank != 0) {
    torch::NoGradGuard g;
    for (auto& p : m->parameters()) p.add_(0.3);
  }
  return m;
}

class HorovodWorldSize : public ::testing::TestWithParam<int> {};

TEST_P(HorovodWorldSize, DistributedOptimizerStepsMatchOneProcessOnTheConcatenatedBatch) {
  const int world = GetParam(), steps = 3, per_rank = 5;
  torch::manual_seed(5);
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(torch::randn({world * per_rank, 6}));
    ys.push_back(torch::randn({world * per_rank, 2}));
  }
  auto ref = make_model(0);
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    ref_opt.zero_grad();
    torch::mse_loss(ref->forward(xs[s]), ys[s]).backward();
    ref_opt.step();
  }
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < world; ++r) models.push_back(make_model(r));
  run_ranks(world, [&](const ProcessGroup& pg) {
    auto& m = models[pg.rank()];
    broadcast_parameters(*m, pg);
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    FusionOptions fo;
    fo.threshold_bytes = 64;  // several fused buffers
    DistributedOptimizer opt(sgd, pg, fo);
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      auto x = xs[s].narrow(0, pg.rank() * per_rank, per_rank);
      auto y = ys[s].narrow(0, pg.rank() * per_rank, per_rank);
      torch::mse_loss(m->forward(x), y).backward();
      opt.step();
    }
  });
  auto expected = ref->parameters();
  for (int r = 0; r < world; ++r) {
    auto got = models[r]->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(), 1e-5) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, HorovodWorldSize, ::testing::Values(1, 2, 3));

TEST(BroadcastOptimizerState, OtherRanksReceiveRankZerosMomentumBuffers) {
  std::vector<torch::nn::Sequential> models{make_model(0), make_model(0)};
  run_ranks(2, [&](const ProcessGroup& pg) {
    auto& m = models[pg.rank()];
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    if (pg.rank() == 0) {  // only rank 0 has state
      torch::mse_loss(m->forward(torch::ones({2, 6})), torch::zeros({2, 2})).backward();
      sgd.step();
    }
    broadcast_parameters(*m, pg);
    broadcast_optimizer_state(sgd, pg);
    ASSERT_EQ(sgd.state().size(), 4u) << "rank " << pg.rank();
    // One more identical step keeps the replicas equal only if the momentum
    // buffers arrived intact.
    sgd.zero_grad();
    torch::mse_loss(m->forward(torch::ones({2, 6})), torch::zeros({2, 2})).backward();
    sgd.step();
    for (const auto& p : m->parameters()) {
      auto all = pg.all_gather(p.detach());
      EXPECT_TRUE(all[0].equal(all[1]));
    }
  });
}

}  // namespace
}  // namespace dtrain
