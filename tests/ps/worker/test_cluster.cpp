// Whole jobs on loopback, every node a thread: dist_sync sums, dist_async,
// key placement, the local store, start-up failures.
#include <gtest/gtest.h>
#include <netdb.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "dtrain/errors.h"
#include "ps/cluster.h"
#include "ps/wire/compression.h"

namespace dtrain {
namespace {

using testing::run_job;

std::string cat_port(int port) { return "127.0.0.1:" + std::to_string(port); }

// The value worker `rank` pushes for element i of a key at step `step`: small
// integers, so float sums are exact.
float cluster_grad(int rank, size_t i, int step) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 7) + step);
}

TEST(PsCluster, DistSyncSumsAreExactForOneToFourWorkersAndOneToThreeServers) {
  // bigarray_bound 100: the 1,000-element key is split over every server.
  const std::vector<size_t> sizes = {1, 3, 99, 1000};
  for (int servers = 1; servers <= 3; ++servers) {
    for (int workers = 1; workers <= 4; ++workers) {
      SCOPED_TRACE(std::to_string(servers) + " servers, " + std::to_string(workers) + " workers");
      std::atomic<int> checked{0};
      run_job(servers, workers, /*sync=*/true, /*bigarray_bound=*/100, [&](KVStore& kv) {
        EXPECT_EQ(kv.num_workers(), workers);
        for (size_t k = 0; k < sizes.size(); ++k) {
          kv.init(static_cast<int>(k) * 7, std::vector<float>(sizes[k], 0.0f));
        }
        for (int step = 0; step < 3; ++step) {
          for (size_t k = 0; k < sizes.size(); ++k) {
            std::vector<float> grad(sizes[k]), out(sizes[k], -1.0f);
            for (size_t i = 0; i < grad.size(); ++i) grad[i] = cluster_grad(kv.rank(), i, step);
            kv.pushpull(static_cast<int>(k) * 7, grad, out);
            for (size_t i = 0; i < out.size(); ++i) {
              float want = 0;
              for (int r = 0; r < workers; ++r) want += cluster_grad(r, i, step);
              ASSERT_EQ(out[i], want) << "key " << k * 7 << " element " << i << " step " << step;
            }
          }
        }
        ++checked;
      });
      EXPECT_EQ(checked.load(), workers);
    }
  }
}

TEST(PsCluster, DistSyncPushThenPullAndBroadcastSeeTheRoundsSum) {
  run_job(2, 3, true, 10, [&](KVStore& kv) {
    std::vector<float> start(50, 0.0f), got(50);
    for (size_t i = 0; i < start.size(); ++i) start[i] = kv.rank() == 0 ? float(i) : -1.0f;
    kv.broadcast(3, start, got);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(i));  // rank 0's value
    kv.push(3, std::vector<float>(50, float(kv.rank() + 1)));
    kv.barrier();
    kv.pull(3, got);
    for (float v : got) ASSERT_EQ(v, 6.0f);  // 1 + 2 + 3
  });
}

TEST(PsCluster, DistAsyncAppliesEveryPushAsItArrives) {
  const int workers = 3, pushes = 20;
  run_job(2, workers, /*sync=*/false, 100, [&](KVStore& kv) {
    kv.init(1, std::vector<float>(4, 0.0f));
    kv.init(2, std::vector<float>(300, 0.0f));  // split over both servers
    std::vector<float> out(4);
    for (int i = 0; i < pushes; ++i) {
      kv.push(1, std::vector<float>(4, 1.0f));
      kv.push(2, std::vector<float>(300, 2.0f));
    }
    // No round: a worker's own pushes are visible at once, whatever the others do.
    kv.pull(1, out);
    for (float v : out) ASSERT_GE(v, float(pushes));
    kv.barrier();
    kv.pull(1, out);
    for (float v : out) ASSERT_EQ(v, float(workers * pushes));
    std::vector<float> big(300);
    kv.pull(2, big);
    for (float v : big) ASSERT_EQ(v, float(2 * workers * pushes));
  });
}

