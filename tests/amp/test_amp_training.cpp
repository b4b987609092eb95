// Mixed-precision training end to end: bf16 autocast on the CPU learns
// Fashion-MNIST through dtrain's IDX loader; fp16 + GradScaler on CUDA.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"

namespace dtrain {
namespace {

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";
// Batches of 64 trained before evaluating: 1000 reach about 84% (a few
// seconds on 2 cores); 80% is the bar.
constexpr int64_t kSteps = 1000;

struct FashionMlpImpl : torch::nn::Module {
  FashionMlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(FashionMlp);

struct Result {
  double accuracy = 0;
  int64_t skipped = 0;
  at::ScalarType logits_dtype = at::kFloat;
};

/// Trains `steps` batches of 64 with autocast to `dtype` on `device` and the
/// scaler enabled where the dtype needs it, then evaluates the whole test
/// split under autocast.
Result train_fashion_mnist(c10::DeviceType device, at::ScalarType dtype, int64_t steps) {
  DatasetOptions data;
  data.name = "fashion-mnist";
  data.train.batch_size = 64;
  data.test.batch_size = 500;
  data.test.shuffle = false;
  data.test.pad = false;
  DatasetSplits splits = open_dataset(data, ProcessGroup());
  torch::manual_seed(0);
  FashionMlp model;
  model->to(device);
  torch::optim::SGD opt(model->parameters(), 0.1);
  GradScalerOptions so;
  so.enabled = needs_grad_scaler(dtype);
  GradScaler scaler(so);
  Result r;
  splits.train->start_epoch(0);
  Batch b;
  for (int64_t step = 0; step < steps && splits.train->next(b); ++step) {
    opt.zero_grad();
    at::Tensor loss;
    {
      AutocastGuard autocast(device, dtype);
      const at::Tensor logits = model->forward(b.inputs.to(device));
      r.logits_dtype = logits.scalar_type();
      loss = torch::nn::functional::cross_entropy(logits, b.targets.to(device));
    }
    scaler.scale(loss).backward();
    if (!scaler.step(opt)) ++r.skipped;
    scaler.update();
  }
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device, dtype);
  int64_t correct = 0, total = 0;
  splits.test->start_epoch(0);
  while (splits.test->next(b)) {
    const at::Tensor pred = model->forward(b.inputs.to(device)).argmax(1).cpu();
    correct += pred.eq(b.targets).sum().item<int64_t>();
    total += b.targets.size(0);
  }
  EXPECT_EQ(total, 10000);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(total);
  return r;
}

TEST(AmpTraining, Bf16AutocastOnCpuLearnsFashionMnistToAtLeast80Percent) {
  if (!std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (" << kFashionMnist
                 << "); install dataset-fashion-mnist";
  }
  const Result r = train_fashion_mnist(c10::DeviceType::CPU, at::kBFloat16, kSteps);
  EXPECT_EQ(r.logits_dtype, at::kBFloat16) << "the forward must run in bf16";
  EXPECT_EQ(r.skipped, 0);
  EXPECT_GE(r.accuracy, 0.80) << "test accuracy after " << kSteps << " bf16 steps";
  std::printf("bf16 CPU: test accuracy %.4f after %lld steps of 64\n", r.accuracy,
              static_cast<long long>(kSteps));
}

TEST(AmpTraining, Fp16AutocastWithTheScalerOnCudaLearnsFashionMnist) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (" << kFashionMnist << ")";
  }
  const Result r = train_fashion_mnist(c10::DeviceType::CUDA, at::kHalf, kSteps);
  EXPECT_EQ(r.logits_dtype, at::kHalf);
  EXPECT_LE(r.skipped, 10) << "the scale calibrates within a few steps";
  EXPECT_GE(r.accuracy, 0.80);
}

}  // namespace
}  // namespace dtrain
