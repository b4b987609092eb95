// Which way of moving the gradients `dtrain bench ddp` recommends: the
// estimate of each (Note [Choosing how gradients travel] in
// src/measure/comm_choice.cpp) from figures given here, worked out by hand.
#include <gtest/gtest.h>

#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

// 4 ranks on a 100 MB/s link; a 1000x1000 matrix and a 1000 vector: G =
// 4,004,000 bytes of fp32 gradients.
CommChoiceFigures four_ranks() {
  CommChoiceFigures f;
  f.world_size = 4;
  f.batch_size = 10;
  f.compute_ms = 100;
  f.hideable_ms = 20;
  f.link_bytes_per_sec = 1e8;
  f.grad_shapes = {{1000, 1000}, {1000}};
  return f;
}

TEST(CommChoice, EachWayIsItsBytesOnTheBusiestLinkAndTheFastestComesFirst) {
  const std::vector<CommChoice> c = comm_choices(four_ranks());
  std::vector<std::string> order;
  for (const CommChoice& x : c) order.push_back(x.name);
  EXPECT_EQ(order,
            (std::vector<std::string>{"powersgd rank 1", "powersgd rank 2", "powersgd rank 4",
                                      "fp16/bf16", "ps (4 servers)", "allreduce"}));
  auto of = [&](const std::string& name) {
    for (const CommChoice& x : c) {
      if (x.name == name) return x;
    }
    return CommChoice();
  };
  // The ring: 2(W-1)/W = 1.5 payloads each way.
  EXPECT_DOUBLE_EQ(of("allreduce").link_bytes, 1.5 * 4004000);
  EXPECT_NEAR(of("allreduce").comm_ms, 60.06, 1e-9);
  EXPECT_NEAR(of("allreduce").step_ms, 100 + 60.06 - 20, 1e-9);
  EXPECT_NEAR(of("allreduce").images_per_sec, 40 / 140.06 * 1000, 1e-9);
  EXPECT_DOUBLE_EQ(of("fp16/bf16").link_bytes, 1.5 * 4004000 / 2);
  // PowerSGD rank 2: P and Q of the matrix, (1000 + 1000) x 2, and the
  // vector whole (1001 elements would be no gain over its 1000).
  EXPECT_DOUBLE_EQ(of("powersgd rank 2").link_bytes, 1.5 * 4 * (4000 + 1000));
  EXPECT_DOUBLE_EQ(of("powersgd rank 2").step_ms, 100);  // all of it hidden
  // The PS with as many servers as workers: one payload each way.
  EXPECT_DOUBLE_EQ(of("ps (4 servers)").link_bytes, 4004000);
  EXPECT_NEAR(of("ps (4 servers)").step_ms, 100 + 40.04 - 20, 1e-9);
}

TEST(CommChoice, ThePsWithFewerServersThanWorkersLosesToTheRing) {
  CommChoiceFigures f = four_ranks();
  f.servers = 2;
  f.powersgd_ranks.clear();
  const std::vector<CommChoice> c = comm_choices(f);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1].name, "allreduce");
  EXPECT_EQ(c[2].name, "ps (2 servers)");
  EXPECT_DOUBLE_EQ(c[2].link_bytes, 2.0 * 4004000);  // a server gets W/S = 2 payloads
  const std::string text = format_comm_choices(f, c);
  EXPECT_NE(text.find("fastest: fp16/bf16, an estimated 1.27x allreduce's images/s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("link 0.800 Gbit/s each way per rank"), std::string::npos) << text;
}

TEST(CommChoice, TheFiguresOfABenchDdpRunGiveTheLinkAndTheHiddenTime) {
  DdpBenchResult r;
  r.world_size = 2;
  r.options.batch_size = 8;
  r.grad_bytes = 4000000;
  r.grad_shapes = {{1000, 1000}};
  r.allreduce_ms = 40;  // 2(W-1)/W = 1 payload in 40 ms: 100 MB/s
  r.broadcast_ms = 1;
  r.step_nosync_p50_ms = 50;
  r.backward_compute_ms = 25;
  r.exposed_comm_ms = 11;  // of 41 ms: 30 hidden
  CommChoiceFigures f = comm_choice_figures(r);
  EXPECT_DOUBLE_EQ(f.link_bytes_per_sec, 1e8);
  EXPECT_DOUBLE_EQ(f.compute_ms, 50);
  EXPECT_DOUBLE_EQ(f.fixed_ms, 1);
  EXPECT_NEAR(f.hideable_ms, 30, 1e-9);
  // A PowerSGD run that hid everything: at least the backward is hideable.
  r.options.comm_hook = "powersgd";
  r.exposed_comm_ms = 0;
  EXPECT_NEAR(comm_choice_figures(r).hideable_ms, 25, 1e-9);
  r.world_size = 1;
  EXPECT_EQ(testing::error_of([&] { comm_choice_figures(r); }),
            "comm_choice_figures: a run of 1 rank(s) measured no link; run bench ddp on 2 or "
            "more ranks");
}

// Bytes on the wire per DDP step (DdpBenchResult::wire_*): two thread ranks
// over loopback, counted on lo, whose counter both share. A ring allreduce
// of 2 ranks sends each rank's whole gradient once, so the DDP steps alone
// put at least the gradient's bytes on lo per step; an absent interface is an
// error naming those present before any traffic.
TEST(DdpBench, TwoRanksOnLoopbackCountAtLeastTheGradientsBytesPerDdpStep) {
  DdpBenchOptions o;
  o.batch_size = 4;
  o.steps = 3;
  o.warmup = 1;
  o.threads = 1;
  o.wire_interface = "lo";
  std::vector<DdpBenchResult> results(2);
  testing::run_ranks(2, [&](const ProcessGroup& pg) { results[pg.rank()] = run_ddp_bench(o, pg); });
  for (const DdpBenchResult& r : results) {
    ASSERT_GT(r.grad_bytes, 0);
    EXPECT_GE(r.wire_tx_bytes_per_step, static_cast<double>(r.grad_bytes));
    EXPECT_GE(r.wire_rx_bytes_per_step, static_cast<double>(r.grad_bytes));
    EXPECT_NE(to_json(r).find("\"wire_tx_bytes_per_step\":"), std::string::npos);
  }
  o.wire_interface = "dtrain-no-such-if0";
  const std::string e = testing::error_of(
      [&] { testing::run_ranks(1, [&](const ProcessGroup& pg) { run_ddp_bench(o, pg); }); });
  EXPECT_NE(e.find("no network interface 'dtrain-no-such-if0'"), std::string::npos) << e;
}

}  // namespace
}  // namespace dtrain
