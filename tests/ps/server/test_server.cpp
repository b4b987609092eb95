// The kvstore server's semantics, driven with messages and no network.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ps/server/server.h"
#include "ps/wire/compression.h"
#include "ps/wire/half.h"

namespace dtrain::ps {
namespace {

struct Sent {
  int to;
  Message msg;
};

class ServerHarness {
 public:
  explicit ServerHarness(int workers, int rank = 0, int servers = 1)
      : server({rank, servers, workers},
               [this](int to, const Message& m) {
                 sent.push_back({to, m});
               }),
        begin(key_range_begin(rank, servers)) {}

  Message request(int worker, bool push, bool pull, int key, const std::vector<float>& vals) {
    Message m;
    m.meta.sender = worker_rank_to_id(worker);
    m.meta.request = true;
    m.meta.push = push;
    m.meta.pull = pull;
    m.meta.app_id = 0;
    m.meta.customer_id = 0;
    m.meta.timestamp = ++ts;
    m.meta.head = data_command(0, kMshadowFloat32);
    const uint64_t k = begin + static_cast<uint64_t>(key);
    m.add_data(&k, 1, DataType::kUint64);
    static const char kNothing = 0;
    m.add_data(vals.empty() ? &kNothing : reinterpret_cast<const char*>(vals.data()),
               vals.size() * 4, DataType::kChar);
    if (push) {
      const int32_t len = static_cast<int32_t>(vals.size() * 4);
      m.add_data(&len, 1, DataType::kInt32);
    }
    return m;
  }
  void command(ServerCommand cmd, const std::string& body = "") {
    Message m;
    m.meta.sender = worker_rank_to_id(0);
    m.meta.request = true;
    m.meta.simple_app = true;
    m.meta.head = static_cast<int>(cmd);
    m.meta.body = body;
    m.meta.timestamp = ++ts;
    server.handle(m);
  }
  static std::vector<float> values(const Message& m) {
    std::vector<float> v(m.data.at(1).size() / 4);
    std::memcpy(v.data(), m.data[1].data(), m.data[1].size());
    return v;
  }

