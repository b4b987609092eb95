// AutocastGuard: what runs in low precision, what is restored, what is refused.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "dtrain/amp.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

TEST(Autocast, CpuBf16GuardRunsALinearInBf16AndRestoresTheState) {
  torch::manual_seed(0);
  torch::nn::Linear lin(16, 8);
  const at::Tensor x = torch::randn({4, 16});
  ASSERT_FALSE(autocast_enabled(kCpu));
  const at::ScalarType dtype_before = autocast_dtype(kCpu);
  at::Tensor y;
  {
    AutocastGuard guard(kCpu, at::kBFloat16);
    EXPECT_TRUE(autocast_enabled(kCpu));
    EXPECT_EQ(autocast_dtype(kCpu), at::kBFloat16);
    y = lin->forward(x);
  }
  EXPECT_FALSE(autocast_enabled(kCpu));
  EXPECT_EQ(autocast_dtype(kCpu), dtype_before);
  ASSERT_EQ(y.scalar_type(), at::kBFloat16);
  // The reference: the same op on inputs cast to bf16 by hand.
  const at::Tensor want = torch::linear(x.to(at::kBFloat16), lin->weight.to(at::kBFloat16),
                                        lin->bias.to(at::kBFloat16));
  EXPECT_TRUE(y.equal(want));
  EXPECT_EQ(lin->forward(x).scalar_type(), at::kFloat) << "autocast must be off after the guard";
}

TEST(Autocast, ANestedDisabledGuardRunsFp32AndReenablesOnExit) {
  torch::nn::Linear lin(4, 2);
  const at::Tensor x = torch::randn({3, 4});
  AutocastGuard outer(kCpu, at::kBFloat16);
  {
    AutocastGuard inner(kCpu, at::kHalf, /*enabled=*/false);  // nothing checked when disabled
    EXPECT_FALSE(autocast_enabled(kCpu));
    EXPECT_EQ(lin->forward(x).scalar_type(), at::kFloat);
  }
  EXPECT_TRUE(autocast_enabled(kCpu));
  EXPECT_EQ(autocast_dtype(kCpu), at::kBFloat16);
  EXPECT_EQ(lin->forward(x).scalar_type(), at::kBFloat16);
}

// Autocast caches the bf16 copy of each fp32 leaf that requires grad (a
// weight) for the region. If the cache outlived the guard, the forward after
// an optimizer step would still use the old weights' copy. (at::linear is
// called directly: LibTorch 1.13's Linear module passes weight.t(), a view,
// which autocast never caches.)
TEST(Autocast, TheCastCacheIsClearedWhenTheGuardEndsSoUpdatedWeightsAreSeen) {
  torch::nn::Linear lin(8, 4);
  const at::Tensor x = torch::randn({2, 8});
  {
    AutocastGuard guard(kCpu, at::kBFloat16);
    const at::Tensor first = torch::linear(x, lin->weight, lin->bias);
    torch::NoGradGuard no_grad;
    lin->weight.add_(1.0);
    ASSERT_TRUE(torch::linear(x, lin->weight, lin->bias).equal(first))
        << "within the region the cached copy is used (what the cache is)";
  }
  at::Tensor y;
  {
    AutocastGuard guard(kCpu, at::kBFloat16);
    y = torch::linear(x, lin->weight, lin->bias);
  }
  const at::Tensor want = torch::linear(x.to(at::kBFloat16), lin->weight.to(at::kBFloat16),
                                        lin->bias.to(at::kBFloat16));
  EXPECT_TRUE(y.equal(want));
}

TEST(Autocast, TheGuardAffectsOnlyTheCallingThread) {
  torch::nn::Linear lin(4, 2);
  const at::Tensor x = torch::randn({3, 4});
  AutocastGuard guard(kCpu, at::kBFloat16);
  bool other_enabled = true;
  at::ScalarType other_dtype = at::kBFloat16;
  std::thread([&] {
    other_enabled = autocast_enabled(kCpu);
    other_dtype = lin->forward(x).scalar_type();
  }).join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_dtype, at::kFloat);
  EXPECT_EQ(lin->forward(x).scalar_type(), at::kBFloat16);
}

TEST(Autocast, Fp16OnCpuIsRefusedNamingBf16AndChangesNothing) {
  EXPECT_EQ(testing::error_of([] { AutocastGuard guard(kCpu, at::kHalf); }),
            "fp16 autocast needs a CUDA device; use bf16 on the CPU");
  EXPECT_THROW(check_autocast(kCpu, at::kHalf), InvalidArgument);
  EXPECT_FALSE(autocast_enabled(kCpu));
}

TEST(Autocast, UnsupportedDtypesAndDevicesAreRefused) {
  EXPECT_THROW(check_autocast(kCpu, at::kFloat), InvalidArgument);
  EXPECT_THROW(check_autocast(kCuda, at::kDouble), InvalidArgument);
  EXPECT_THROW(check_autocast(c10::DeviceType::Meta, at::kBFloat16), InvalidArgument);
  EXPECT_NO_THROW(check_autocast(kCpu, at::kBFloat16));
}

TEST(Autocast, AmpFlagNamesMapToDtypes) {
  EXPECT_EQ(amp_dtype_from_name("bf16"), at::kBFloat16);
  EXPECT_EQ(amp_dtype_from_name("fp16"), at::kHalf);
  EXPECT_EQ(testing::error_of([] { amp_dtype_from_name("fp8"); }),
            "unknown mixed-precision dtype 'fp8'; use bf16 (CPU or CUDA) or fp16 (CUDA)");
  EXPECT_TRUE(needs_grad_scaler(at::kHalf));
  EXPECT_FALSE(needs_grad_scaler(at::kBFloat16));
}

TEST(Autocast, CudaAutocastWithoutAGpuIsRefusedNamingTheCpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is available";
  EXPECT_EQ(testing::error_of([] { AutocastGuard guard(kCuda, at::kHalf); }),
            "CUDA autocast needs a GPU and none is available; autocast on the CPU");
  EXPECT_FALSE(autocast_enabled(kCuda));
}

TEST(Autocast, CudaFp16GuardRunsALinearInFp16AndRestoresTheState) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::nn::Linear lin(16, 8);
  lin->to(torch::kCUDA);
  const at::Tensor x = torch::randn({4, 16}, torch::kCUDA);
  at::Tensor y;
  {
    AutocastGuard guard(kCuda, at::kHalf);
    EXPECT_TRUE(autocast_enabled(kCuda));
    y = lin->forward(x);
  }
  EXPECT_FALSE(autocast_enabled(kCuda));
  ASSERT_EQ(y.scalar_type(), at::kHalf);
  const at::Tensor want =
      torch::linear(x.to(at::kHalf), lin->weight.to(at::kHalf), lin->bias.to(at::kHalf));
  EXPECT_TRUE(y.allclose(want, 1e-3, 1e-3));
  EXPECT_EQ(lin->forward(x).scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace dtrain
