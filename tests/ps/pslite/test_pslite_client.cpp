// PsLiteWorker (dtrain/kvstore_pslite.h): ps-lite's slicer and request
// layout against ranges and bytes written by hand from ps-lite's published
// code (Postoffice::GetServerKeyRanges, KVWorker::DefaultSlicer and Send,
// KVServer::Response; Note [ps-lite's key ranges] and Note [ps-lite's request
// layout] in src/ps/pslite/pslite_client.h), then whole jobs as threads on loopback
// with dtrain's scheduler and servers. No ps-lite needed (test_interop.cpp
// runs ps-lite's own programs).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/kvstore_pslite.h"
#include "ps/cluster.h"
#include "ps/pslite/pslite_client.h"
#include "ps/server/server.h"
#include "ps/wire_bytes.h"

namespace dtrain::ps {
namespace {

using dtrain::testing::node_options;

using dtrain::testing::bytes;

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// test_kv_app.cc's keys: kMaxKey / num * i + rank.
std::vector<uint64_t> test_kv_app_keys(int num, int rank) {
  std::vector<uint64_t> keys(static_cast<size_t>(num));
  for (int i = 0; i < num; ++i) keys[i] = UINT64_MAX / num * static_cast<uint64_t>(i) + rank;
  return keys;
}

std::string invalid_argument_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

TEST(PsLiteClient, KeyRangesSplitTheKeySpaceAsPostofficeDoes) {
  // kMaxKey = 18446744073709551615 = 3 · 6148914691236517205; /2 rounds down.
  const auto one = server_key_ranges(1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].begin, 0u);
  EXPECT_EQ(one[0].end, 18446744073709551615ull);
  const auto two = server_key_ranges(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].end, 9223372036854775807ull);
  EXPECT_EQ(two[1].begin, 9223372036854775807ull);
  EXPECT_EQ(two[1].end, 18446744073709551614ull);
  const auto three = server_key_ranges(3);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[1].begin, 6148914691236517205ull);
  EXPECT_EQ(three[2].begin, 12297829382473034410ull);
  EXPECT_EQ(three[2].end, 18446744073709551615ull);
  // MXNet's client offsets its keys into the same ranges (Note [Key placement]).
  for (int s = 0; s < 3; ++s) EXPECT_EQ(three[s].begin, key_range_begin(s, 3));
}

TEST(PsLiteClient, SlicerCutsTestKvAppsKeysAtTheServersRanges) {
  // kMaxKey / 10000 = 1844674407370955: key 5000 (9223372036854775000) is
  // still below 2 servers' boundary 9223372036854775807, key 5001 is not;
  // with 3 servers keys 0..3333 | 3334..6666 | 6667..9999.
  const auto keys = test_kv_app_keys(10000, 1);
  const auto two = slice_by_key_ranges(keys, keys.size(), {}, 2, "push");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].server_rank, 0);
  EXPECT_EQ(two[0].key_begin, 0u);
  EXPECT_EQ(two[0].key_end, 5001u);
  EXPECT_EQ(two[0].val_end, 5001u);
  EXPECT_EQ(two[1].server_rank, 1);
  EXPECT_EQ(two[1].key_begin, 5001u);
  EXPECT_EQ(two[1].key_end, 10000u);
  EXPECT_EQ(two[1].val_begin, 5001u);
  EXPECT_EQ(two[1].val_end, 10000u);
  const auto three = slice_by_key_ranges(keys, 0, {}, 3, "pull");
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].key_end, 3334u);
  EXPECT_EQ(three[1].key_end, 6667u);
  EXPECT_EQ(three[2].key_end, 10000u);
  EXPECT_EQ(three[2].val_begin, 0u);  // a pull sends no values
  EXPECT_EQ(three[2].val_end, 0u);
}