TEST(PsCluster, ServerSideOptimizerMatchesTheLocalStoresUpdate) {
  const OptimizerSpec spec = OptimizerSpec::parse("sgd lr=0.1 momentum=0.9 wd=0.01");
  std::vector<float> dist_result(8);
  run_job(2, 2, true, 4, [&](KVStore& kv) {
    kv.init(0, std::vector<float>(8, 1.0f));
    kv.set_optimizer(spec);
    std::vector<float> out(8);
    for (int step = 0; step < 5; ++step) {
      kv.pushpull(0, std::vector<float>(8, 0.5f * float(kv.rank() + 1) + float(step)), out);
    }
    if (kv.rank() == 0) dist_result = out;
  });
  auto local = KVStore::create("local");
  local->init(0, std::vector<float>(8, 1.0f));
  local->set_optimizer(spec);
  std::vector<float> out(8);
  for (int step = 0; step < 5; ++step) {
    local->pushpull(0, std::vector<float>(8, 0.5f + 1.0f + 2.0f * float(step)), out);  // the sum
  }
  for (size_t i = 0; i < out.size(); ++i) EXPECT_FLOAT_EQ(dist_result[i], out[i]);
}

TEST(PsCluster, Float16PushesAndPullsRoundTrip) {
  run_job(1, 2, true, 100, [&](KVStore& kv) {
    const uint16_t zero[3] = {0, 0, 0};
    kv.init(5, ConstValues(zero, 3));
    const uint16_t one_and_half[3] = {0x3e00, 0x3e00, 0x3e00};  // 1.5
    uint16_t out[3] = {};
    kv.pushpull(5, ConstValues(one_and_half, 3), Values(out, 3));
    for (uint16_t h : out) ASSERT_EQ(h, 0x4200);  // 3.0
  });
}

// Note [Partitions] (src/ps/worker/dist_store.cpp): with partition_bytes 64
// (16 floats) the arrays below are cut into 2, 7 and 63 parts, more parts
// than servers, so parts share a server and travel as requests of their own.
TEST(PsCluster, PartitionedArraysSumExactlyInSyncAsyncAndFloat16WithMorePartsThanServers) {
  const std::vector<size_t> sizes = {10, 17, 100, 1000};
  auto small_parts = [](int, ps::JobConfig& c, std::chrono::milliseconds&) {
    c.partition_bytes = 64;
  };
  for (int servers = 1; servers <= 3; ++servers) {
    SCOPED_TRACE(std::to_string(servers) + " servers");
    const int workers = 3;
    run_job(
        servers, workers, /*sync=*/true, /*bigarray_bound=*/1000000,
        [&](KVStore& kv) {
          for (size_t k = 0; k < sizes.size(); ++k) {
            kv.init(static_cast<int>(k), std::vector<float>(sizes[k], 0.0f));
          }
          for (int step = 0; step < 2; ++step) {
            for (size_t k = 0; k < sizes.size(); ++k) {
              std::vector<float> grad(sizes[k]), out(sizes[k], -1.0f);
              for (size_t i = 0; i < grad.size(); ++i) grad[i] = cluster_grad(kv.rank(), i, step);
              kv.pushpull(static_cast<int>(k), grad, out);
              for (size_t i = 0; i < out.size(); ++i) {
                float want = 0;
                for (int r = 0; r < workers; ++r) want += cluster_grad(r, i, step);
                ASSERT_EQ(out[i], want) << "key " << k << " element " << i << " step " << step;
              }
            }
          }
          // push, barrier, pull: the round's sum, every part
          kv.push(3, std::vector<float>(1000, float(kv.rank() + 1)));
          kv.barrier();
          std::vector<float> got(1000, -1.0f);
          kv.pull(3, got);
          for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 6.0f) << "element " << i;
          // fp16: 40 values are 160 bytes as fp32, so 3 parts of 2-byte values
          std::vector<uint16_t> zero(40, 0), half(40, 0x3c00), out16(40, 0);  // 1.0
          kv.init(9, ConstValues(zero.data(), zero.size()));
          kv.pushpull(9, ConstValues(half.data(), half.size()), Values(out16.data(), out16.size()));
          for (uint16_t h : out16) ASSERT_EQ(h, 0x4200);  // 3.0
        },
        small_parts);
  }
  // dist_async: each push applied as it arrives, part by part
  run_job(
      2, 2, /*sync=*/false, 1000000,
      [&](KVStore& kv) {
        kv.init(1, std::vector<float>(300, 0.0f));
        for (int i = 0; i < 5; ++i) kv.push(1, std::vector<float>(300, 2.0f));
        kv.barrier();
        std::vector<float> out(300);
        kv.pull(1, out);
        for (float v : out) ASSERT_EQ(v, 20.0f);
      },
      small_parts);
}

