// Malformed frames over the network never crash or hang a server or the
// scheduler: a stranger's DEALER sends garbage and mutated valid messages,
// then the real job still computes exact sums and ends cleanly.
#include <zmq.h>

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "ps/cluster.h"
#include "ps/server/server.h"
#include "ps/wire/protocol.h"

namespace dtrain {
namespace {

void send_garbage(void* ctx, int port, const std::string& identity, std::mt19937& rng, int count) {
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  if (!identity.empty()) zmq_setsockopt(s, ZMQ_ROUTING_ID, identity.data(), identity.size());
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
  const std::string addr = "tcp://127.0.0.1:" + std::to_string(port);
  zmq_connect(s, addr.c_str());
  ps::Message valid;
  valid.meta.request = true;
  valid.meta.push = true;
  valid.meta.head = 0;
  valid.meta.app_id = 0;
  valid.meta.customer_id = 0;
  valid.meta.timestamp = 1;
  const uint64_t key = 0;
  const float vals[4] = {1, 2, 3, 4};
  const int32_t len = 16;
  valid.add_data(&key, 1, ps::DataType::kUint64);
  valid.add_data(reinterpret_cast<const char*>(vals), 16, ps::DataType::kChar);
  valid.add_data(&len, 1, ps::DataType::kInt32);
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> frames;
    if (i % 3 == 0) {  // random frames
      const int n = static_cast<int>(rng() % 6);
      for (int f = 0; f < n; ++f) {
        std::string b(rng() % 40, '\0');
        for (auto& c : b) c = static_cast<char>(rng());
        frames.push_back(b);
      }
    } else {  // a valid message, mutated
      ps::Meta m = valid.meta;
      if (i % 3 == 1) {
        m.control.cmd = static_cast<ps::Command>(rng() % 7);
        m.control.barrier_group = static_cast<int>(rng() % 9);
        m.control.node.push_back(ps::NodeInfo{ps::Role::kWorker, 9, "127.0.0.1", 1, false, 0});
      }
      std::string meta = ps::encode_meta(m);
      for (int k = 0; k < 2; ++k) meta[rng() % meta.size()] ^= static_cast<char>(1 << (rng() % 8));
      frames.push_back(meta);
      for (size_t d = 0; d < rng() % 5; ++d) frames.emplace_back(valid.data[d % 3].view());
    }
    if (frames.empty()) frames.push_back("");
    for (size_t f = 0; f < frames.size(); ++f) {
      zmq_send(s, frames[f].data(), frames[f].size(), f + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }
  zmq_close(s);
}

TEST(PsFuzz, MalformedFramesFromStrangersNeitherCrashNorHangTheJob) {
  const int port = testing::free_port(), server_port = testing::free_port();
  std::exception_ptr sched_err, server_err;
  std::thread scheduler([&] {
    try {
      ps::run_scheduler(testing::node_options(ps::Role::kScheduler, port, 1, 2));
    } catch (...) {
      sched_err = std::current_exception();
    }
  });
  std::thread server([&] {
    try {
      auto o = testing::node_options(ps::Role::kServer, port, 1, 2);
      o.port = server_port;
      ps::run_server(o);
    } catch (...) {
      server_err = std::current_exception();
    }
  });
  std::vector<std::exception_ptr> worker_err(2);
  std::vector<std::thread> workers;
  void* ctx = zmq_ctx_new();
  std::mt19937 rng(11);
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      try {
        ps::JobConfig c;
        c.node = testing::node_options(ps::Role::kWorker, port, 1, 2);
        auto kv = ps::connect_worker(c, true, std::chrono::seconds(20));
        kv->init(0, std::vector<float>(4, 0.0f));
        kv->barrier();  // the fuzzing happens here, on the main thread
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        std::vector<float> out(4);
        for (int step = 0; step < 3; ++step) {
          kv->pushpull(0, std::vector<float>{1, 2, 3, 4}, out);
          ASSERT_EQ(out, (std::vector<float>{2, 4, 6, 8}));
        }
        kv->close();
      } catch (...) {
        worker_err[w] = std::current_exception();
      }
    });
  }
  send_garbage(ctx, server_port, "", rng, 1500);      // unnamed
  send_garbage(ctx, server_port, "ps13", rng, 1500);  // not in the table
  send_garbage(ctx, port, "ps15", rng, 1500);         // at the scheduler
  for (auto& t : workers) t.join();
  scheduler.join();
  server.join();
  zmq_ctx_term(ctx);
  for (auto& e : worker_err) {
    if (e) std::rethrow_exception(e);
  }
  if (sched_err) std::rethrow_exception(sched_err);
  if (server_err) std::rethrow_exception(server_err);
}

}  // namespace
}  // namespace dtrain