TEST(PsLiteClient, SlicerSkipsServersWithoutKeysAndCutsValuesByCountOrLengths) {
  const uint64_t s1 = 6148914691236517205ull, s2 = 12297829382473034410ull;
  // Three values per key, no lengths.
  auto sliced = slice_by_key_ranges({1, s1 + 1}, 6, {}, 3, "push");
  ASSERT_EQ(sliced.size(), 2u);
  EXPECT_EQ(sliced[0].val_end, 3u);
  EXPECT_EQ(sliced[1].server_rank, 1);
  EXPECT_EQ(sliced[1].val_begin, 3u);
  EXPECT_EQ(sliced[1].val_end, 6u);
  // Lengths 2, 0, 3: server 1 has no key and gets no message.
  sliced = slice_by_key_ranges({5, 6, s2 + 1}, 5, {2, 0, 3}, 3, "push");
  ASSERT_EQ(sliced.size(), 2u);
  EXPECT_EQ(sliced[0].server_rank, 0);
  EXPECT_EQ(sliced[0].key_end, 2u);
  EXPECT_EQ(sliced[0].val_end, 2u);
  EXPECT_EQ(sliced[1].server_rank, 2);
  EXPECT_EQ(sliced[1].key_begin, 2u);
  EXPECT_EQ(sliced[1].val_begin, 2u);
  EXPECT_EQ(sliced[1].val_end, 5u);
  // Equal keys stay together; no keys, no message.
  sliced = slice_by_key_ranges({7, 7}, 2, {}, 2, "push");
  ASSERT_EQ(sliced.size(), 1u);
  EXPECT_EQ(sliced[0].key_end, 2u);
  EXPECT_TRUE(slice_by_key_ranges({}, 0, {}, 2, "pull").empty());
}

TEST(PsLiteClient, SlicerRefusesWhatPsLitesChecksWouldAbortOn) {
  auto slice = [](std::vector<uint64_t> keys, size_t vals, std::vector<int> lens, int servers) {
    return invalid_argument_text([&] { slice_by_key_ranges(keys, vals, lens, servers, "push"); });
  };
  EXPECT_NE(slice({3, 2}, 2, {}, 1).find("keys must be in ascending order"), std::string::npos);
  EXPECT_NE(slice({1, 18446744073709551614ull}, 2, {}, 2)
                .find("key 18446744073709551614 lies in "
                      "no server's key range"),
            std::string::npos);
  EXPECT_NE(slice({1, 2}, 3, {}, 1).find("push of 2 keys with 3 values"), std::string::npos);
  EXPECT_NE(slice({1, 2}, 3, {3}, 1).find("2 keys with 1 lengths"), std::string::npos);
  EXPECT_NE(slice({1, 2}, 3, {1, 1}, 1).find("the lengths add up to 2 values but 3"),
            std::string::npos);
  EXPECT_NE(slice({1, 2}, 1, {2, -1}, 1).find("length 1 is negative"), std::string::npos);
  EXPECT_NE(slice({}, 1, {}, 1).find("no keys with 1 values"), std::string::npos);
  EXPECT_NE(slice({1}, 1, {}, 0).find("at least one server"), std::string::npos);
}