// Note [Partitions]: part sizes at most partition_bytes, parts dealt
// round-robin, so each server receives the same bytes within one part; with
// partition_bytes 0 the same array is MXNet's: all of it on one server.
TEST(PsCluster, PartitionsDealAnArraysBytesEvenlyOverTheServersAndZeroKeepsMxnetsPlacement) {
  constexpr int kServers = 4;
  for (size_t partition : {size_t{400}, size_t{0}}) {
    SCOPED_TRACE("partition_bytes " + std::to_string(partition));
    std::mutex mu;
    std::map<int, std::vector<size_t>> parts;  // server rank -> pushed part sizes
    auto node_setup = [&](ps::NodeOptions& o) {
      if (o.role != ps::Role::kServer) return;
      o.before_data = [&](const ps::Message& msg) {
        // the pushpull (init's push from rank 0 is not counted)
        if (!msg.meta.push || !msg.meta.pull || msg.data.size() < 2) return;
        if (msg.data[0].size() != 8) return;
        uint64_t ps_key = 0;
        std::memcpy(&ps_key, msg.data[0].data(), 8);
        const int server = static_cast<int>(ps_key / (UINT64_MAX / kServers));
        std::lock_guard<std::mutex> lock(mu);
        parts[server].push_back(msg.data[1].size());
      };
    };
    run_job(
        kServers, 1, /*sync=*/true, /*bigarray_bound=*/1000000,
        [&](KVStore& kv) {
          kv.init(0, std::vector<float>(1000, 0.0f));  // 4000 bytes: 10 parts of 400
          std::vector<float> out(1000);
          kv.pushpull(0, std::vector<float>(1000, 1.0f), out);
          for (float v : out) ASSERT_EQ(v, 1.0f);
        },
        [&](int, ps::JobConfig& c, std::chrono::milliseconds&) { c.partition_bytes = partition; },
        node_setup);
    std::lock_guard<std::mutex> lock(mu);
    if (partition == 0) {
      ASSERT_EQ(parts.size(), 1u);  // (0 * 9973) mod 4: server 0, as MXNet
      EXPECT_EQ(parts[0], std::vector<size_t>({4000}));
      continue;
    }
    ASSERT_EQ(parts.size(), static_cast<size_t>(kServers));
    size_t total = 0;
    for (const auto& [server, sizes] : parts) {
      EXPECT_GE(sizes.size(), 2u) << "server " << server;  // 10 parts over 4: 3, 3, 2, 2
      EXPECT_LE(sizes.size(), 3u) << "server " << server;
      for (size_t b : sizes) {
        EXPECT_EQ(b, 400u) << "server " << server;
        total += b;
      }
    }
    EXPECT_EQ(total, 4000u);
  }
}

TEST(PsCluster, APartitionedKeyAbove2To20IsRefusedNamingTheKeyAndTheOption) {
  run_job(1, 1, true, 1000000, [&](KVStore& kv) {
    try {
      kv.init(1 << 20, std::vector<float>(100000, 0.0f));  // 400 KB: partitioned
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("key 1048576"), std::string::npos) << what;
      EXPECT_NE(what.find("partition_bytes"), std::string::npos) << what;
      EXPECT_NE(what.find("DTRAIN_KVSTORE_PARTITION_BYTES"), std::string::npos) << what;
    }
    kv.init(1 << 20, std::vector<float>(10, 0.0f));  // small arrays keep MXNet's placement
  });
  // A small array's key equal to a partition's server key is refused, not mixed in:
  // key 0's second part is server key 0 + 2^20 on the only server.
  run_job(1, 1, true, 1000000, [&](KVStore& kv) {
    kv.init(0, std::vector<float>(100000, 0.0f));  // 400 KB: 2 parts
    try {
      kv.init(1 << 20, std::vector<float>(10, 0.0f));
      FAIL() << "no error";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("key 1048576 and key 0 would share server key 1048576"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("DTRAIN_KVSTORE_PARTITION_BYTES"), std::string::npos) << what;
    }
  });
}

