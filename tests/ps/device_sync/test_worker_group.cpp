// kv_process_group (Note [Workers' group through the kvstore] in
// src/ps/device_sync/worker_group.cpp): workers that have only DMLC_* (no RANK,
// WORLD_SIZE, MASTER_ADDR, DMLC_WORKER_ID) form their c10d group from a
// dist_sync job run as threads on loopback; the reference is the kvstore's
// own ranks and sums computed here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <set>

#include "dtrain/comm.h"
#include "dtrain/kvstore_torch.h"
#include "ps/cluster.h"
#include "support/ranks.h"  // Note [Flight recorder in rank threads]

namespace dtrain {
namespace {

// What an MXJob worker pod has: MXNet's variables only.
EnvLookup dmlc_only(int workers) {
  std::map<std::string, std::string> env = {
      {"DMLC_ROLE", "worker"},
      {"DMLC_PS_ROOT_URI", "127.0.0.1"},
      {"DMLC_PS_ROOT_PORT", "9091"},
      {"DMLC_NUM_SERVER", "1"},
      {"DMLC_NUM_WORKER", std::to_string(workers)},
  };
  return [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(PsWorkerGroup, WorkersWithOnlyDmlcVariablesFormAGroupRankedAsTheKvstore) {
  (void)testing::kFlightRecorderOff;
  constexpr int kWorkers = 3;
  std::mutex mu;
  std::set<int> ranks;
  testing::run_job(1, kWorkers, /*sync=*/true, 1000000, [&](KVStore& kv) {
    InitOptions init;
    init.timeout = std::chrono::seconds(30);
    init.store_timeout = std::chrono::seconds(30);
    ProcessGroup pg = kv_process_group(kv, init, dmlc_only(kWorkers));
    EXPECT_EQ(pg.rank(), kv.rank());
    EXPECT_EQ(pg.size(), kWorkers);
    EXPECT_EQ(pg.backend_name(), "gloo");
    // Every rank sees every other one's rank at its own index.
    std::vector<at::Tensor> all = pg.all_gather(torch::full({1}, pg.rank(), torch::kLong));
    ASSERT_EQ(static_cast<int>(all.size()), kWorkers);
    for (int r = 0; r < kWorkers; ++r) EXPECT_EQ(all[r].item<int64_t>(), r);
    std::vector<at::Tensor> sum{torch::full({4}, pg.rank() + 1.0)};
    pg.all_reduce_sum(sum);
    EXPECT_TRUE(torch::equal(sum[0], torch::full({4}, 6.0)));  // 1 + 2 + 3
    // The kvstore still works after the group formed.
    std::vector<float> w(3);
    kv.init(0, std::vector<float>(3, 0.0f));
    kv.pushpull(0, std::vector<float>(3, static_cast<float>(kv.rank())), w);
    EXPECT_EQ(w, std::vector<float>(3, 3.0f));  // 0 + 1 + 2
    std::lock_guard<std::mutex> lock(mu);
    ranks.insert(pg.rank());
  });
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
}

TEST(PsWorkerGroup, ASingleWorkerIsTheSingleProcessGroup) {
  testing::run_job(1, 1, /*sync=*/true, 1000000, [&](KVStore& kv) {
    ProcessGroup pg = kv_process_group(kv, InitOptions{}, dmlc_only(1));
    EXPECT_EQ(pg.rank(), 0);
    EXPECT_EQ(pg.size(), 1);
    EXPECT_EQ(pg.backend_name(), "none");
  });
}

}  // namespace
}  // namespace dtrain