TEST(PsLiteClient, PushRequestIsLaidOutAsKVWorkerSendsIt) {
  const std::vector<uint64_t> keys = {1, 2, 9223372036854775808ull};
  const std::vector<float> vals = {1.5f, 2.5f, 3.5f};
  const auto slices = slice_by_key_ranges(keys, vals.size(), {}, 2, "push");
  ASSERT_EQ(slices.size(), 2u);
  const Message msg = pslite_request(PsLiteCall{true, false, 0, 3, 0}, slices[0], keys, vals, {});
  // PBMeta: head 0, request, push, simple_app 0, app_id 0, timestamp 3,
  // data_type [UINT64 8, FLOAT 9] packed, customer_id 0, data_size 16 + 8,
  // pull 0, priority 0; then the keys and the values, little-endian.
  EXPECT_EQ(encode_meta(msg.meta),
            bytes({0x08, 0x00, 0x20, 0x01, 0x28, 0x01, 0x30, 0x00, 0x38, 0x00, 0x40, 0x03,
                   0x4a, 0x02, 0x08, 0x09, 0x50, 0x00, 0x58, 0x18, 0x60, 0x00, 0x68, 0x00}));
  ASSERT_EQ(msg.data.size(), 2u);
  EXPECT_EQ(msg.data[0].view(), bytes({1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(msg.data[1].view(),
            bytes({0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x20, 0x40}));  // 1.5, 2.5
  const Message second =
      pslite_request(PsLiteCall{true, false, 0, 3, 0}, slices[1], keys, vals, {});
  EXPECT_EQ(second.data[0].view(), bytes({0, 0, 0, 0, 0, 0, 0, 0x80}));
  EXPECT_EQ(second.data[1].view(), bytes({0x00, 0x00, 0x60, 0x40}));  // 3.5
}

TEST(PsLiteClient, PullRequestCarriesKeysAndAnEmptyFloatFrame) {
  const std::vector<uint64_t> keys = {4};
  const auto slices = slice_by_key_ranges(keys, 0, {}, 1, "pull");
  const Message msg = pslite_request(PsLiteCall{false, true, 7, 9, 0}, slices[0], keys, {}, {});
  // head = cmd 7, push 0, data_type [8, 9], data_size 8, pull 1.
  EXPECT_EQ(encode_meta(msg.meta),
            bytes({0x08, 0x07, 0x20, 0x01, 0x28, 0x00, 0x30, 0x00, 0x38, 0x00, 0x40, 0x09,
                   0x4a, 0x02, 0x08, 0x09, 0x50, 0x00, 0x58, 0x08, 0x60, 0x01, 0x68, 0x00}));
  ASSERT_EQ(msg.data.size(), 2u);
  EXPECT_EQ(msg.data[0].view(), bytes({4, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(msg.data[1].empty());
}

TEST(PsLiteClient, PushPullWithLengthsAddsAnInt32Frame) {
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> vals = {1, 2, 3};
  const std::vector<int> lens = {1, 2};
  const auto slices = slice_by_key_ranges(keys, vals.size(), lens, 1, "pushpull");
  const Message msg = pslite_request(PsLiteCall{true, true, 0, 1, 0}, slices[0], keys, vals, lens);
  // data_type [8, 9, 3], data_size 16 + 12 + 8 = 36, push and pull.
  EXPECT_EQ(encode_meta(msg.meta),
            bytes({0x08, 0x00, 0x20, 0x01, 0x28, 0x01, 0x30, 0x00, 0x38, 0x00, 0x40, 0x01, 0x4a,
                   0x03, 0x08, 0x09, 0x03, 0x50, 0x00, 0x58, 0x24, 0x60, 0x01, 0x68, 0x00}));
  ASSERT_EQ(msg.data.size(), 3u);
  EXPECT_EQ(msg.data[2].view(), bytes({1, 0, 0, 0, 2, 0, 0, 0}));
}

// What ps-lite's KVServer::Response sends for a pull: keys, FLOAT values,
// and lengths when the handle set them.
Message answer(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
               const std::vector<int>& lens = {}) {
  Message a;
  a.meta.request = false;
  a.meta.pull = true;
  a.add_data(keys.data(), keys.size(), DataType::kUint64);
  a.add_data(vals.data(), vals.size(), DataType::kFloat);
  if (!lens.empty()) a.add_data(lens.data(), lens.size(), DataType::kInt32);
  return a;
}

TEST(PsLiteClient, PullAnswersAreCheckedAndConcatenatedInKeyOrder) {
  const uint64_t s1 = 9223372036854775807ull;
  const std::vector<uint64_t> keys = {1, 2, s1 + 3};
  const auto slices = slice_by_key_ranges(keys, 0, {}, 2, "pull");
  std::vector<float> vals;
  std::vector<int> lens;
  const std::vector<Message> answers = {answer({1, 2}, {10, 20, 21}, {1, 2}),
                                        answer({s1 + 3}, {30}, {1})};
  ASSERT_EQ(assemble_pull(keys, slices, answers, &vals, &lens), "");
  EXPECT_EQ(vals, (std::vector<float>{10, 20, 21, 30}));
  EXPECT_EQ(lens, (std::vector<int>{1, 2, 1}));
  // An output of the wrong size, answers that do not fit: nothing written.
  std::vector<float> small(2, -1.0f);
  EXPECT_NE(assemble_pull(keys, slices, answers, &small, nullptr)
                .find("output holds 2 values but the servers answered 4"),
            std::string::npos);
  EXPECT_EQ(small, (std::vector<float>{-1, -1}));
  std::vector<float> out;
  EXPECT_NE(
      assemble_pull(keys, slices, {answer({1}, {10}), answers[1]}, &out, nullptr).find("server 0"),
      std::string::npos);
  EXPECT_NE(
      assemble_pull(keys, slices, {answer({1, 2}, {10, 20}), answer({s1 + 3}, {30})}, &out, &lens)
          .find("answered no length"),
      std::string::npos);
  Message doubles = answer({s1 + 3}, {30});
  doubles.meta.data_type[1] = DataType::kDouble;
  EXPECT_NE(assemble_pull(keys, slices, {answers[0], doubles}, &out, nullptr)
                .find("server 1 answered frame 1 as DOUBLE, expected FLOAT"),
            std::string::npos);
  EXPECT_TRUE(out.empty());
}

TEST(PsLiteClient, CreateRefusesRolesOtherThanWorker) {
  const std::map<std::string, std::string> vars = {{"DMLC_ROLE", "server"},
                                                   {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                                   {"DMLC_PS_ROOT_PORT", "9"},
                                                   {"DMLC_NUM_SERVER", "1"},
                                                   {"DMLC_NUM_WORKER", "1"}};
  auto env = [&](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  EXPECT_NE(invalid_argument_text([&] {
              PsLiteWorker::create({}, env);
            }).find("needs DMLC_ROLE=worker, not server"),
            std::string::npos);
}

// A job on loopback as threads: dtrain's scheduler, `servers` servers (each
// `server(rank)` or dtrain's), and `workers` PsLiteWorkers running `worker`.
// Rethrows the first failure.
using ServerFn = std::function<void(const NodeOptions&)>;
void run_pslite_job(int servers, int workers, const std::function<void(PsLiteWorker&)>& worker,
                    const ServerFn& server = run_server,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const int port = dtrain::testing::free_port();
  std::vector<std::exception_ptr> errors(1 + servers + workers);
  std::vector<std::thread> threads;
  auto guarded = [&](size_t i, std::function<void()> f) {
    threads.emplace_back([&errors, i, f] {
      try {
        f();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  };
  guarded(0, [&] { run_scheduler(node_options(Role::kScheduler, port, servers, workers)); });
  for (int s = 0; s < servers; ++s) {
    guarded(1 + s, [&] { server(node_options(Role::kServer, port, servers, workers)); });
  }
  for (int w = 0; w < workers; ++w) {
    guarded(1 + servers + w, [&] {
      const std::map<std::string, std::string> vars = {
          {"DMLC_ROLE", "worker"},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(port)},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_NUM_WORKER", std::to_string(workers)}};
      auto env = [vars](const std::string& k) -> std::optional<std::string> {
        auto it = vars.find(k);
        return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
      };
      KVStoreOptions options;
      options.timeout = timeout;
      options.connect_timeout = std::chrono::seconds(20);
      options.log = [](const std::string&) {};
      auto kv = PsLiteWorker::create(options, env);
      worker(*kv);
      kv->close();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// test_kv_app.cc's worker: `repeat` pushes (at most 10 in flight), a pull,
// `repeat` pushpulls; the sums are exact (integer values).
void test_kv_app_worker(PsLiteWorker& kv, int num, int repeat) {
  const auto keys = test_kv_app_keys(num, kv.rank());
  std::vector<float> vals(keys.size());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>((i * 7 + kv.rank()) % 1000);
  std::vector<KVHandle> pushes;
  for (int i = 0; i < repeat; ++i) {
    pushes.push_back(kv.push_async(keys, vals));
    if (i > 10) pushes[pushes.size() - 10].wait(kv.timeout());
  }
  for (auto& h : pushes) h.wait(kv.timeout());
  std::vector<float> rets, outs;
  kv.pull(keys, &rets);
  for (int i = 0; i < repeat; ++i) kv.pushpull(keys, vals, &outs);
  ASSERT_EQ(rets.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(rets[i], vals[i] * static_cast<float>(repeat)) << "key " << i;
    ASSERT_EQ(outs[i], vals[i] * static_cast<float>(2 * repeat)) << "key " << i;
  }
}

TEST(PsLiteWorker, AccumulatesLikeTestKvAppOnDtrainsServersForOneToThreeServers) {
  for (int servers = 1; servers <= 3; ++servers) {
    SCOPED_TRACE("servers " + std::to_string(servers));
    run_pslite_job(servers, 2, [](PsLiteWorker& kv) {
      EXPECT_EQ(kv.num_workers(), 2);
      test_kv_app_worker(kv, 1000, 20);
      // Nothing to send: done at once; a key never pushed reads ps-lite's 0.
      std::vector<float> none;
      kv.pull({}, &none);
      EXPECT_TRUE(none.empty());
      std::vector<float> fresh;
      kv.pull({UINT64_MAX / 4 + 12345}, &fresh);
      EXPECT_EQ(fresh, std::vector<float>{0.0f});
      kv.barrier();
    });
  }
}

// A dtrain server that records which keys reach it before serving them.
struct KeyLog {
  std::mutex mu;
  std::map<int, std::set<uint64_t>> keys;  // server rank -> keys received
};

void recording_server(const NodeOptions& options, KeyLog* log, bool answer) {
  Node node(options);
  std::unique_ptr<KVServer> server;
  std::mutex mu;
  node.set_data_handler([&](Message& msg) {
    std::lock_guard<std::mutex> lock(mu);
    if (!server) {
      server = std::make_unique<KVServer>(
          ServerOptions{node.rank(), options.num_servers, options.num_workers},
          [&node](int to, const Message& m) { node.send(to, m); });
    }
    if (!msg.data.empty() && msg.data[0].size() % 8 == 0) {
      std::lock_guard<std::mutex> klock(log->mu);
      for (size_t i = 0; i < msg.data[0].size(); i += 8) {
        uint64_t k = 0;
        std::memcpy(&k, msg.data[0].data() + i, 8);
        log->keys[node.rank()].insert(k);
      }
    }
    if (answer) server->handle(msg);
  });
  node.start();
  node.barrier(kAllGroups, options.connect_timeout);
  node.barrier(kAllGroups, Millis::max());
  node.finish();
}

TEST(PsLiteWorker, EachServerReceivesExactlyTheKeysOfItsRange) {
  KeyLog log;
  const int servers = 3;
  run_pslite_job(
      servers, 1, [](PsLiteWorker& kv) { test_kv_app_worker(kv, 300, 2); },
      [&](const NodeOptions& o) { recording_server(o, &log, true); });
  const auto ranges = server_key_ranges(servers);
  size_t total = 0;
  for (int r = 0; r < servers; ++r) {
    ASSERT_FALSE(log.keys[r].empty()) << "server " << r;
    EXPECT_GE(*log.keys[r].begin(), ranges[r].begin) << "server " << r;
    EXPECT_LT(*log.keys[r].rbegin(), ranges[r].end) << "server " << r;
    total += log.keys[r].size();
  }
  EXPECT_EQ(total, 300u);
}

TEST(PsLiteWorker, APullNoServerAnswersTimesOutNamingTheOperation) {
  KeyLog log;
  std::string text;
  run_pslite_job(
      1, 1,
      [&](PsLiteWorker& kv) {
        std::vector<float> out;
        try {
          kv.pull({1, 2, 3}, &out);
        } catch (const TimeoutError& e) {
          text = e.what();
        }
        EXPECT_TRUE(out.empty());
      },
      [&](const NodeOptions& o) { recording_server(o, &log, false); },
      std::chrono::milliseconds(300));
  EXPECT_NE(text.find("ps-lite pull of 3 keys (server 0) did not complete within 0.3 s"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace dtrain::ps