// Note [Pushed arrays]: with an owner the push's frames share the caller's
// bytes. With recovery on a worker keeps each request's messages until the
// servers answer, and a dist_sync push is answered only when every worker
// has pushed, so between worker 0's push and worker 1's the owner is held by
// worker 0's messages (a copy would not hold it); once the round is done
// every reference is dropped and the sum is right.
TEST(PsCluster, APushWithAnOwnerSendsTheCallersBytesInPlaceAndReleasesTheOwnerWhenAnswered) {
  const std::string dir = ::testing::TempDir() + "ps_owner_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::atomic<bool> pushed{false};
  std::atomic<long> held{-1};
  run_job(
      2, 2, /*sync=*/true, 1000000,
      [&](KVStore& kv) {
        constexpr size_t n = 300000;  // 1.2 MB: 5 parts of at most 256 KB
        kv.init(0, std::vector<float>(n, 0.0f));
        auto data = std::make_shared<std::vector<float>>(n, float(kv.rank() + 1));
        std::weak_ptr<std::vector<float>> weak = data;
        std::vector<float> out(n, -1.0f);
        {
          ConstValues values(*data);
          values.owner = data;
          if (kv.rank() == 1) {
            while (!pushed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          KVHandle h = kv.pushpull_async(0, values, Values(out));
          if (kv.rank() == 0) {
            held = weak.use_count() - 2;  // beyond `data` and `values.owner`
            pushed = true;
          }
          h.wait(kv.timeout());
        }
        data.reset();
        for (int i = 0; i < 500 && !weak.expired(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        EXPECT_TRUE(weak.expired()) << "worker " << kv.rank() << " still holds the pushed array";
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 3.0f) << "element " << i;
      },
      {}, [&](ps::NodeOptions& o) { o.snapshot_dir = dir; });
  EXPECT_GE(held.load(), 5) << "worker 0's 5 part messages did not share the pushed array";
  std::filesystem::remove_all(dir);
}

TEST(PsCluster, TwoBitCompressedPushesSumWhatEachWorkersResidualReleases) {
  const int workers = 2, steps = 6;
  const size_t n = 100;  // split over both servers on multiples of 16 (bound 40)
  auto grad_of = [](int rank, size_t i) {
    return 0.1f * float(i % 7) - 0.3f + 0.05f * float(rank);
  };
  // Reference: each worker's quantizer, run here on its own residual.
  std::vector<std::vector<float>> want(steps, std::vector<float>(n, 0.0f));
  for (int r = 0; r < workers; ++r) {
    std::vector<float> residual(n, 0.0f), grad(n), sent(n);
    std::vector<char> bytes(ps::compressed_floats(n) * 4);
    for (size_t i = 0; i < n; ++i) grad[i] = grad_of(r, i);
    for (int step = 0; step < steps; ++step) {
      // Parts start on multiples of 16, so quantizing part by part is quantizing the whole.
      ps::quantize_2bit(grad.data(), residual.data(), n, 0.5f, bytes.data());
      ps::dequantize_2bit(bytes.data(), n, 0.5f, sent.data());
      for (size_t i = 0; i < n; ++i) want[step][i] += sent[i];
    }
  }
  run_job(2, workers, true, 40, [&](KVStore& kv) {
    kv.set_gradient_compression({GradientCompressionType::k2Bit, 0.5f});
    kv.init(9, std::vector<float>(n, 0.0f));
    std::vector<float> grad(n), out(n);
    for (size_t i = 0; i < n; ++i) grad[i] = grad_of(kv.rank(), i);
    for (int step = 0; step < steps; ++step) {
      kv.pushpull(9, grad, out);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], want[step][i]) << "step " << step << " element " << i;
    }
  });
}

TEST(PsCluster, APushThatNoOtherWorkerMatchesTimesOutNamingTheKey) {
  run_job(1, 2, true, 100, [&](KVStore& kv) {
    kv.init(4, std::vector<float>(3, 0.0f));
    if (kv.rank() == 0) {
      try {
        kv.push_async(4, std::vector<float>(3, 1.0f)).wait(std::chrono::milliseconds(500));
        ADD_FAILURE() << "the round completed without worker 1";
      } catch (const TimeoutError& e) {
        EXPECT_NE(
            std::string(e.what()).find("push of key 4 (on server 0) did not complete within 0.5 s"),
            std::string::npos)
            << e.what();
      }
    }
    kv.barrier();
    if (kv.rank() == 1) kv.push(4, std::vector<float>(3, 2.0f));  // completes the round
    kv.barrier();
    std::vector<float> out(3);
    kv.pull(4, out);
    EXPECT_EQ(out, (std::vector<float>(3, 3.0f)));
  });
}

TEST(PsCluster, AWorkerFailingWithAnExceptionEndsTheJobForTheOthersNamingIt) {
  const int port = testing::free_port();
  auto opts = [&](ps::Role role) {
    auto o = testing::node_options(role, port, 1, 2);
    o.heartbeat_interval = std::chrono::milliseconds(200);
    o.heartbeat_timeout = std::chrono::milliseconds(1000);
    return o;
  };
  std::string scheduler_error, server_error, survivor_error;
  auto catch_text = [](const std::function<void()>& fn, std::string* out) {
    try {
      fn();
    } catch (const PeerLostError& e) {
      *out = e.what();
    }
  };
  std::thread scheduler([&] {
    catch_text([&] { ps::run_scheduler(opts(ps::Role::kScheduler)); }, &scheduler_error);
  });
  std::thread server(
      [&] { catch_text([&] { ps::run_server(opts(ps::Role::kServer)); }, &server_error); });
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      ps::JobConfig c;
      c.node = opts(ps::Role::kWorker);
      c.node.worker_id = w;
      try {
        auto kv = ps::connect_worker(c, true, std::chrono::seconds(30));
        kv->init(0, std::vector<float>(2, 0.0f));
        if (w == 1) throw std::runtime_error("worker 1's own bug");  // kv is destroyed unwinding
        std::vector<float> out(2);
        for (int step = 0; step < 1000; ++step) kv->pushpull(0, std::vector<float>(2, 1.0f), out);
      } catch (const PeerLostError& e) {
        survivor_error = e.what();
      } catch (const std::runtime_error&) {
      }
    });
  }
  for (auto& t : workers) t.join();
  scheduler.join();
  server.join();
  for (const std::string* text : {&survivor_error, &scheduler_error, &server_error}) {
    EXPECT_NE(text->find("worker 1 (127.0.0.1:"), std::string::npos) << *text;
  }
}

