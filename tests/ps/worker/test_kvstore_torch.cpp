// Tensors as kvstore values (dtrain/kvstore_torch.h), through the local store.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/kvstore_torch.h"
#include "ps/job_env.h"
#include "support/http.h"  // free_port

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

using testing::job_env;

TEST(PsTorch, RunWithErrorFileEndsASchedulerAndAServerWithZeroAndRunsTheWorkersMain) {
  const int port = testing::free_port();
  KVStoreOptions o;
  o.log = [](const std::string&) {};
  o.connect_timeout = o.timeout = std::chrono::seconds(20);
  std::atomic<int> worker_mains{0};
  auto program = [&](const std::string& role) {
    return run_with_error_file([&] { return create_kvstore("dist_sync", o, job_env(role, port)); },
                               [&](std::unique_ptr<KVStore> kv) {
                                 ++worker_mains;
                                 kv->init(0, std::vector<float>{1, 2});
                                 kv->close();
                                 return 7;
                               });
  };
  int scheduler = -1, server = -1;
  std::thread a([&] { scheduler = program("scheduler"); });
  std::thread b([&] { server = program("server"); });
  EXPECT_EQ(program("worker"), 7);
  a.join();
  b.join();
  EXPECT_EQ(scheduler, 0);
  EXPECT_EQ(server, 0);
  EXPECT_EQ(worker_mains.load(), 1);
  // A worker's failure is 1, as run_with_error_file(main_fn) makes it.
  EXPECT_EQ(run_with_error_file(
                [] { return KVStore::create("local"); },
                [](std::unique_ptr<KVStore>) -> int { throw DistError("the worker failed"); }),
            1);
}

}  // namespace
}  // namespace dtrain