  std::vector<Sent> sent;
  KVServer server;
  uint64_t begin;
  int ts = 0;
};

TEST(PsServer, CommandEncodingIsMxnetsCantorPairing) {
  EXPECT_EQ(data_command(0, kMshadowFloat32), 0);
  EXPECT_EQ(data_command(0, kMshadowFloat16), 5);
  EXPECT_EQ(data_command(2, 0), 3);
  int rt = -1, dt = -1;
  ASSERT_TRUE(depair_command(5, &rt, &dt));
  EXPECT_EQ(rt, 0);
  EXPECT_EQ(dt, 2);
  ASSERT_TRUE(depair_command(data_command(1, 4), &rt, &dt));
  EXPECT_EQ(rt, 1);
  EXPECT_EQ(dt, 4);
}

TEST(PsServer, SyncModeAnswersPushesOnlyAfterEveryWorkerPushedThenStoresTheSum) {
  ServerHarness h(3);
  h.command(ServerCommand::kSyncMode);
  h.server.handle(h.request(0, true, false, 4, {0, 0}));  // init
  h.sent.clear();
  h.server.handle(h.request(0, true, false, 4, {1, 2}));
  h.server.handle(h.request(1, true, true, 4, {10, 20}));
  EXPECT_TRUE(h.sent.empty());  // 2 of 3 pushes: nobody answered yet
  h.server.handle(h.request(2, true, false, 4, {100, 200}));
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(h.sent[1].to, worker_rank_to_id(1));
  EXPECT_EQ(ServerHarness::values(h.sent[1].msg), (std::vector<float>{111, 222}));
  EXPECT_TRUE(h.sent[0].msg.data.empty());  // a push-only answer carries no data
  EXPECT_EQ(*h.server.stored(4), (std::vector<float>{111, 222}));
}

// Note [Replies share the stored value]: the harness keeps every reply, as
// ZeroMQ holds one until it is sent; later updates must not change them.
TEST(PsServer, RepliesStillHeldKeepTheValuesTheyAnsweredWithWhileTheKeyIsUpdated) {
  ServerHarness sync(2);
  sync.command(ServerCommand::kSyncMode);
  sync.server.handle(sync.request(0, true, false, 3, {0, 0}));  // init
  sync.sent.clear();
  for (float round = 1; round <= 3; ++round) {  // rounds store the sum: buffers swap
    sync.server.handle(sync.request(0, true, true, 3, {round, 0}));
    sync.server.handle(sync.request(1, true, true, 3, {round, 1}));
  }
  ASSERT_EQ(sync.sent.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const float round = static_cast<float>(i / 2 + 1);
    EXPECT_EQ(ServerHarness::values(sync.sent[i].msg), (std::vector<float>{2 * round, 1}))
        << "reply " << i;
  }

  ServerHarness async(1);
  async.server.handle(async.request(0, true, true, 1, {5}));  // init, answered with 5
  async.server.handle(async.request(0, true, true, 1, {1}));  // in place unless held
  async.command(ServerCommand::kController, "sgd lr=1 momentum=0 wd=0 rescale_grad=1");
  async.server.handle(async.request(0, true, true, 1, {2}));  // the optimizer: 6 - 2
  ASSERT_EQ(async.sent.size(), 4u);
  EXPECT_EQ(ServerHarness::values(async.sent[0].msg), std::vector<float>{5});
  EXPECT_EQ(ServerHarness::values(async.sent[1].msg), std::vector<float>{6});
  EXPECT_EQ(ServerHarness::values(async.sent[3].msg), std::vector<float>{4});
  EXPECT_EQ(*async.server.stored(1), std::vector<float>{4});
}

TEST(PsServer, AsyncModeAppliesEachPushAtOnce) {
  ServerHarness h(3);
  h.server.handle(h.request(0, true, false, 1, {5}));  // init
  h.server.handle(h.request(1, true, false, 1, {1}));
  EXPECT_EQ(*h.server.stored(1), std::vector<float>{6});
  h.server.handle(h.request(2, true, true, 1, {2}));
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(ServerHarness::values(h.sent[2].msg), std::vector<float>{8});
}

TEST(PsServer, OptimizerSpecRunsSgdWithMomentumAndWeightDecayOnTheSum) {
  ServerHarness h(2);
  h.command(ServerCommand::kSyncMode);
  h.command(ServerCommand::kController, "sgd lr=0.5 momentum=0.9 wd=0.1 rescale_grad=0.5");
  h.server.handle(h.request(0, true, false, 0, {1.0f}));  // w = 1
  for (int step = 0; step < 2; ++step) {
    h.server.handle(h.request(0, true, false, 0, {1.0f}));
    h.server.handle(h.request(1, true, false, 0, {3.0f}));
  }
  // Reference: g = 0.5*(1+3) = 2; mom = 0.9 mom - 0.5 (g + 0.1 w); w += mom.
  double w = 1, mom = 0;
  for (int step = 0; step < 2; ++step) {
    mom = 0.9 * mom - 0.5 * (2.0 + 0.1 * w);
    w += mom;
  }
  EXPECT_NEAR((*h.server.stored(0))[0], w, 1e-6);
}

TEST(PsServer, OptimizerStateRequestsReadAndReplaceTheMomentumAndTheUpdateCount) {
  EXPECT_EQ(data_command(kRequestOptimizerState, kMshadowFloat32), 5050);
  EXPECT_EQ(data_command(kRequestOptimizerState, kMshadowFloat16), 5255);
  ServerHarness h(1);
  h.command(ServerCommand::kSyncMode);
  h.command(ServerCommand::kController, "sgd lr=0.5 momentum=0.9");
  auto state = [&h](bool push, int key, const std::vector<float>& vals, const std::string& body) {
    Message m = h.request(0, push, !push, key, vals);
    m.meta.head = data_command(kRequestOptimizerState, kMshadowFloat32);
    m.meta.body = body;
    h.server.handle(m);
    return h.sent.back().msg;
  };
  h.server.handle(h.request(0, true, false, 0, {1.0f, 2.0f}));  // init
  Message got = state(false, 0, {}, "");
  EXPECT_EQ(ServerHarness::values(got), (std::vector<float>{0, 0}));  // before any update
  EXPECT_EQ(got.meta.body, "0");
  h.server.handle(h.request(0, true, false, 0, {1.0f, 1.0f}));  // mom = -0.5 g; w += mom
  got = state(false, 0, {}, "");
  EXPECT_EQ(ServerHarness::values(got), (std::vector<float>{-0.5f, -0.5f}));
  EXPECT_EQ(got.meta.body, "1");

  got = state(true, 0, {0.25f, -1.0f}, "7");
  EXPECT_EQ(got.meta.body, "");  // acknowledged
  EXPECT_TRUE(got.data.empty());
  got = state(false, 0, {}, "");
  EXPECT_EQ(ServerHarness::values(got), (std::vector<float>{0.25f, -1.0f}));
  EXPECT_EQ(got.meta.body, "7");
  // The next update continues from the pushed momentum: mom = 0.9 mom.
  h.server.handle(h.request(0, true, false, 0, {0.0f, 0.0f}));
  EXPECT_FLOAT_EQ((*h.server.stored(0))[0], 0.5f + static_cast<float>(0.9 * 0.25f));
  EXPECT_FLOAT_EQ((*h.server.stored(0))[1], 1.5f + static_cast<float>(0.9 * -1.0f));
  EXPECT_EQ(state(false, 0, {}, "").meta.body, "8");

  EXPECT_NE(state(false, 4, {}, "")
                .meta.body.find("optimizer state of key 4: the key is not "
                                "initialised"),
            std::string::npos);
  EXPECT_NE(state(true, 0, {1, 2, 3}, "1").meta.body.find("holds 2 values here but the push has 3"),
            std::string::npos);
  EXPECT_NE(state(true, 0, {1, 2}, "x").meta.body.find("the body 'x' is not an update count"),
            std::string::npos);
  EXPECT_EQ(state(false, 0, {}, "").meta.body, "8");  // the refusals changed nothing
}

TEST(PsServer, Float16CommandsAreConvertedToTheFp32MasterCopy) {
  ServerHarness h(1);
  Message m = h.request(0, true, true, 2, {});
  m.meta.head = data_command(0, kMshadowFloat16);
  const uint16_t half[2] = {float_to_half(1.5f), float_to_half(-2.0f)};
  const int32_t len = 4;
  m.data[1] = Frame(reinterpret_cast<const char*>(half), 4);
  m.data.at(2) = Frame(reinterpret_cast<const char*>(&len), 4);
  h.server.handle(m);
  ASSERT_NE(h.server.stored(2), nullptr);
  EXPECT_EQ(*h.server.stored(2), (std::vector<float>{1.5f, -2.0f}));
  ASSERT_EQ(h.sent.size(), 1u);
  ASSERT_EQ(h.sent[0].msg.data.at(1).size(), 4u);  // answered in fp16
  EXPECT_EQ(half_to_float(*reinterpret_cast<const uint16_t*>(h.sent[0].msg.data[1].data())), 1.5f);
}

TEST(PsServer, PsLiteFloatClientsGetTheAccumulatingDefaultHandle) {
  ServerHarness h(2);
  Message push;
  push.meta.sender = 9;
  push.meta.request = true;
  push.meta.push = true;
  push.meta.timestamp = 1;
  const uint64_t keys[2] = {3, 1ull << 60};
  const float vals[2] = {1.5f, 2.0f};
  push.add_data(keys, 2, DataType::kUint64);
  push.add_data(vals, 2, DataType::kFloat);
  h.server.handle(push);
  h.server.handle(push);
  Message pull = push;
  pull.meta.push = false;
  pull.meta.pull = true;
  pull.data[1] = Frame();
  h.server.handle(pull);
  ASSERT_EQ(h.sent.size(), 3u);
  EXPECT_EQ(ServerHarness::values(h.sent[2].msg), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(h.sent[2].msg.meta.data_type[1], DataType::kFloat);
}

TEST(PsServer, BadRequestsAreRefusedWithAReasonInTheBody) {
  ServerHarness h(1);
  h.server.handle(h.request(0, false, true, 3, {}));  // pull before init
  ASSERT_EQ(h.sent.size(), 1u);
  EXPECT_NE(h.sent[0].msg.meta.body.find("key 3 is not initialised"), std::string::npos)
      << h.sent[0].msg.meta.body;
  EXPECT_EQ(h.sent[0].msg.meta.timestamp, h.ts);
  Message bad = h.request(0, true, false, 3, {1, 2});
  bad.meta.head = data_command(2, 0);  // compressed
  h.server.handle(bad);
  EXPECT_NE(h.sent.back().msg.meta.body.find("compressed"), std::string::npos);
  h.command(ServerCommand::kController, "adam lr=1");
  EXPECT_NE(h.sent.back().msg.meta.body.find("unknown optimizer 'adam'"), std::string::npos)
      << h.sent.back().msg.meta.body;
}

TEST(PsServer, MutatedRequestsNeverCrashTheServer) {
  ServerHarness h(2);
  h.command(ServerCommand::kSyncMode);
  h.server.handle(h.request(0, true, false, 0, {1, 2, 3}));
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) {
    Message m = h.request(rng() % 2, rng() % 2, rng() % 2, static_cast<int>(rng() % 3), {1, 2, 3});
    switch (rng() % 5) {
      case 0: {
        Frame& f = m.data[rng() % m.data.size()];
        std::string bytes(f.view());
        bytes.resize(rng() % 20);
        f = Frame(std::move(bytes));
        break;
      }
      case 1:
        m.meta.head = static_cast<int>(rng()) - 1000;
        break;
      case 2:
        m.meta.data_type.resize(rng() % 4, DataType::kOther);
        break;
      case 3:
        m.data.resize(rng() % 5);
        break;
      default:
        m.meta.simple_app = true;
        m.meta.head = static_cast<int>(rng() % 8);
        m.meta.body = "x";
    }
    h.server.handle(m);
  }
  SUCCEED();
}

TEST(PsServer, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  for (int h = 0; h < 0x7c00; ++h) ASSERT_EQ(float_to_half(half_to_float(h)), h) << h;
}

}  // namespace
}  // namespace dtrain::ps

