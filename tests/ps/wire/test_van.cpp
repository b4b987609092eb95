// The Van's buffer ownership (Note [Copies per hop] in src/ps/wire/van.cpp): big
// frames leave from their owner's memory and are released once sent;
// received frames own their bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "ps/wire/van.h"

namespace dtrain::ps {
namespace {

using std::chrono::milliseconds;

// A message with a key, `n` floats 0, 1, 2, ... shared from `owner`, and
// their byte length, as a worker's push is.
Message push_of(const std::shared_ptr<std::vector<float>>& owner) {
  Message m;
  m.meta.request = true;
  m.meta.push = true;
  m.meta.timestamp = 1;
  const uint64_t key = 7;
  const int32_t len = static_cast<int32_t>(owner->size() * sizeof(float));
  m.add_data(&key, 1, DataType::kUint64);
  m.add_frame(Frame::share(owner, owner->data(), owner->size() * sizeof(float)), DataType::kChar);
  m.add_data(&len, 1, DataType::kInt32);
  return m;
}

std::vector<float> floats(const Frame& f) {
  std::vector<float> v(f.size() / sizeof(float));
  std::memcpy(v.data(), f.data(), f.size());
  return v;
}

TEST(PsVan, SharedFramesArriveIntactAndTheirOwnerIsReleasedOnceSent) {
  Van sender, receiver;
  const int port = receiver.bind("127.0.0.1", 0);
  sender.connect(8, "127.0.0.1", port, 9);
  std::vector<float> want(1 << 18);  // 1 MB: above the copying threshold
  std::iota(want.begin(), want.end(), 0.0f);
  auto owner = std::make_shared<std::vector<float>>(want);
  std::weak_ptr<std::vector<float>> watch = owner;
  Message m = push_of(owner);
  owner.reset();  // from now on only the message (and then ZeroMQ) holds it
  ASSERT_TRUE(sender.send(8, m));
  m = Message();

  std::optional<Received> got;
  for (int i = 0; i < 100 && !got; ++i) got = receiver.recv(milliseconds(100));
  ASSERT_TRUE(got) << "nothing arrived within 10 s";
  ASSERT_TRUE(got->error.empty()) << got->error;
  EXPECT_EQ(got->msg.meta.sender, 9);
  ASSERT_EQ(got->msg.data.size(), 3u);
  EXPECT_EQ(floats(got->msg.data[1]), want);
  EXPECT_EQ(got->msg.meta.data_size, static_cast<int>(4 + 8 + want.size() * 4));
  EXPECT_EQ(sender.bytes_sent(),
            encode_meta(got->msg.meta).size() + 8 + want.size() * sizeof(float) + 4);

  // ZeroMQ drops its reference once the bytes have left (bounded wait).
  for (int i = 0; i < 1000 && !watch.expired(); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(watch.expired()) << "the sent buffer is still held 10 s after it arrived";

  // A received frame owns its bytes: later messages do not disturb them.
  Frame kept = got->msg.data[1];
  auto other = std::make_shared<std::vector<float>>(want.size(), -1.0f);
  ASSERT_TRUE(sender.send(8, push_of(other)));
  std::optional<Received> second;
  for (int i = 0; i < 100 && !second; ++i) second = receiver.recv(milliseconds(100));
  ASSERT_TRUE(second);
  got.reset();
  EXPECT_EQ(floats(kept), want);
  EXPECT_EQ(floats(second->msg.data.at(1)), *other);
}

TEST(PsVan, FramesWithoutAnOwnerAreCopiedWhenSent) {
  Van sender, receiver;
  const int port = receiver.bind("127.0.0.1", 0);
  sender.connect(8, "127.0.0.1", port, 9);
  std::vector<float> values(1 << 16, 2.5f);
  Message m;
  m.meta.request = true;
  m.add_frame(Frame::share(nullptr, values.data(), values.size() * 4), DataType::kChar);
  ASSERT_TRUE(sender.send(8, m));
  m = Message();
  std::fill(values.begin(), values.end(), 0.0f);  // the borrowed bytes change after send()
  std::optional<Received> got;
  for (int i = 0; i < 100 && !got; ++i) got = receiver.recv(milliseconds(100));
  ASSERT_TRUE(got);
  EXPECT_EQ(floats(got->msg.data.at(0)), std::vector<float>(values.size(), 2.5f));
}

}  // namespace
}  // namespace dtrain::ps