TEST(PsCluster, AWorkerThatFinishesEarlyDoesNotHangTheOthers) {
  // Rank 0 runs 5 steps, ranks 1 and 2 run 6 (an uneven last epoch). Round k
  // sums the pushes of the workers still running: r + 1 from each.
  run_job(2, 3, true, 50, [&](KVStore& kv) {
    kv.init(1, std::vector<float>(80, 0.0f));  // split over both servers
    std::vector<float> out(80);
    auto steps_of = [](int rank) { return rank == 0 ? 5 : 6; };
    const int steps = steps_of(kv.rank());
    for (int k = 0; k < steps; ++k) {
      kv.pushpull(1, std::vector<float>(80, float(kv.rank() + 1)), out);
      float want = 0;
      for (int r = 0; r < 3; ++r) want += steps_of(r) > k ? float(r + 1) : 0.0f;
      for (float v : out) ASSERT_EQ(v, want) << "rank " << kv.rank() << " step " << k;
    }
    if (kv.rank() > 0) kv.barrier();  // the workers still running meet without rank 0
  });
}

TEST(PsCluster, CreateRejectsUnknownTypesWithTheList) {
  try {
    KVStore::create("dist_snyc");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("local, dist_sync, dist_async, dist_device_sync"),
              std::string::npos)
        << e.what();
  }
}

TEST(PsCluster, LocalStoreStoresThePushAndChecksSizes) {
  auto kv = KVStore::create("local");
  EXPECT_EQ(kv->type(), "local");
  kv->init(1, std::vector<float>{1, 2});
  kv->push(1, std::vector<float>{5, 6});
  std::vector<float> out(2);
  kv->pull(1, out);
  EXPECT_EQ(out, (std::vector<float>{5, 6}));
  std::vector<float> wrong(3);
  EXPECT_THROW(kv->pull(1, wrong), InvalidArgument);
  EXPECT_THROW(kv->pull(2, out), InvalidArgument);
}

