// dist_device_sync (Note [Device sync] in src/ps/device_sync/device_sync.cpp): 2 nodes ×
// 2 local processes as threads, each node's processes a Gloo group, against
// a scheduler and 1–2 servers on loopback; the reference is dist_sync with
// one worker per process.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <thread>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore_torch.h"
#include "dtrain/store.h"
#include "ps/cluster.h"
#include "support/ranks.h"  // Note [Flight recorder in rank threads]

namespace dtrain {
namespace {

constexpr int kNodes = 2;
constexpr int kLocal = 2;
constexpr int kSteps = 3;
constexpr size_t kBound = 64;  // key 1 (200 values) is split over the servers

using Env = std::map<std::string, std::string>;
using Pulled = std::map<int, std::vector<std::vector<float>>>;  // rank -> each pull

EnvLookup lookup(Env env) {
  return [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// Integer-valued, so every sum is exact in float.
float grad_value(int rank, size_t i, int step) {
  return static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 17) + step * 7);
}

// The training loop every process runs: returns what it pulled.
std::vector<std::vector<float>> train(KVStore& kv) {
  std::vector<std::vector<float>> pulled;
  const size_t sizes[2] = {5, 200};
  for (int key = 0; key < 2; ++key) kv.init(key, std::vector<float>(sizes[key], 1.0f));
  for (int step = 0; step < kSteps; ++step) {
    for (int key = 0; key < 2; ++key) {
      std::vector<float> g(sizes[key]), w(sizes[key]);
      for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(kv.rank(), i, step) + key;
      kv.pushpull(key, g, w);
      pulled.push_back(w);
    }
  }
  std::vector<float> w(5);
  kv.push(0, std::vector<float>(5, static_cast<float>(kv.rank())));
  kv.pull(0, w);
  pulled.push_back(w);
  kv.barrier();
  return pulled;
}

Env dmlc_env(int port, int servers, int node) {
  return {{"DMLC_ROLE", "worker"},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(port)},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_NUM_WORKER", std::to_string(kNodes)},
          {"DMLC_WORKER_ID", std::to_string(node)},
          {"DMLC_NODE_HOST", "127.0.0.1"},
          {"MXNET_KVSTORE_BIGARRAY_BOUND", std::to_string(kBound)}};
}

KVStoreOptions quiet_options() {
  KVStoreOptions o;
  o.timeout = std::chrono::seconds(30);
  o.connect_timeout = std::chrono::seconds(30);
  o.log = [](const std::string&) {};
  return o;
}

// Runs a scheduler and `servers` servers for kNodes workers, and kNodes ×
// kLocal processes, each making its store with make(node, local, port).
Pulled run_device_sync(int servers,
                       const std::function<std::unique_ptr<KVStore>(int, int, int)>& make) {
  const int port = testing::free_port();
  Pulled pulled;
  std::mutex mu;
  std::vector<std::exception_ptr> errors(1 + servers + kNodes * kLocal);
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    try {
      ps::run_scheduler(testing::node_options(ps::Role::kScheduler, port, servers, kNodes));
    } catch (...) {
      errors[0] = std::current_exception();
    }
  });
  for (int s = 0; s < servers; ++s) {
    threads.emplace_back([&, s] {
      try {
        ps::run_server(testing::node_options(ps::Role::kServer, port, servers, kNodes));
      } catch (...) {
        errors[1 + s] = std::current_exception();
      }
    });
  }
  for (int node = 0; node < kNodes; ++node) {
    for (int local = 0; local < kLocal; ++local) {
      threads.emplace_back([&, node, local] {
        try {
          auto kv = make(node, local, port);
          EXPECT_EQ(kv->type(), "dist_device_sync");
          EXPECT_EQ(kv->num_workers(), kNodes * kLocal);
          EXPECT_EQ(kv->rank(), node * kLocal + local);
          auto mine = train(*kv);
          kv->close();
          std::lock_guard<std::mutex> lock(mu);
          pulled[node * kLocal + local] = std::move(mine);
        } catch (...) {
          errors[1 + servers + node * kLocal + local] = std::current_exception();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return pulled;
}

// The reference: dist_sync with one worker per process.
Pulled run_dist_sync(int servers) {
  Pulled pulled;
  std::mutex mu;
  testing::run_job(servers, kNodes * kLocal, true, kBound, [&](KVStore& kv) {
    auto mine = train(kv);
    std::lock_guard<std::mutex> lock(mu);
    pulled[kv.rank()] = std::move(mine);
  });
  return pulled;
}

// What every process must pull at step `step` of key `key` (sums of 4 ranks).
std::vector<float> expected_sum(int key, int step) {
  const size_t n = key == 0 ? 5 : 200;
  std::vector<float> out(n, 0.0f);
  for (int r = 0; r < kNodes * kLocal; ++r) {
    for (size_t i = 0; i < n; ++i) out[i] += grad_value(r, i, step) + key;
  }
  return out;
}

std::unique_ptr<KVStore> with_gloo_group(StorePtr memory, int node, int local, int port,
                                         int servers) {
  InitOptions o;
  o.rank = local;
  o.world_size = kLocal;
  o.local_rank = local;
  o.local_world_size = kLocal;
  o.gloo_host = "127.0.0.1";
  o.timeout = std::chrono::seconds(30);
  o.store_timeout = std::chrono::seconds(30);
  ProcessGroup pg = init_process_group(prefix_store(cat("node", node), memory), o);
  KVStoreOptions kvo = quiet_options();
  kvo.local_group = kv_local_group(pg);
  return KVStore::create("dist_device_sync", kvo, lookup(dmlc_env(port, servers, node))).take();
}

void expect_exact_sums(const Pulled& got) {
  ASSERT_EQ(got.size(), static_cast<size_t>(kNodes * kLocal));
  for (const auto& [rank, pulls] : got) {
    ASSERT_EQ(pulls.size(), static_cast<size_t>(kSteps * 2 + 1));
    for (int step = 0; step < kSteps; ++step) {
      for (int key = 0; key < 2; ++key) {
        EXPECT_EQ(pulls[step * 2 + key], expected_sum(key, step))
            << "rank " << rank << " key " << key << " step " << step;
      }
    }
    EXPECT_EQ(pulls.back(), std::vector<float>(5, 0 + 1 + 2 + 3)) << "rank " << rank;
  }
}

void expect_sums_and_reference(const Pulled& got, int servers) {
  expect_exact_sums(got);
  const Pulled reference = run_dist_sync(servers);
  EXPECT_EQ(got, reference);
}

TEST(PsDeviceSync, NodeSumsThroughGlooGroupsEqualDistSyncWithOneServer) {
  auto memory = make_memory_store();
  const Pulled got = run_device_sync(1, [&](int node, int local, int port) {
    return with_gloo_group(memory, node, local, port, 1);
  });
  expect_sums_and_reference(got, 1);
}

TEST(PsDeviceSync, NodeSumsThroughGlooGroupsEqualDistSyncWithTwoServersAndSplitArrays) {
  auto memory = make_memory_store();
  const Pulled got = run_device_sync(2, [&](int node, int local, int port) {
    return with_gloo_group(memory, node, local, port, 2);
  });
  expect_sums_and_reference(got, 2);
}

TEST(PsDeviceSync, CreateKvstoreFormsTheNodeGroupsFromTorchrunsVariables) {
  TcpStoreServerOptions so;
  so.port = 0;
  auto store = TcpStoreServer::start(so);
  const Pulled got = run_device_sync(2, [&](int node, int local, int port) {
    Env env = dmlc_env(port, 2, node);
    env["RANK"] = std::to_string(node * kLocal + local);
    env["WORLD_SIZE"] = std::to_string(kNodes * kLocal);
    env["LOCAL_RANK"] = std::to_string(local);
    env["LOCAL_WORLD_SIZE"] = std::to_string(kLocal);
    env["GROUP_RANK"] = std::to_string(node);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(store->port());
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    return create_kvstore("dist_device_sync", quiet_options(), lookup(env)).take();
  });
  expect_exact_sums(got);
}

TEST(PsDeviceSync, AWorkerWithoutANodeGroupIsToldHowToMakeOne) {
  try {
    KVStore::create("dist_device_sync", quiet_options(), lookup(dmlc_env(9, 1, 0)));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dtrain::create_kvstore"), std::string::npos) << e.what();
  }
}

// One node of two processes as `dtrain run --ps-servers` starts it: the
// torchrun variables and DMLC_NUM_WORKER = `num_worker`.
Env one_node_env(int num_worker) {
  Env env = dmlc_env(testing::free_port(), 1, 0);
  env["DMLC_NUM_WORKER"] = std::to_string(num_worker);
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "2";
  env["LOCAL_RANK"] = "0";
  env["LOCAL_WORLD_SIZE"] = "2";
  env["GROUP_RANK"] = "0";
  return env;
}

// Note [Workers per node or per process]: without the check the store would
// be refused for want of a group (or, given one, wait for a second ps worker).
TEST(PsDeviceSync, AWorkerWhoseDmlcNumWorkerCountsProcessesIsToldToUsePsWorkerPerNode) {
  try {
    KVStore::create("dist_device_sync", quiet_options(), lookup(one_node_env(2)));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "dist_device_sync has one ps worker per node, but DMLC_NUM_WORKER=2 counts "
              "processes (WORLD_SIZE=2, LOCAL_WORLD_SIZE=2): start the job with `dtrain run "
              "--ps-servers S --ps-worker-per node`, or set DMLC_NUM_WORKER to the number of "
              "nodes (1) and DMLC_WORKER_ID to the node's rank");
  }
}

// Without the check both processes would register as worker 0 of a job of
// one worker (nothing listens at the scheduler's port here: the worker would
// wait out its connect timeout).
TEST(PsDeviceSync, ADistSyncWorkerWhoseDmlcNumWorkerCountsNodesIsToldToDropPsWorkerPerNode) {
  KVStoreOptions o = quiet_options();
  o.connect_timeout = std::chrono::seconds(2);
  for (const char* type : {"dist_sync", "dist_async"}) {
    try {
      KVStore::create(type, o, lookup(one_node_env(1)));
      FAIL() << "expected InvalidArgument for " << type;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string(type) +
                    " has one ps worker per process, but DMLC_NUM_WORKER=1 is less than "
                    "WORLD_SIZE=2 (it counts nodes, as for dist_device_sync): drop "
                    "`--ps-worker-per node` from dtrain run, or set DMLC_NUM_WORKER to the "
                    "number of processes and DMLC_WORKER_ID to RANK");
    }
  }
}

}  // namespace
}  // namespace dtrain
