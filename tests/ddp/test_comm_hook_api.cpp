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

// Two stages per bucket, built with make_staged_reduction: records when each
// stage is launched, and checks the first stage's sum arrived before the
// second stage runs.
class TwoStageHook : public CommHook {
 public:
  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override {
    events.push_back("start " + std::to_string(bucket.index));
    Work first = pg.all_reduce_sum_async(bucket.buffer, "stage 0");
    const ProcessGroup* group = &pg;
    std::vector<std::function<Work()>> stages;
    stages.push_back([this, group, &bucket] {
      events.push_back("stage1 " + std::to_string(bucket.index));
      bucket.buffer.mul_(2);  // the sum, doubled; halved by the second allreduce below
      bucket.buffer.div_(2 * group->size());
      return group->all_reduce_sum_async(bucket.buffer, "stage 1");
    });
    return make_staged_reduction(std::move(first), std::move(stages));
  }
  std::string name() const override { return "two-stage"; }
  std::vector<std::string> events;
};

TEST(CommHookApi, LaterStagesAreLaunchedOnTheFixedWavefrontScheduleAndGiveTheSameGradients) {
  run_ranks(2, [](const ProcessGroup& pg) {
    auto hook = std::make_shared<TwoStageHook>();
    const auto ours = step(pg, hook);
    const auto reference = step(pg, allreduce_hook());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], reference[i])) << "parameter " << i;
    }
    // Stage 1 of bucket b right after the start of bucket b + 1; the last
    // bucket's when backward ends.
    const std::vector<std::string> expected = {"start 0",  "start 1", "stage1 0", "start 2",
                                               "stage1 1", "start 3", "stage1 2", "stage1 3"};
    EXPECT_EQ(hook->events, expected);
  });
}

}  // namespace
}  // namespace dtrain
