// Asynchronous collectives and their Work handles (dtrain/comm.h).

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/state.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

TEST(Work, AllReduceAsyncCompletesWithinTheWaitTimeoutAndLeavesTheSum) {
  run_ranks(3, [](const ProcessGroup& pg) {
    at::Tensor t = at::full({5}, static_cast<double>(pg.rank() + 1), at::kFloat);
    Work work = pg.all_reduce_sum_async(t);
    work.wait(30s);
    EXPECT_TRUE(work.is_completed());
    EXPECT_TRUE(at::equal(t, at::full({5}, 6.0, at::kFloat))) << "rank " << pg.rank();
  });
}

TEST(Work, WaitThrowsTimeoutErrorWhileAPeerHasNotStartedTheCollectiveAndALaterWaitCompletes) {
  std::atomic<bool> rank0_timed_out{false};
  run_ranks(2, [&](const ProcessGroup& pg) {
    at::Tensor t = at::full({3}, static_cast<double>(pg.rank() + 1), at::kFloat);
    if (pg.rank() == 1) {
      // Start only once rank 0 has seen its wait run out.
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      while (!rank0_timed_out && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
      }
      ASSERT_TRUE(rank0_timed_out.load()) << "rank 0's wait did not time out";
      pg.all_reduce_sum_async(t).wait(30s);
    } else {
      Work work = pg.all_reduce_sum_async(t, "test allreduce");
      try {
        work.wait(100ms);
        ADD_FAILURE() << "wait returned although rank 1 had not started the allreduce";
      } catch (const TimeoutError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("rank 0: test allreduce did not complete within 0.1 s"),
                  std::string::npos)
            << msg;
      }
      EXPECT_FALSE(work.is_completed());
      rank0_timed_out = true;
      work.wait(30s);  // the collective stayed in flight
      EXPECT_TRUE(work.is_completed());
    }
    EXPECT_TRUE(at::equal(t, at::full({3}, 3.0, at::kFloat))) << "rank " << pg.rank();
  });
}

TEST(Work, BroadcastAndAllGatherAsyncGiveWhatTheBlockingCallsGive) {
  run_ranks(3, [](const ProcessGroup& pg) {
    at::Tensor b = at::full({2}, static_cast<double>(10 * pg.rank()), at::kFloat);
    Work bw = pg.broadcast_async(b, /*root=*/2);
    std::vector<at::Tensor> out;
    for (int r = 0; r < pg.size(); ++r) out.push_back(at::empty({2}, at::kFloat));
    Work gw = pg.all_gather_async(at::full({2}, static_cast<double>(pg.rank()), at::kFloat), out);
    bw.wait(30s);
    gw.wait(30s);
    EXPECT_TRUE(at::equal(b, at::full({2}, 20.0, at::kFloat)));
    const std::vector<at::Tensor> blocking =
        pg.all_gather(at::full({2}, static_cast<double>(pg.rank()), at::kFloat));
    for (int r = 0; r < pg.size(); ++r) EXPECT_TRUE(at::equal(out[r], blocking[r])) << r;
  });
}

TEST(Work, TheSingleProcessGroupsHandlesAreCompleteAtOnce) {
  ProcessGroup pg;
  at::Tensor t = at::ones({4});
  Work work = pg.all_reduce_sum_async(t);
  EXPECT_TRUE(work.is_completed());
  work.wait(0ms);
  EXPECT_TRUE(at::equal(t, at::ones({4})));
  std::vector<at::Tensor> out{at::zeros({4})};
  pg.all_gather_async(at::full({4}, 2.0), out).wait(0ms);
  EXPECT_TRUE(at::equal(out[0], at::full({4}, 2.0)));
}

TEST(Work, AllGatherAsyncWithTheWrongNumberOfOutputsNamesTheNumberNeeded) {
  ProcessGroup pg;
  const std::string e = testing::error_of([&] { pg.all_gather_async(at::ones({1}), {}); });
  EXPECT_EQ(e, "rank 0: all_gather needs 1 output tensors (one per rank), got 0");
}

// A collective that finishes just after a wait slice timed out: c10d's
// wait(timeout) has thrown "Operation timed out!", and by the time the
// caller looks, isCompleted() is true. `fails` picks how it finished.
class FinishesAfterTheFirstSlice : public c10d::Work {
 public:
  explicit FinishesAfterTheFirstSlice(bool fails) : fails_(fails) {}
  bool wait(std::chrono::milliseconds timeout) override {
    if (++calls_ == 1) {
      finish(fails_ ? std::make_exception_ptr(std::runtime_error("Connection reset by peer"))
                    : nullptr);
      throw std::runtime_error("Operation timed out!");
    }
    return c10d::Work::wait(timeout);
  }
  int calls_ = 0;

 private:
  bool fails_;
};

// Note [Sliced waits]: before, the slice's timeout was reported as the
// collective's failure, and live recovery redid a step nobody had failed.
TEST(Work, ASlicedWaitWhoseCollectiveFinishesJustAfterASliceTimedOutReportsItsOwnOutcome) {
  int interrupts = 0;
  auto interrupt = [&] { ++interrupts; };
  FinishesAfterTheFirstSlice ok(false);
  EXPECT_NO_THROW(wait_c10d_work(ok, std::nullopt, interrupt, 20ms, 0, "allreduce", 300s));
  EXPECT_EQ(interrupts, 0);
  FinishesAfterTheFirstSlice failed(true);
  try {
    wait_c10d_work(failed, std::nullopt, interrupt, 20ms, 0, "allreduce", 300s);
    ADD_FAILURE() << "a failed collective was not reported";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("Connection reset by peer"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain
