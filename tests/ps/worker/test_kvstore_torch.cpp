// Tensors as kvstore values (dtrain/kvstore_torch.h), through the local store.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/errors.h"
#include "dtrain/kvstore_torch.h"

namespace dtrain {
namespace {

TEST(PsTorch, TensorsArePushedAndPulledInPlace) {
  auto kv = KVStore::create("local");
  at::Tensor w = torch::arange(6, torch::kFloat);
  kv->init(0, kv_values(w));
  kv->set_optimizer(OptimizerSpec::parse("sgd lr=0.5"));
  at::Tensor g = torch::ones({2, 3});
  kv->pushpull(0, kv_values(g), kv_output(w));
  EXPECT_TRUE(torch::equal(w, torch::arange(6, torch::kFloat) - 0.5));
  at::Tensor h = torch::zeros({6}, torch::kHalf);
  kv->pull(0, kv_output(h));
  EXPECT_TRUE(torch::equal(h.to(torch::kFloat), w));
}

TEST(PsTorch, NonContiguousOrNonFloatTensorsAreRefusedNamingTheFix) {
  at::Tensor t = torch::zeros({4, 4}).t();
  try {
    kv_values(t);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(".contiguous()"), std::string::npos) << e.what();
  }
  try {
    kv_output(torch::zeros({3}, torch::kLong));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("float32 or float16, not Long"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain
