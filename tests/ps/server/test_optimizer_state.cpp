// The servers' optimizer state through the KVStore API (Note [Optimizer
// state] in src/ps/server/server.h): pulled as a reference SGD computes it, also for
// a key split over two servers, and pushed into a new job, which then
// continues exactly as the uninterrupted job.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "dtrain/errors.h"
#include "ps/cluster.h"

namespace dtrain {
namespace {

using testing::run_job;

constexpr int kStateServers = 2, kStateWorkers = 2;
constexpr size_t kBound = 4;  // key 0 (8 values) is split over both servers
const std::map<int, size_t> kKeys = {{0, 8}, {1, 3}, {2, 1}};
const char* const kSpec = "sgd lr=0.1 momentum=0.9 wd=0.01";

float grad_value(int rank, int key, size_t i, int step) {
  return 0.25f * static_cast<float>((rank + 1) * (key + 2)) - 0.1f * static_cast<float>(i) +
         0.5f * static_cast<float>(step % 3);
}

float init_value(int key, size_t i) {
  return 1.0f + 0.5f * static_cast<float>(key) - 0.25f * static_cast<float>(i);
}

struct Saved {
  std::map<int, std::vector<float>> weights, momentum;
  std::map<int, uint64_t> updates;
};

// One job: every worker initialises the keys (with `from`'s weights when
// given, else init_value), sets the SGD, rank 0 pushes `from`'s momentum
// when `restore`, then steps [first, last) of pushpull. Rank 0's pulled
// weights and the servers' state after the last step are returned.
Saved run(int first, int last, const Saved* from, bool restore) {
  Saved out;
  std::mutex mu;
  run_job(kStateServers, kStateWorkers, true, kBound, [&](KVStore& kv) {
    for (const auto& [key, n] : kKeys) {
      std::vector<float> w(n);
      for (size_t i = 0; i < n; ++i) w[i] = from ? from->weights.at(key)[i] : init_value(key, i);
      kv.init(key, w);
    }
    kv.set_optimizer(OptimizerSpec::parse(kSpec));
    if (restore && kv.rank() == 0) {
      for (const auto& [key, n] : kKeys) {
        kv.push_optimizer_state(key, from->momentum.at(key), from->updates.at(key));
      }
    }
    kv.barrier();
    std::map<int, std::vector<float>> w;
    for (int step = first; step < last; ++step) {
      for (const auto& [key, n] : kKeys) {
        std::vector<float> g(n);
        for (size_t i = 0; i < n; ++i) g[i] = grad_value(kv.rank(), key, i, step);
        w[key].resize(n);
        kv.pushpull(key, g, w[key]);
      }
    }
    if (kv.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    out.weights = w;
    for (const auto& [key, n] : kKeys) {
      out.momentum[key].resize(n);
      out.updates[key] = kv.pull_optimizer_state(key, out.momentum[key]);
    }
  });
  return out;
}

TEST(PsOptimizerState, PulledStateIsTheReferenceSgdsMomentumAndUpdateCountAlsoForASplitKey) {
  const int steps = 3;
  const Saved got = run(0, steps, nullptr, false);
  const OptimizerSpec o = OptimizerSpec::parse(kSpec);
  for (const auto& [key, n] : kKeys) {
    for (size_t i = 0; i < n; ++i) {
      // MXNet's SGD on the sum of the workers' pushes, fp32 storage.
      float w = init_value(key, i), mom = 0;
      for (int step = 0; step < steps; ++step) {
        float g = 0;
        for (int r = 0; r < kStateWorkers; ++r) g += grad_value(r, key, i, step);
        mom = static_cast<float>(o.momentum * mom -
                                 o.learning_rate * (o.rescale_grad * g + o.weight_decay * w));
        w += mom;
      }
      EXPECT_FLOAT_EQ(got.momentum.at(key)[i], mom) << "key " << key << " element " << i;
      EXPECT_FLOAT_EQ(got.weights.at(key)[i], w) << "key " << key << " element " << i;
    }
    EXPECT_EQ(got.updates.at(key), static_cast<uint64_t>(steps)) << "key " << key;
  }
}

TEST(PsOptimizerState, PushedStateLetsANewJobContinueExactlyAsTheUninterruptedJob) {
  const Saved whole = run(0, 6, nullptr, false);
  const Saved half = run(0, 3, nullptr, false);
  const Saved resumed = run(3, 6, &half, true);
  for (const auto& [key, n] : kKeys) {
    EXPECT_EQ(resumed.weights.at(key), whole.weights.at(key)) << "key " << key;
    EXPECT_EQ(resumed.momentum.at(key), whole.momentum.at(key)) << "key " << key;
    EXPECT_EQ(resumed.updates.at(key), 6u) << "key " << key;
  }
  // Without the momentum the new job takes other steps: the check above can fail.
  const Saved forgetful = run(3, 6, &half, false);
  EXPECT_NE(forgetful.weights.at(0), whole.weights.at(0));
  EXPECT_EQ(forgetful.updates.at(0), 3u);
}

TEST(PsOptimizerState, StateCallsNeedAnInitialisedKeyOfTheRightSizeAndWorkOnTheLocalStore) {
  run_job(1, 1, true, kBound, [&](KVStore& kv) {
    std::vector<float> m(2);
    EXPECT_THROW(kv.pull_optimizer_state(7, m), InvalidArgument);
    kv.init(7, std::vector<float>{1, 2});
    std::vector<float> wrong(3);
    EXPECT_THROW(kv.pull_optimizer_state(7, wrong), InvalidArgument);
    EXPECT_THROW(kv.push_optimizer_state(7, wrong, 0), InvalidArgument);
  });
  auto local = KVStore::create("local");
  local->init(0, std::vector<float>{1, 2});
  local->set_optimizer(OptimizerSpec::parse("sgd lr=1 momentum=0.5"));
  local->push_optimizer_state(0, std::vector<float>{2, -2}, 4);
  std::vector<float> out(2);
  local->pushpull(0, std::vector<float>{0, 0}, out);  // w += 0.5 mom
  EXPECT_EQ(out, (std::vector<float>{2, 1}));
  std::vector<float> mom(2);
  EXPECT_EQ(local->pull_optimizer_state(0, mom), 5u);
  EXPECT_EQ(mom, (std::vector<float>{1, -1}));
}

}  // namespace
}  // namespace dtrain
