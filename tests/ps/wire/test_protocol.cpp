// PBMeta encoding against bytes written by hand from meta.proto's field
// numbers (Note [ps-lite wire format]).
#include <gtest/gtest.h>

#include <random>

#include "ps/wire/protocol.h"
#include "ps/wire_bytes.h"

namespace dtrain::ps {
namespace {

using dtrain::testing::bytes;

// INT_MAX (ps-lite's kEmpty) as a varint.
const std::string kEmptyVarint = bytes({0xff, 0xff, 0xff, 0xff, 0x07});

TEST(PsProtocol, BarrierRequestEncodesAsPsLiteWritesIt) {
  Meta m;
  m.request = true;
  m.app_id = 0;
  m.customer_id = 0;
  m.timestamp = 5;
  m.control.cmd = Command::kBarrier;
  m.control.barrier_group = kWorkerGroup;
  const std::string want = bytes({0x08}) + kEmptyVarint +              // head = kEmpty
                           bytes({0x1a, 0x04, 0x08, 0x03, 0x18, 0x04,  // control{cmd 3, group 4}
                                  0x20, 0x01,                          // request
                                  0x28, 0x00, 0x30, 0x00,              // push, simple_app
                                  0x38, 0x00, 0x40, 0x05,              // app_id 0, timestamp 5
                                  0x50, 0x00, 0x58, 0x00,              // customer_id, data_size
                                  0x60, 0x00, 0x68, 0x00});            // pull, priority
  EXPECT_EQ(encode_meta(m), want);
}

TEST(PsProtocol, AddNodeCarriesTheNodeWithItsFieldNumbers) {
  Meta m;
  m.timestamp = 0;
  m.control.cmd = Command::kAddNode;
  m.control.node.push_back(NodeInfo{Role::kWorker, kEmpty, "127.0.0.1", 4000, false, 0});
  const std::string node = bytes({0x08, 0x01, 0x10}) + kEmptyVarint + bytes({0x1a, 0x09}) +
                           "127.0.0.1" + bytes({0x20, 0xa0, 0x1f, 0x28, 0x00, 0x50, 0x00});
  ASSERT_EQ(node.size(), 26u);
  const std::string control = bytes({0x08, 0x02, 0x12, 0x1a}) + node;
  const std::string want = bytes({0x08}) + kEmptyVarint + bytes({0x1a, 0x1e}) + control +
                           bytes({0x20, 0x00, 0x28, 0x00, 0x30, 0x00, 0x40, 0x00, 0x50}) +
                           kEmptyVarint + bytes({0x58, 0x00, 0x60, 0x00, 0x68, 0x00});
  EXPECT_EQ(encode_meta(m), want);
}

TEST(PsProtocol, PushRequestPacksDataTypesAndCountsDataSize) {
  Message msg;
  msg.meta.head = 5;
  msg.meta.app_id = 0;
  msg.meta.customer_id = 0;
  msg.meta.timestamp = 7;
  msg.meta.request = true;
  msg.meta.push = true;
  const uint64_t key = 1;
  const char vals[16] = {};
  const int32_t len = 16;
  msg.add_data(&key, 1, DataType::kUint64);
  msg.add_data(vals, 16, DataType::kChar);
  msg.add_data(&len, 1, DataType::kInt32);
  const std::string want =
      bytes({0x08, 0x05, 0x20, 0x01, 0x28, 0x01, 0x30, 0x00, 0x38,
             0x00, 0x40, 0x07, 0x4a, 0x03, 0x08, 0x00, 0x03,  // data_type [8,0,3]
             0x50, 0x00, 0x58, 0x1c,                          // data_size 28
             0x60, 0x00, 0x68, 0x00});
  EXPECT_EQ(encode_meta(msg.meta), want);
}

TEST(PsProtocol, NegativeInt32IsATenByteVarint) {
  Meta m;
  m.head = -1;
  const std::string enc = encode_meta(m);
  EXPECT_EQ(enc.substr(0, 11),
            bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  std::string error;
  auto back = decode_meta(enc, &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->head, -1);
}

TEST(PsProtocol, DecodingReversesEncodingOfEveryField) {
  Meta m;
  m.head = 3;
  m.body = std::string("sgd lr=0.1\0x", 12);
  m.request = true;
  m.push = true;
  m.pull = true;
  m.simple_app = true;
  m.app_id = 2;
  m.timestamp = 123456;
  m.data_type = {DataType::kUint64, DataType::kFloat, DataType::kInt32};
  m.customer_id = 4;
  m.data_size = 99;
  m.priority = -3;
  m.control.cmd = Command::kAddNode;
  m.control.node.push_back(NodeInfo{Role::kServer, 8, "10.0.0.2", 9000, true, 1});
  m.control.node.push_back(NodeInfo{Role::kScheduler, 1, "h", 1, false, 0});
  std::string error;
  auto d = decode_meta(encode_meta(m), &error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->head, 3);
  EXPECT_EQ(d->body, m.body);
  EXPECT_TRUE(d->request && d->push && d->pull && d->simple_app);
  EXPECT_EQ(d->app_id, 2);
  EXPECT_EQ(d->timestamp, 123456);
  EXPECT_EQ(d->data_type, m.data_type);
  EXPECT_EQ(d->customer_id, 4);
  EXPECT_EQ(d->data_size, 99);
  EXPECT_EQ(d->priority, -3);
  ASSERT_EQ(d->control.node.size(), 2u);
  EXPECT_EQ(d->control.node[0].role, Role::kServer);
  EXPECT_EQ(d->control.node[0].id, 8);
  EXPECT_EQ(d->control.node[0].hostname, "10.0.0.2");
  EXPECT_EQ(d->control.node[0].port, 9000);
  EXPECT_TRUE(d->control.node[0].is_recovery);
  EXPECT_EQ(d->control.node[0].customer_id, 1);
  EXPECT_EQ(d->control.node[1].role, Role::kScheduler);
}

TEST(PsProtocol, DecoderAcceptsFieldsOutOfOrderAndSkipsUnknownFields) {
  // timestamp 9, an unknown fixed32 field 20, an unknown string field 21, head 4.
  const std::string in =
      bytes({0x40, 0x09, 0xa5, 0x01, 1, 2, 3, 4, 0xaa, 0x01, 0x02, 'h', 'i', 0x08, 0x04});
  std::string error;
  auto d = decode_meta(in, &error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->timestamp, 9);
  EXPECT_EQ(d->head, 4);
  EXPECT_EQ(d->app_id, kEmpty);  // absent
  EXPECT_TRUE(d->control.empty());
}

TEST(PsProtocol, DecoderRejectsTruncatedAndOverlongInputWithAReason) {
  std::string error;
  EXPECT_FALSE(decode_meta(bytes({0x08, 0xff}), &error));
  EXPECT_NE(error.find("truncated varint"), std::string::npos) << error;
  EXPECT_FALSE(decode_meta(bytes({0x12, 0x05, 'a'}), &error));
  EXPECT_NE(error.find("runs past the end"), std::string::npos) << error;
  EXPECT_FALSE(decode_meta(bytes({0x0b}), &error));  // wire type 3 (group)
  EXPECT_NE(error.find("wire type"), std::string::npos) << error;
  EXPECT_FALSE(decode_meta(bytes({0x1a, 0x02, 0x18, 0x01}), &error));  // control without cmd
  EXPECT_NE(error.find("cmd"), std::string::npos) << error;
}

TEST(PsProtocol, RandomBytesNeverCrashTheDecoder) {
  std::mt19937 rng(1);
  Meta base;
  base.control.cmd = Command::kAddNode;
  base.control.node.push_back(NodeInfo{Role::kWorker, 9, "127.0.0.1", 5000, false, 0});
  base.data_type = {DataType::kUint64, DataType::kChar};
  const std::string valid = encode_meta(base);
  for (int i = 0; i < 20000; ++i) {
    std::string in = valid;
    if (i % 2) {
      in.resize(rng() % 64);
      for (auto& c : in) c = static_cast<char>(rng());
    } else {
      for (int k = 0; k < 3; ++k) in[rng() % in.size()] ^= static_cast<char>(1 << (rng() % 8));
      in.resize(rng() % (in.size() + 1));
    }
    std::string error;
    decode_meta(in, &error);  // must return, not crash or read out of bounds
  }
}

TEST(PsProtocol, IdentitiesAndIdsFollowPsLite) {
  EXPECT_EQ(identity(9), "ps9");
  EXPECT_EQ(parse_identity("ps11"), 11);
  EXPECT_EQ(parse_identity(std::string("\0abcd", 5)), kEmpty);
  EXPECT_EQ(parse_identity("ps1x"), kEmpty);
  EXPECT_EQ(server_rank_to_id(0), 8);
  EXPECT_EQ(server_rank_to_id(2), 12);
  EXPECT_EQ(worker_rank_to_id(0), 9);
  EXPECT_EQ(worker_rank_to_id(3), 15);
  EXPECT_EQ(id_to_rank(15), 3);
  EXPECT_EQ(kScheduler + kServerGroup + kWorkerGroup, 7);
}

}  // namespace
}  // namespace dtrain::ps
