// dtrain bench collective against nccl-tests' contract: every collective's
// result is right element by element (#wrong 0) at world sizes 2 and 3, in
// and out of place, and the bus-bandwidth factors are nccl-tests' own.
#include <gtest/gtest.h>

#include <mutex>

#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::error_of;
using testing::run_ranks;

// nccl-tests' *GetBw functions (src/all_reduce.cu, all_gather.cu, ...):
// busBw = algBw x factor.
double nccl_tests_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") return (n - 1.0) / n;
  return 1.0;  // broadcast, reduce
}

class EveryCollective : public ::testing::TestWithParam<std::tuple<std::string, int, std::string>> {
};

TEST_P(EveryCollective, ResultsAreRightElementByElementInAndOutOfPlace) {
  const auto& [op, world, redop] = GetParam();
  CollectiveBenchOptions o;
  o.op = parse_collective_op(op);
  o.redop = parse_collective_reduce_op(redop);
  o.root = world - 1;  // not rank 0, to catch a root mix-up
  o.min_bytes = 4;     // below one element per rank for chunked ops: skipped
  o.max_bytes = 12 * 1024;
  o.step_factor = 8;
  o.iterations = 2;
  o.warmup = 1;
  std::vector<CollectiveBenchRow> rows;
  std::mutex mu;
  run_ranks(world, [&](const ProcessGroup& pg) {
    auto r = run_collective_bench(o, pg);
    std::lock_guard<std::mutex> lock(mu);
    if (pg.rank() == 0) rows = r;
  });
  ASSERT_FALSE(rows.empty());
  for (const auto& row : rows) {
    SCOPED_TRACE(op + " " + std::to_string(row.bytes) + " bytes");
    EXPECT_GT(row.count, 0);
    EXPECT_EQ(row.out_of_place.wrong, 0);
    EXPECT_EQ(row.in_place.wrong, 0);
    EXPECT_GT(row.out_of_place.time_us, 0);
    EXPECT_DOUBLE_EQ(row.out_of_place.busbw_gbps,
                     row.out_of_place.algbw_gbps * nccl_tests_factor(op, world));
    EXPECT_EQ(row.root, op == "broadcast" || op == "reduce" ? world - 1 : -1);
  }
}

std::vector<std::tuple<std::string, int, std::string>> cases() {
  std::vector<std::tuple<std::string, int, std::string>> out;
  for (int world : {2, 3}) {
    for (const std::string& op : collective_bench_ops()) out.emplace_back(op, world, "sum");
    for (const char* redop : {"prod", "min", "max"}) {
      out.emplace_back("allreduce", world, redop);
      out.emplace_back("reduce_scatter", world, redop);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ranks, EveryCollective, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks_" +
                                  std::get<2>(info.param);
                         });

TEST(CollectiveBench, OtherTypesAreCheckedToo) {
  for (const char* dtype : {"double", "int32", "int64"}) {
    CollectiveBenchOptions o;
    o.op = CollectiveOp::kAllreduce;
    o.dtype = parse_collective_dtype(dtype);
    o.min_bytes = o.max_bytes = 1024;
    o.iterations = 1;
    o.warmup = 0;
    run_ranks(2, [&](const ProcessGroup& pg) {
      auto rows = run_collective_bench(o, pg);
      ASSERT_EQ(rows.size(), 1u);
      EXPECT_EQ(rows[0].in_place.wrong, 0) << dtype;
      EXPECT_EQ(rows[0].out_of_place.wrong, 0) << dtype;
    });
  }
}

TEST(CollectiveBench, RowsCarryNcclTestsSizeAndCount) {
  CollectiveBenchOptions o;
  o.op = CollectiveOp::kAllgather;
  o.min_bytes = o.max_bytes = 1000;  // 250 floats -> 83 per rank at 3 ranks
  o.iterations = 1;
  run_ranks(3, [&](const ProcessGroup& pg) {
    auto rows = run_collective_bench(o, pg);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].count, 83);
    EXPECT_EQ(rows[0].bytes, 83 * 3 * 4);
    EXPECT_EQ(rows[0].redop, "none");
    EXPECT_EQ(rows[0].type, "float");
  });
}

TEST(CollectiveBench, BusBandwidthFactorsAreNcclTests) {
  for (const std::string& op : collective_bench_ops()) {
    for (int n : {2, 3, 8})
      EXPECT_DOUBLE_EQ(bus_bandwidth_factor(parse_collective_op(op), n), nccl_tests_factor(op, n))
          << op;
  }
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllreduce, 8), 1.75);
}

TEST(CollectiveBench, UnknownCollectiveIsAnErrorListingTheKnownOnes) {
  const std::string m = error_of([] { parse_collective_op("allscatter"); });
  EXPECT_NE(m.find("unknown collective 'allscatter'"), std::string::npos) << m;
  EXPECT_NE(m.find("reduce_scatter"), std::string::npos) << m;
}

TEST(CollectiveBench, BadSizeRangeIsAnErrorNamingTheFlags) {
  CollectiveBenchOptions o;
  o.min_bytes = 1024;
  o.max_bytes = 8;
  const std::string m = error_of([&] { run_collective_bench(o, ProcessGroup()); });
  EXPECT_NE(m.find("bad size range -b 1024 -e 8"), std::string::npos) << m;
}

TEST(CollectiveBench, ByteSizesTakeNcclTestsSuffixes) {
  EXPECT_EQ(parse_byte_size("8"), 8);
  EXPECT_EQ(parse_byte_size("64K"), 64 * 1024);
  EXPECT_EQ(parse_byte_size("128M"), int64_t{128} << 20);
  EXPECT_EQ(parse_byte_size("1G"), int64_t{1} << 30);
  const std::string m = error_of([] { parse_byte_size("12Q"); });
  EXPECT_NE(m.find("bad byte size '12Q'"), std::string::npos) << m;
}

}  // namespace
}  // namespace dtrain
