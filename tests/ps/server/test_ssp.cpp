// SSP for dist_async (Note [Stale synchronous parallel] in src/ps/server/ssp.h):
// whole jobs as threads on loopback (tests/ps/cluster.h).
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/cluster.h"
#include "ps/server/ssp.h"

namespace dtrain {
namespace {

using std::chrono::milliseconds;

// Ranks follow the worker threads, the store gets `staleness`.
testing::WorkerSetup ssp_setup(int staleness, milliseconds timeout = std::chrono::seconds(20)) {
  return [=](int w, ps::JobConfig& c, milliseconds& t) {
    c.node.worker_id = w;
    c.staleness = staleness;
    t = timeout;
  };
}

// Positive integers, so each SGD step (lr 0.5) is exact in float and the
// weights only decrease.
float ssp_grad(int rank, size_t i, int step) {
  return static_cast<float>((rank + 1) * 2 + static_cast<int>(i % 5) + step);
}

constexpr int kSspWorkers = 3;
constexpr int kSspSteps = 4;
constexpr size_t kSizes[2] = {6, 90};  // key 1 is split over the two servers (bound 50)

// Trains kSspSteps of SGD; returns (each step's pulls, the final weights).
using Runs =
    std::map<int, std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>>>;

Runs train(bool sync, int staleness) {
  Runs runs;
  std::mutex mu;
  testing::run_job(
      2, kSspWorkers, sync, 50,
      [&](KVStore& kv) {
        std::vector<std::vector<float>> pulls, last;
        for (int key = 0; key < 2; ++key) kv.init(key, std::vector<float>(kSizes[key], 1000.0f));
        kv.set_optimizer(OptimizerSpec::parse("sgd lr=0.5"));
        for (int step = 0; step < kSspSteps; ++step) {
          for (int key = 0; key < 2; ++key) {
            std::vector<float> g(kSizes[key]), w(kSizes[key]);
            for (size_t i = 0; i < g.size(); ++i) g[i] = ssp_grad(kv.rank(), i, step);
            kv.pushpull(key, g, w);
            pulls.push_back(w);
          }
        }
        kv.barrier();  // every push has been applied
        for (int key = 0; key < 2; ++key) {
          std::vector<float> w(kSizes[key]);
          kv.pull(key, w);
          last.push_back(w);
        }
        std::lock_guard<std::mutex> lock(mu);
        runs[kv.rank()] = {pulls, last};
      },
      ssp_setup(staleness));
  return runs;
}

TEST(PsSsp, StalenessZeroAsyncEndsWithSyncsWeightsAndEveryPullSeesItsWholeStep) {
  const Runs sync = train(true, -1);
  const Runs ssp = train(false, 0);
  ASSERT_EQ(sync.size(), static_cast<size_t>(kSspWorkers));
  ASSERT_EQ(ssp.size(), static_cast<size_t>(kSspWorkers));
  for (int r = 0; r < kSspWorkers; ++r) {
    EXPECT_EQ(ssp.at(r).second, sync.at(r).second) << "final weights of rank " << r;
    // A pull at step c includes every worker's push of step c (weights only
    // decrease, so it is at most sync's value after step c); it may also
    // include pushes of step c + 1 by workers already past it.
    for (size_t p = 0; p < sync.at(r).first.size(); ++p) {
      const auto& got = ssp.at(r).first[p];
      const auto& in_step = sync.at(r).first[p];
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_LE(got[i], in_step[i]) << "rank " << r << " pull " << p << " value " << i;
      }
    }
  }
}

// Two workers, staleness 1: worker 0 runs ahead while worker 1 waits in a
// barrier. A pull that a later answered pull (same server, so answered in
// order) overtakes has been held by the server: that is how the test knows,
// without sleeping, that the held pull is not merely slow.
TEST(PsSsp, StalenessOneLetsAWorkerRunOneStepAheadButNotTwo) {
  testing::run_job(
      1, 2, false, 1000000,
      [&](KVStore& kv) {
        kv.init(0, std::vector<float>(3, 0.0f));
        kv.init(1, std::vector<float>(3, 0.0f));
        std::vector<float> w(3), other(3);
        if (kv.rank() == 1) {
          kv.barrier();  // worker 0 is two steps ahead, its pull held
          kv.push(0, std::vector<float>(3, 10.0f));
          kv.barrier();
          return;
        }
        kv.push(0, std::vector<float>(3, 1.0f));  // clock 1, worker 1 at 0
        KVHandle one_ahead = kv.pull_async(0, w);
        one_ahead.wait(kv.timeout());
        EXPECT_EQ(w, std::vector<float>(3, 1.0f));
        kv.push(0, std::vector<float>(3, 1.0f));  // clock 2: 1 − staleness > 0
        KVHandle two_ahead = kv.pull_async(0, w);
        kv.pull(1, other);  // answered after the server decided on two_ahead
        EXPECT_FALSE(two_ahead.is_completed());
        kv.barrier();  // worker 1 pushes once
        two_ahead.wait(kv.timeout());
        EXPECT_TRUE(two_ahead.is_completed());
        EXPECT_EQ(w, std::vector<float>(3, 12.0f));  // includes worker 1's push
        kv.barrier();
      },
      ssp_setup(1));
}

TEST(PsSsp, AHeldPullIsRefusedBeforeTheTimeoutNamingTheKeyAndTheSlowestWorker) {
  testing::run_job(
      1, 2, false, 1000000,
      [&](KVStore& kv) {
        kv.init(4, std::vector<float>(2, 0.0f));
        if (kv.rank() == 1) {
          kv.barrier();  // never pushes key 4
          return;
        }
        kv.push(4, std::vector<float>(2, 1.0f));
        std::vector<float> w(2);
        try {
          kv.pull(4, w);
          ADD_FAILURE() << "expected DistError";
        } catch (const DistError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("pull of key 4 by worker 0"), std::string::npos) << what;
          EXPECT_NE(what.find("the slowest, worker 1, has pushed it 0 time(s)"), std::string::npos)
              << what;
          EXPECT_NE(what.find("KVStoreOptions::staleness"), std::string::npos) << what;
        }
        kv.barrier();
      },
      [](int w, ps::JobConfig& c, milliseconds& t) {
        c.node.worker_id = w;
        c.staleness = 0;
        // Worker 0's pull is refused after 3 s (4 s minus the 1 s margin);
        // worker 1 waits for it in a barrier with the default deadline.
        t = w == 0 ? milliseconds(4000) : milliseconds(20000);
      });
}

