// GradScaler with data parallelism: DDP (+ no_sync accumulation) and the
// Horovod-style DistributedOptimizer, 2 ranks as threads. The reference is
// one process on the whole batch with an unscaled loss.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/amp.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/horovod.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::run_ranks;

constexpr int kWorld = 2;
constexpr int64_t kBatch = 16;  // whole batch; each rank takes kBatch / kWorld rows

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

// Rank threads construct their nets at the same time and LibTorch's default
// generator is process-wide: seeding and drawing must not interleave.
Mlp make_mlp() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(11);
  return Mlp();
}

struct Data {
  at::Tensor x, y;
};

Data make_data() {
  torch::manual_seed(5);
  return {torch::randn({kBatch, 8}), torch::randn({kBatch, 3})};
}

at::Tensor rows(const at::Tensor& t, int64_t begin, int64_t n) { return t.narrow(0, begin, n); }

std::vector<at::Tensor> grads_of(const torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.grad().detach().cpu().clone());
  return out;
}

std::vector<at::Tensor> weights_of(const torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().cpu().clone());
  return out;
}

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].allclose(want[i], rtol, atol))
        << what << " tensor " << i << ": max diff "
        << (got[i] - want[i]).abs().max().item<double>();
  }
}

struct Reference {
  std::vector<at::Tensor> grads, weights;
};

/// One process, whole batch, unscaled loss, optional clipping, one SGD step.
Reference single_process(double clip = 0) {
  Data d = make_data();
  Mlp net = make_mlp();
  torch::optim::SGD opt(net->parameters(), 0.1);
  torch::mse_loss(net->forward(d.x), d.y).backward();
  Reference r;
  r.grads = grads_of(*net);
  if (clip > 0) torch::nn::utils::clip_grad_norm_(net->parameters(), clip);
  opt.step();
  r.weights = weights_of(*net);
  return r;
}

TEST(AmpDdp, NoSyncAccumulationWithAScaledLossGivesTheSingleProcessGradientsAndStep) {
  const Reference ref = single_process();
  const Data d = make_data();
  constexpr int kMicro = 2;
  const int64_t per_rank = kBatch / kWorld, per_micro = per_rank / kMicro;
  std::vector<std::vector<at::Tensor>> grads(kWorld), weights(kWorld);
  std::vector<double> scales(kWorld);
  run_ranks(kWorld, [&](const ProcessGroup& pg) {
    Mlp net = make_mlp();
    DistributedDataParallel ddp(net.ptr(), pg);
    torch::optim::SGD opt(net->parameters(), 0.1);
    GradScalerOptions o;
    o.process_group = pg;
    GradScaler scaler(o);
    for (int m = 0; m < kMicro; ++m) {
      const int64_t begin = pg.rank() * per_rank + m * per_micro;
      // As in PyTorch, the forward decides: one run inside no_sync() skips
      // the reduction of its backward.
      auto no_sync = m + 1 < kMicro ? std::optional<DataParallel::NoSync>(ddp.no_sync())
                                    : std::optional<DataParallel::NoSync>();
      const at::Tensor loss =
          torch::mse_loss(ddp.forward(rows(d.x, begin, per_micro)), rows(d.y, begin, per_micro)) /
          kMicro;
      scaler.scale(loss).backward();
    }
    scaler.unscale_(opt);
    grads[pg.rank()] = grads_of(*net);
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    weights[pg.rank()] = weights_of(*net);
    scales[pg.rank()] = scaler.get_scale();
  });
  for (int r = 0; r < kWorld; ++r) {
    expect_close(grads[r], ref.grads, 1e-5, 1e-7, "grads of rank " + std::to_string(r));
    expect_close(weights[r], ref.weights, 1e-5, 1e-7, "weights of rank " + std::to_string(r));
    EXPECT_EQ(scales[r], 65536.0);
  }
}

