// Liveness, every node a thread on loopback: a server busy in its handler
// for longer than the heartbeat timeout is not declared dead (Note [Handlers
// off the receive thread]); a worker that is alive but never closes fails
// the others' close() naming it (Note [Final barrier deadline]).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "dtrain/errors.h"
#include "ps/cluster.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::run_job;

float liveness_grad(int rank, size_t i, int step) {
  return static_cast<float>((rank + 1) * 5 + static_cast<int>(i % 11) + step);
}

TEST(PsLiveness, AServerWhoseHandlerStallsForTwiceTheHeartbeatTimeoutIsNotDeclaredDead) {
  const milliseconds heartbeat_timeout(1500), stall = 2 * heartbeat_timeout;
  std::atomic<bool> stalled{false};
  std::atomic<long long> stalled_ms{0};
  auto node_setup = [&](ps::NodeOptions& o) {
    o.heartbeat_interval = milliseconds(200);
    o.heartbeat_timeout = heartbeat_timeout;
    if (o.role != ps::Role::kServer) return;
    // The first push any server receives keeps its handler busy for 2x the
    // heartbeat timeout (a big key's sum, a slow snapshot write).
    o.before_data = [&, stall](const ps::Message& msg) {
      if (!msg.meta.push || stalled.exchange(true)) return;
      const auto start = Clock::now();
      std::this_thread::sleep_for(stall);
      stalled_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    };
  };
  // 2 servers, 2 workers; bigarray_bound 50: the 120-value key is split.
  const std::vector<size_t> sizes = {7, 120};
  std::atomic<int> finished{0};
  EXPECT_NO_THROW(run_job(
      2, 2, /*sync=*/true, /*bigarray_bound=*/50,
      [&](KVStore& kv) {
        for (size_t k = 0; k < sizes.size(); ++k) {
          kv.init(static_cast<int>(k), std::vector<float>(sizes[k], 0.0f));
        }
        for (int step = 0; step < 3; ++step) {
          for (size_t k = 0; k < sizes.size(); ++k) {
            std::vector<float> grad(sizes[k]), out(sizes[k], -1.0f);
            for (size_t i = 0; i < grad.size(); ++i) grad[i] = liveness_grad(kv.rank(), i, step);
            kv.pushpull(static_cast<int>(k), grad, out);
            for (size_t i = 0; i < out.size(); ++i) {
              ASSERT_EQ(out[i], liveness_grad(0, i, step) + liveness_grad(1, i, step))
                  << "key " << k << " element " << i << " step " << step;
            }
          }
        }
        ++finished;
      },
      {}, node_setup));
  EXPECT_EQ(finished.load(), 2);
  EXPECT_TRUE(stalled.load());
  EXPECT_GE(stalled_ms.load(), stall.count());
}

TEST(PsLiveness, AWorkerThatNeverClosesFailsTheOthersCloseWithinTheFinalizeTimeoutNamingIt) {
  // Worker 1 stays alive (heartbeating) but does not close until worker 0's
  // close() has given up; the scheduler's deadline must end it. The bound on
  // the wait is the finalize timeout plus a margin for a loaded 2-core
  // machine (the scheduler checks every 50 ms; the verdict is one message).
  const milliseconds finalize_timeout(2000);
  const double margin_s = 10.0;
  std::atomic<bool> worker0_done{false};
  std::string worker0_error;
  double worker0_waited_s = -1;
  auto node_setup = [&](ps::NodeOptions& o) { o.finalize_timeout = finalize_timeout; };
  std::string first_error;
  try {
    run_job(
        1, 2, /*sync=*/true, /*bigarray_bound=*/1000,
        [&](KVStore& kv) {
          kv.init(0, std::vector<float>(4, 0.0f));
          std::vector<float> out(4);
          kv.pushpull(0, std::vector<float>(4, 1.0f), out);
          if (kv.rank() == 0) {
            const auto start = Clock::now();
            try {
              kv.close();
            } catch (const TimeoutError& e) {
              worker0_error = e.what();
            }
            worker0_waited_s = std::chrono::duration<double>(Clock::now() - start).count();
            worker0_done = true;
            return;
          }
          // Alive but not closing: wait (bounded) until worker 0 gave up.
          const auto limit = Clock::now() + std::chrono::seconds(60);
          while (!worker0_done && Clock::now() < limit) {
            std::this_thread::sleep_for(milliseconds(50));
          }
        },
        {}, node_setup);
  } catch (const TimeoutError& e) {
    first_error = e.what();  // the scheduler's (node 0 of run_job)
  }
  ASSERT_TRUE(worker0_done.load());
  EXPECT_NE(worker0_error.find("worker 1 (127.0.0.1:"), std::string::npos) << worker0_error;
  EXPECT_NE(worker0_error.find("has not reached the final barrier"), std::string::npos)
      << worker0_error;
  EXPECT_EQ(worker0_error.find('\n'), std::string::npos) << worker0_error;
  EXPECT_GE(worker0_waited_s, 0.9 * std::chrono::duration<double>(finalize_timeout).count());
  EXPECT_LT(worker0_waited_s, std::chrono::duration<double>(finalize_timeout).count() + margin_s)
      << "worker 0's close() waited " << worker0_waited_s << " s";
  // The scheduler itself fails with the same verdict (and so do the server
  // and worker 1: run_job rethrows the first node's error).
  EXPECT_NE(first_error.find("worker 1 (127.0.0.1:"), std::string::npos) << first_error;
}

}  // namespace
}  // namespace dtrain
