// Whole jobs on loopback, every node a thread: dist_sync sums, dist_async,
// key placement, the local store, start-up failures.
#include <gtest/gtest.h>
#include <netdb.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <numeric>

#include "dtrain/errors.h"
#include "ps/cluster.h"
#include "ps/wire/compression.h"

namespace dtrain {
namespace {

using testing::run_job;

std::string cat_port(int port) { return "127.0.0.1:" + std::to_string(port); }

// The value worker `rank` pushes for element i of a key at step `step`: small
// integers, so float sums are exact.
float grad_value(int rank, size_t i, int step) {
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
            for (size_t i = 0; i < grad.size(); ++i) grad[i] = grad_value(kv.rank(), i, step);
            kv.pushpull(static_cast<int>(k) * 7, grad, out);
            for (size_t i = 0; i < out.size(); ++i) {
              float want = 0;
              for (int r = 0; r < workers; ++r) want += grad_value(r, i, step);
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