TEST(PsCluster, WorkerStartedBeforeTheSchedulerWaitsForIt) {
  const int port = testing::free_port();
  std::exception_ptr err;
  std::thread late_job([&] {
    try {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      std::thread server(
          [&] { ps::run_server(testing::node_options(ps::Role::kServer, port, 1, 1)); });
      ps::run_scheduler(testing::node_options(ps::Role::kScheduler, port, 1, 1));
      server.join();
    } catch (...) {
      err = std::current_exception();
    }
  });
  ps::JobConfig c;
  c.node = testing::node_options(ps::Role::kWorker, port, 1, 1);
  std::vector<std::string> logged;
  c.node.log = [&](const std::string& line) { logged.push_back(line); };
  c.node.connect_timeout = std::chrono::seconds(20);
  auto kv = ps::connect_worker(c, true, std::chrono::seconds(20));
  kv->init(0, std::vector<float>{1});
  kv->close();
  late_job.join();
  if (err) std::rethrow_exception(err);
}

// The wait is logged every 5 s (kWaitLogPeriod), so it lasts a little longer.
TEST(PsCluster, WorkerWithoutASchedulerLogsItsWaitThenFailsNamingTheAddressItTried) {
  const int port = testing::free_port();
  ps::JobConfig c;
  c.node = testing::node_options(ps::Role::kWorker, port, 1, 1);
  c.node.connect_timeout = std::chrono::milliseconds(5600);
  std::vector<std::string> logged;
  std::mutex mu;
  c.node.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    logged.push_back(line);
  };
  try {
    ps::connect_worker(c, true, std::chrono::seconds(5));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(cat_port(port)), std::string::npos) << e.what();
  }
  std::lock_guard<std::mutex> lock(mu);
  bool waited = false;
  for (const auto& line : logged) {
    waited =
        waited || line.find("waiting for the scheduler at " + cat_port(port)) != std::string::npos;
  }
  EXPECT_TRUE(waited) << "no 'waiting for the scheduler' line in " << logged.size() << " lines";
}

TEST(PsCluster, AHostNameSchedulerAddressIsResolvedForBinding) {
  addrinfo* found = nullptr;
  if (getaddrinfo("localhost", nullptr, nullptr, &found) != 0) {
    GTEST_SKIP() << "the name localhost does not resolve here (no /etc/hosts entry)";
  }
  freeaddrinfo(found);
  const int port = testing::free_port();
  auto opts = [&](ps::Role role) {
    auto o = testing::node_options(role, port, 1, 1);
    o.scheduler_host = "localhost";
    return o;
  };
  std::exception_ptr err;
  std::thread scheduler([&] {
    try {
      ps::run_scheduler(opts(ps::Role::kScheduler));
    } catch (...) {
      err = std::current_exception();
    }
  });
  std::thread server([&] { ps::run_server(opts(ps::Role::kServer)); });
  ps::JobConfig c;
  c.node = opts(ps::Role::kWorker);
  auto kv = ps::connect_worker(c, true, std::chrono::seconds(20));
  kv->init(0, std::vector<float>{2});
  kv->close();
  scheduler.join();
  server.join();
  if (err) std::rethrow_exception(err);
}

TEST(PsCluster, WorkersGetTheRanksTheyAskForWithDmlcWorkerId) {
  const int port = testing::free_port();
  std::thread scheduler(
      [&] { ps::run_scheduler(testing::node_options(ps::Role::kScheduler, port, 1, 3)); });
  std::thread server([&] { ps::run_server(testing::node_options(ps::Role::kServer, port, 1, 3)); });
  std::vector<int> ranks(3, -1);
  std::vector<std::thread> workers;
  for (int wish : {2, 0, 1}) {
    workers.emplace_back([&, wish] {
      ps::JobConfig c;
      c.node = testing::node_options(ps::Role::kWorker, port, 1, 3);
      c.node.worker_id = wish;
      auto kv = ps::connect_worker(c, true, std::chrono::seconds(20));
      ranks[wish] = kv->rank();
      kv->close();
    });
  }
  for (auto& t : workers) t.join();
  scheduler.join();
  server.join();
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2}));
}

TEST(PsCluster, SchedulerPortInUseIsNamed) {
  const int port = testing::free_port();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ::listen(fd, 1);
  try {
    ps::run_scheduler(testing::node_options(ps::Role::kScheduler, port, 1, 1));
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(cat_port(port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pick a free DMLC_PS_ROOT_PORT"), std::string::npos)
        << e.what();
  }
  ::close(fd);
}

}  // namespace
}  // namespace dtrain
