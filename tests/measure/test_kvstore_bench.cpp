// dtrain bench kvstore: a loopback job (threads, tests/ps/cluster.h) whose
// pulled sums are right, whose rows have the sweep's sizes or the model's
// parameter tensors, and whose wire counts cover at least the payload; and
// /proc/net/dev parsing against a captured file.
#include <gtest/gtest.h>

#include <mutex>

#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "ps/cluster.h"

namespace dtrain {
namespace {

// Captured from `cat /proc/net/dev` inside a namespace with one veth.
const char* kProcNetDev =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop "
    "fifo colls carrier compressed\n"
    "    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0 "
    "   0     0       0          0\n"
    "  eth0: 123456789   90000    0    0    0     0          0         0 987654321  80000    0    "
    "0 "
    "   0     0       0          0\n";

TEST(KVStoreBench, InterfaceBytesAreProcNetDevsReceiveAndTransmitByteColumns) {
  InterfaceBytes eth0 = parse_interface_bytes(kProcNetDev, "eth0");
  EXPECT_EQ(eth0.rx, 123456789u);
  EXPECT_EQ(eth0.tx, 987654321u);
  InterfaceBytes lo = parse_interface_bytes(kProcNetDev, "lo");
  EXPECT_EQ(lo.rx, 1000u);
  EXPECT_EQ(lo.tx, 1000u);
  InterfaceBytes all = parse_interface_bytes(kProcNetDev, "");  // all but lo
  EXPECT_EQ(all.rx, 123456789u);
  EXPECT_EQ(all.tx, 987654321u);
}

TEST(KVStoreBench, AnAbsentInterfaceIsAnErrorListingThosePresent) {
  try {
    parse_interface_bytes(kProcNetDev, "dtb9");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'dtb9'"), std::string::npos) << what;
    EXPECT_NE(what.find("lo, eth0"), std::string::npos) << what;
  }
}

// Every row of a 2-worker, 2-server job on loopback: the pulled values are
// the workers' sum (#wrong 0), the sizes are the sweep's, and lo carried at
// least the pushed and the pulled bytes (it counts each byte as sent and
// received). A bound of 1000 elements splits the 4 KiB and 64 KiB keys over
// both servers.
TEST(KVStoreBench, SweepOnTwoServersPullsTheWorkersSumAndCountsAtLeastThePayloadOnTheWire) {
  KVStoreBenchOptions o;
  o.min_bytes = 64;
  o.max_bytes = 64 << 10;
  o.step_factor = 8;
  o.iterations = 3;
  o.warmup = 1;
  o.interface = "lo";
  std::mutex mu;
  std::vector<KVStoreBenchResult> results;
  testing::run_job(2, 2, /*sync=*/true, /*bigarray_bound=*/1000, [&](KVStore& kv) {
    KVStoreBenchResult r = run_kvstore_bench(o, kv);
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(r);
  });
  ASSERT_EQ(results.size(), 2u);
  const std::vector<int64_t> sizes = {64, 512, 4096, 32768};
  for (const KVStoreBenchResult& r : results) {
    EXPECT_EQ(r.workers, 2);
    ASSERT_EQ(r.rows.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      const KVStoreBenchRow& row = r.rows[i];
      EXPECT_EQ(row.bytes, sizes[i]);
      EXPECT_EQ(row.keys, 1);
      EXPECT_EQ(row.wrong, 0) << "size " << row.bytes;
      EXPECT_GT(row.time_us, 0);
      EXPECT_GE(row.rx_bytes, row.bytes) << "size " << row.bytes;
      EXPECT_GE(row.tx_bytes, row.bytes) << "size " << row.bytes;
    }
  }
}

// --model: one row, one key per parameter tensor of the registry's model,
// its bytes 4 x the registry's parameter count.
TEST(KVStoreBench, ModelRowPushesEveryParameterTensorOfTheModelAsItsOwnKey) {
  KVStoreBenchOptions o;
  o.model = "cnn";
  o.num_classes = 10;
  o.iterations = 1;
  o.warmup = 0;
  o.interface = "lo";
  std::mutex mu;
  std::vector<KVStoreBenchResult> results;
  testing::run_job(1, 2, /*sync=*/true, /*bigarray_bound=*/1000000, [&](KVStore& kv) {
    KVStoreBenchResult r = run_kvstore_bench(o, kv);
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(r);
  });
  ModelOptions mo;
  mo.in_channels = 3;
  mo.num_classes = 10;
  mo.image_size = model_info("cnn").default_image_size;
  const int64_t params = count_parameters("cnn", mo);
  ASSERT_EQ(results.size(), 2u);
  for (const KVStoreBenchResult& r : results) {
    ASSERT_EQ(r.rows.size(), 1u);
    EXPECT_EQ(r.rows[0].bytes, 4 * params);
    EXPECT_EQ(r.rows[0].keys, 8);  // 2 convolutions, 2 linear layers: weight and bias each
    EXPECT_EQ(r.rows[0].wrong, 0);
  }
}

TEST(KVStoreBench, BadSizeRangeIsAnErrorNamingTheFlagsBeforeAnyConnection) {
  KVStoreBenchOptions o;
  o.min_bytes = 100;
  o.max_bytes = 10;
  try {
    check_kvstore_bench_options(o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("-b 100 -e 10 -f 2"), std::string::npos) << e.what();
  }
  o = KVStoreBenchOptions();
  o.model = "resnet7";
  EXPECT_THROW(check_kvstore_bench_options(o), InvalidArgument);
}

}  // namespace
}  // namespace dtrain