// After DDP's average every rank holds the same gradients; rank 1 then
// overflows on its own (as it could in its own unscale or clipping). Without
// agreement rank 0 would step and rank 1 would not.
TEST(AmpDdp, FoundInfOnOneRankSkipsTheStepOnAllRanks) {
  const Data d = make_data();
  const Reference untouched{{}, weights_of(*make_mlp())};
  std::vector<int> stepped(kWorld, -1);
  std::vector<std::vector<at::Tensor>> weights(kWorld);
  std::vector<double> scales(kWorld);
  run_ranks(kWorld, [&](const ProcessGroup& pg) {
    Mlp net = make_mlp();
    DistributedDataParallel ddp(net.ptr(), pg);
    torch::optim::SGD opt(net->parameters(), 0.1);
    GradScalerOptions o;
    o.process_group = pg;
    GradScaler scaler(o);
    const int64_t per_rank = kBatch / kWorld, begin = pg.rank() * per_rank;
    scaler
        .scale(torch::mse_loss(ddp.forward(rows(d.x, begin, per_rank)), rows(d.y, begin, per_rank)))
        .backward();
    if (pg.rank() == 1) net->fc2->bias.mutable_grad()[0] = INFINITY;
    stepped[pg.rank()] = scaler.step(opt) ? 1 : 0;
    scaler.update();
    weights[pg.rank()] = weights_of(*net);
    scales[pg.rank()] = scaler.get_scale();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(stepped[r], 0) << "rank " << r;
    expect_close(weights[r], untouched.weights, 0, 0, "weights of rank " + std::to_string(r));
    EXPECT_EQ(scales[r], 32768.0) << "rank " << r;
  }
}

// Horovod style: unscale_(DistributedOptimizer) averages, then unscales, so
// clipping sees the averaged true gradients; step() does not average again.
TEST(AmpHorovod, UnscaleAveragesBeforeUnscalingSoClipAndStepMatchTheSingleProcess) {
  const double clip = 0.05;
  const Reference ref = single_process(clip);
  const Data d = make_data();
  std::vector<std::vector<at::Tensor>> grads(kWorld), weights(kWorld);
  std::vector<std::string> misuse(kWorld);
  run_ranks(kWorld, [&](const ProcessGroup& pg) {
    Mlp net = make_mlp();
    broadcast_parameters(*net, pg);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    DistributedOptimizer opt(sgd, pg);
    GradScalerOptions o;
    o.process_group = pg;
    GradScaler scaler(o);
    const int64_t per_rank = kBatch / kWorld, begin = pg.rank() * per_rank;
    auto backward = [&] {
      opt.zero_grad();
      scaler
          .scale(
              torch::mse_loss(net->forward(rows(d.x, begin, per_rank)), rows(d.y, begin, per_rank)))
          .backward();
    };
    backward();
    scaler.unscale_(opt);
    grads[pg.rank()] = grads_of(*net);
    const double norm = torch::nn::utils::clip_grad_norm_(net->parameters(), clip);
    EXPECT_GT(norm, clip) << "the test must actually clip";
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    weights[pg.rank()] = weights_of(*net);

    // Unscaling the wrapped optimizer skips the average: step refuses.
    backward();
    scaler.unscale_(sgd);
    misuse[pg.rank()] = testing::error_of([&] { scaler.step(opt); });
  });
  for (int r = 0; r < kWorld; ++r) {
    expect_close(grads[r], ref.grads, 1e-5, 1e-7, "grads of rank " + std::to_string(r));
    expect_close(weights[r], ref.weights, 1e-5, 1e-7, "weights of rank " + std::to_string(r));
    EXPECT_EQ(misuse[r],
              "GradScaler::step(DistributedOptimizer): its wrapped optimizer was unscaled "
              "directly, before the gradients were averaged; call "
              "scaler.unscale_(distributed_optimizer) instead");
  }
}

TEST(AmpHorovod, StepWithoutUnscaleAveragesTheGradientsThenStepsLikeTheSingleProcess) {
  const Reference ref = single_process();
  const Data d = make_data();
  std::vector<std::vector<at::Tensor>> weights(kWorld);
  run_ranks(kWorld, [&](const ProcessGroup& pg) {
    Mlp net = make_mlp();
    broadcast_parameters(*net, pg);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    DistributedOptimizer opt(sgd, pg);
    GradScaler scaler;  // no group: the average already carries any inf to every rank
    const int64_t per_rank = kBatch / kWorld, begin = pg.rank() * per_rank;
    scaler
        .scale(
            torch::mse_loss(net->forward(rows(d.x, begin, per_rank)), rows(d.y, begin, per_rank)))
        .backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    weights[pg.rank()] = weights_of(*net);
  });
  for (int r = 0; r < kWorld; ++r) {
    expect_close(weights[r], ref.weights, 1e-5, 1e-7, "weights of rank " + std::to_string(r));
  }
}

// fp16 autocast on CUDA, DDP over Gloo with CUDA tensors (a GPU per rank,
// as many ranks as GPUs up to two: Note [Thread ranks on one GPU]), no_sync
// accumulation and the scaler: the unscaled gradients equal the fp32
// single-process reference within fp16's precision.
TEST(AmpDdpCuda, Fp16AutocastWithAccumulationGivesTheFp32ReferenceGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Reference ref = single_process();
  const Data d = make_data();
  constexpr int kMicro = 2;
  const int world = testing::thread_ranks_on_gpus(kWorld);
  const int64_t per_rank = kBatch / world, per_micro = per_rank / kMicro;
  std::vector<std::vector<at::Tensor>> grads(world);
  run_ranks(
      world,
      [&](const ProcessGroup& pg) {
        const torch::Device dev(torch::kCUDA, static_cast<c10::DeviceIndex>(pg.rank()));
        Mlp net = make_mlp();
        net->to(dev);
        DistributedDataParallel ddp(net.ptr(), pg);
        torch::optim::SGD opt(net->parameters(), 0.1);
        GradScalerOptions o;
        o.process_group = pg;
        GradScaler scaler(o);
        for (int m = 0; m < kMicro; ++m) {
          const int64_t begin = pg.rank() * per_rank + m * per_micro;
          auto no_sync = m + 1 < kMicro ? std::optional<DataParallel::NoSync>(ddp.no_sync())
                                        : std::optional<DataParallel::NoSync>();
          at::Tensor loss;
          {
            AutocastGuard autocast(c10::DeviceType::CUDA, at::kHalf);
            const at::Tensor out = ddp.forward(rows(d.x, begin, per_micro).to(dev));
            EXPECT_EQ(out.scalar_type(), at::kHalf);
            loss = torch::mse_loss(out, rows(d.y, begin, per_micro).to(dev)) / kMicro;
          }
          scaler.scale(loss).backward();
        }
        scaler.unscale_(opt);
        grads[pg.rank()] = grads_of(*net);
        EXPECT_TRUE(scaler.step(opt));
        scaler.update();
      },
      std::chrono::seconds(60), "gloo");
  for (int r = 0; r < world; ++r) {
    expect_close(grads[r], ref.grads, 2e-2, 2e-3, "fp16 grads of rank " + std::to_string(r));
  }
}

}  // namespace
}  // namespace dtrain
