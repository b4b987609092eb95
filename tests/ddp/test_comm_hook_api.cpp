// A comm hook written against the public API alone (dtrain/comm.h's
// asynchronous collectives and make_pending_reduction), as users write one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>

#include "dtrain/comm.h"
#include "dtrain/ddp.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::run_ranks;

// Sums the bucket with all_reduce_sum_async and counts the finished buckets.
class PublicApiHook : public CommHook {
 public:
  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override {
    Work work = pg.all_reduce_sum_async(bucket.buffer, "public-api bucket allreduce");
    return make_pending_reduction(std::move(work), [this] { ++finished; });
  }
  std::string name() const override { return "public-api"; }
  std::atomic<int> finished{0};
};

// Weights from a formula, not from LibTorch's process-wide generator, which
// the rank threads would race on.
torch::nn::Sequential make_net() {
  torch::nn::Sequential net(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
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

// Gradients of one DDP step on rank-dependent data, parameter by parameter.
std::vector<torch::Tensor> step(const ProcessGroup& pg, std::shared_ptr<CommHook> hook) {
  auto net = make_net();
  DistributedDataParallel<torch::nn::SequentialImpl> ddp(net.ptr(), pg,
                                                         DdpOptions()
                                                             .set_comm_hook(std::move(hook))
                                                             .set_first_bucket_cap_mb(1e-9)
                                                             .set_bucket_cap_mb(1e-9));
  torch::Tensor x = torch::arange(12, torch::kFloat).reshape({2, 6}).mul(0.1 * (pg.rank() + 1));
  ddp.forward(x).pow(2).sum().backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : net->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(CommHookApi, AHookBuiltOnTheAsyncCollectivesGivesTheDefaultHooksGradients) {
  run_ranks(2, [](const ProcessGroup& pg) {
    auto hook = std::make_shared<PublicApiHook>();
    const auto ours = step(pg, hook);
    const auto reference = step(pg, allreduce_hook());
    ASSERT_EQ(ours.size(), reference.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], reference[i])) << "parameter " << i;
    }
    EXPECT_EQ(hook->finished.load(), 4) << "one bucket per parameter, each finished once";
  });
}

}  // namespace
}  // namespace dtrain