TEST(PsSsp, AWorkerThatLeavesNoLongerHoldsTheOthersPulls) {
  testing::run_job(
      1, 2, false, 1000000,
      [&](KVStore& kv) {
        kv.init(0, std::vector<float>(1, 0.0f));
        if (kv.rank() == 1) return;  // leaves (close) without pushing
        kv.push(0, std::vector<float>(1, 1.0f));
        std::vector<float> w(1);
        kv.pull(0, w);  // held until worker 1's close reaches the server
        EXPECT_EQ(w, std::vector<float>(1, 1.0f));
      },
      ssp_setup(0));
}

TEST(PsSsp, StalenessComesFromTheOptionsOrDtrainPsStaleness) {
  KVStoreOptions o;
  o.staleness = 2;
  auto none = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  EXPECT_EQ(ps::resolve_staleness(o, none), 2);
  auto env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "DTRAIN_PS_STALENESS") return std::string("0");
    return std::nullopt;
  };
  EXPECT_EQ(ps::resolve_staleness(o, env), 0);
  auto bad = [](const std::string& k) -> std::optional<std::string> {
    if (k == "DTRAIN_PS_STALENESS") return std::string("two");
    return std::nullopt;
  };
  try {
    ps::resolve_staleness(o, bad);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("DTRAIN_PS_STALENESS='two' is not an integer >= -1"),
              std::string::npos)
        << e.what();
  }
  o.staleness = -2;
  EXPECT_THROW(ps::resolve_staleness(o, none), InvalidArgument);
}

TEST(PsSsp, TheStalenessCommandRoundTripsAndRejectsMalformedBodies) {
  int s = 0;
  milliseconds limit{0};
  EXPECT_TRUE(ps::decode_staleness(ps::encode_staleness(3, milliseconds(2500)), &s, &limit));
  EXPECT_EQ(s, 3);
  EXPECT_EQ(limit, milliseconds(2500));
  for (const char* bad : {"", "3", "x,5", "3,0", "-2,100", "3,"}) {
    EXPECT_FALSE(ps::decode_staleness(bad, &s, &limit)) << bad;
  }
  EXPECT_EQ(ps::staleness_limit(milliseconds(120000)), milliseconds(119000));
  EXPECT_EQ(ps::staleness_limit(milliseconds(2000)), milliseconds(1500));
}

}  // namespace
}  // namespace dtrain