namespace dtrain::ps {
namespace {

TEST(PsCompression, TwoBitQuantizationMatchesMxnetsBitLayoutAndKeepsTheResidual) {
  const float grad[5] = {0.6f, -0.7f, 0.2f, 0.0f, 1.2f};
  float residual[5] = {};
  char out[4];
  quantize_2bit(grad, residual, 5, 0.5f, out);
  // values 0..3 in byte 0 (bits 7-6, 5-4, 3-2, 1-0), value 4 in byte 1.
  EXPECT_EQ(static_cast<uint8_t>(out[0]), 0xc0 | 0x20);  // +t, -t, 0, 0
  EXPECT_EQ(static_cast<uint8_t>(out[1]), 0xc0);         // +t
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(out[3], 0);
  EXPECT_FLOAT_EQ(residual[0], 0.1f);
  EXPECT_FLOAT_EQ(residual[1], -0.2f);
  EXPECT_FLOAT_EQ(residual[2], 0.2f);
  EXPECT_FLOAT_EQ(residual[4], 0.7f);
  float back[5];
  dequantize_2bit(out, 5, 0.5f, back);
  EXPECT_EQ(std::vector<float>(back, back + 5), (std::vector<float>{0.5f, -0.5f, 0, 0, 0.5f}));
  EXPECT_EQ(compressed_floats(16), 1u);
  EXPECT_EQ(compressed_floats(17), 2u);
  EXPECT_EQ(encode_compression_params(kCompressionTwoBit, 0.5f), "2,0.500000");
  int type = 0;
  float t = 0;
  ASSERT_TRUE(decode_compression_params("2,0.25", &type, &t));
  EXPECT_EQ(type, 2);
  EXPECT_EQ(t, 0.25f);
  EXPECT_FALSE(decode_compression_params("2,-1", &type, &t));
}

}  // namespace
}  // namespace dtrain::ps
