#include "comm/store_server/key_space.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "common/strings.h"

namespace dtrain::store_server {

// Note [Store semantics]
// What each query does, as c10d's servers do it (classic TCPStoreBackend.cpp
// for the legacy dialect's WATCH_KEY, the libuv backend of 2.x for the rest):
//   SET / MULTI_SET / APPEND store (append concatenates) and wake the
//     connections waiting for the key; no reply.
//   COMPARE_SET replies the value now stored: the desired value when the key
//     was absent and the expected value empty, or when the stored value equals
//     the expected one; the stored value when they differ; the expected value
//     when the key is absent and the expected value is not empty (c10d's own
//     "lie"). Waiters are woken as in 2.x's server.
//   GET replies the value (empty when absent: c10d clients WAIT first).
//   ADD parses the stored value as a decimal integer, adds, stores the decimal
//     text, replies the int64 sum, then wakes waiters.
//   CHECK replies READY when every key exists (or names a non-empty queue).
//   WAIT replies STOP_WAITING at once when CHECK would be READY; otherwise the
//     connection is parked until each missing key is set, and then gets
//     STOP_WAITING. CANCEL_WAIT (2.x clients, after their own timeout)
//     unparks and replies WAIT_CANCELED. A legacy client that times out does
//     not cancel: it gets the STOP_WAITING later, as from c10d's server.
//   WATCH_KEY (legacy) acknowledges with KEY_CALLBACK_REGISTERED; every later
//     change of the key sends that connection type, key, old and new value.
//   QUEUE_PUSH appends to a queue and wakes one waiter; QUEUE_POP replies the
//     queue's length before the pop, then the popped value when it was not
//     empty; QUEUE_LEN replies the length.
//   GETNUMKEYS and LIST_KEYS count or list the keys (not the queues).
//   PING echoes the nonce.
// One key space serves both dialects: a 1.13 client waiting for a key is
// woken by a 2.x client's SET.

namespace {

Bytes i64_reply(std::int64_t v) {
  Bytes b;
  put_i64(&b, v);
  return b;
}

Bytes u8_reply(std::uint8_t v) { return Bytes{v}; }

std::int64_t parse_counter(const std::string& key, const Bytes& value) {
  const std::string text(value.begin(), value.end());
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == text.c_str()) {
    throw QueryError(
        cat("ADD to key '", key, "' whose value '", text.substr(0, 32), "' is not an integer"));
  }
  return v;
}

}  // namespace

void KeySpace::apply(ConnId conn, const Query& q) {
  switch (q.op) {
    case Op::kValidate:
      if (static_cast<std::uint32_t>(q.number) != kValidateMagic) {
        throw QueryError(cat("VALIDATE with magic number ", q.number));
      }
      return;
    case Op::kPing: {
      Bytes b;
      put_u32(&b, static_cast<std::uint32_t>(q.number));
      reply(conn, b);
      return;
    }
    case Op::kSet:
      set(q.keys[0], q.values[0]);
      return;
    case Op::kMultiSet:
      for (std::size_t i = 0; i < q.keys.size(); ++i) set(q.keys[i], q.values[i]);
      return;
    case Op::kCompareSet: {
      const std::string& key = q.keys[0];
      const Bytes& expected = q.values[0];
      const Bytes& desired = q.values[1];
      Bytes out;
      auto it = values_.find(key);
      if (it == values_.end()) {
        if (expected.empty()) {
          set(key, desired);
          put_bytes(&out, desired);
        } else {
          put_bytes(&out, expected);
        }
      } else {
        if (it->second == expected) {
          Bytes old = it->second;
          it->second = desired;
          notify_watchers(key, kKeyUpdated, old, desired);
          wake(key);
        }
        put_bytes(&out, values_[key]);
      }
      reply(conn, out);
      return;
    }
    case Op::kGet: {
      Bytes out;
      auto it = values_.find(q.keys[0]);
      if (it == values_.end()) {
        put_bytes(&out, nullptr, 0);
      } else {
        put_bytes(&out, it->second);
      }
      reply(conn, out);
      return;
    }
    case Op::kMultiGet: {
      Bytes out;
      for (const auto& key : q.keys) {
        auto it = values_.find(key);
        if (it == values_.end()) {
          put_bytes(&out, nullptr, 0);
        } else {
          put_bytes(&out, it->second);
        }
      }
      reply(conn, out);
      return;
    }
    case Op::kAdd: {
      const std::string& key = q.keys[0];
      std::int64_t sum = q.number;
      auto it = values_.find(key);
      const bool created = it == values_.end();
      Bytes old;
      if (!created) {
        old = it->second;
        if (__builtin_add_overflow(sum, parse_counter(key, it->second), &sum)) {
          throw QueryError(
              cat("ADD of ", q.number, " to key '", key, "' overflows a 64-bit counter"));
        }
      }
      const std::string text = std::to_string(sum);
      Bytes value(text.begin(), text.end());
      values_[key] = value;
      reply(conn, i64_reply(sum));
      wake(key);
      notify_watchers(key, created ? kKeyCreated : kKeyUpdated, old, value);
      return;
    }
    case Op::kAppend: {
      const std::string& key = q.keys[0];
      auto it = values_.find(key);
      const bool created = it == values_.end();
      if (created) {
        values_[key] = q.values[0];
      } else {
        it->second.insert(it->second.end(), q.values[0].begin(), q.values[0].end());
      }
      wake(key);
      notify_watchers(key, created ? kKeyCreated : kKeyAppended, Bytes{}, q.values[0]);
      return;
    }
    case Op::kCheck: {
      const bool all =
          std::all_of(q.keys.begin(), q.keys.end(), [&](const std::string& k) { return ready(k); });
      reply(conn, u8_reply(all ? kCheckReady : kCheckNotReady));
      return;
    }
    case Op::kWait:
      wait(conn, q.keys);
      return;
    case Op::kCancelWait:
      cancel_wait(conn);
      reply(conn, u8_reply(kWaitCanceled));
      return;
    case Op::kNumKeys:
      reply(conn, i64_reply(static_cast<std::int64_t>(values_.size())));
      return;
    case Op::kDeleteKey: {
      const std::string& key = q.keys[0];
      auto it = values_.find(key);
      std::int64_t erased = 0;
      if (it != values_.end()) {
        Bytes old = std::move(it->second);
        values_.erase(it);
        erased = 1;
        notify_watchers(key, kKeyDeleted, old, Bytes{});
      }
      reply(conn, i64_reply(erased));
      return;
    }
    case Op::kWatchKey:
      watchers_[q.keys[0]].push_back(conn);
      reply(conn, u8_reply(kKeyCallbackRegistered));
      return;
    case Op::kQueuePush:
      queues_[q.keys[0]].push_back(q.values[0]);
      wake_one(q.keys[0]);
      return;
    case Op::kQueuePop: {
      auto& queue = queues_[q.keys[0]];
      Bytes out;
      put_i64(&out, static_cast<std::int64_t>(queue.size()));
      if (!queue.empty()) {
        put_bytes(&out, queue.front());
        queue.pop_front();
      }
      if (queue.empty()) queues_.erase(q.keys[0]);
      reply(conn, out);
      return;
    }
    case Op::kQueueLen: {
      auto it = queues_.find(q.keys[0]);
      reply(conn,
            i64_reply(it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size())));
      return;
    }
    case Op::kListKeys: {
      // Sorted, so that the answer does not depend on hashing.
      std::vector<const std::string*> keys;
      keys.reserve(values_.size());
      for (const auto& kv : values_) keys.push_back(&kv.first);
      std::sort(keys.begin(), keys.end(),
                [](const std::string* a, const std::string* b) { return *a < *b; });
      Bytes out;
      put_i64(&out, static_cast<std::int64_t>(keys.size()));
      for (const auto* k : keys) put_string(&out, *k);
      reply(conn, out);
      return;
    }
  }
}

void KeySpace::set(const std::string& key, Bytes value) {
  auto it = values_.find(key);
  const bool created = it == values_.end();
  Bytes old;
  if (!created) old = std::move(it->second);
  Bytes& slot = values_[key];
  slot = std::move(value);
  wake(key);
  if (!watchers_.empty()) notify_watchers(key, created ? kKeyCreated : kKeyUpdated, old, slot);
}

bool KeySpace::ready(const std::string& key) const {
  if (values_.count(key) != 0) return true;
  auto it = queues_.find(key);
  return it != queues_.end() && !it->second.empty();
}

void KeySpace::wait(ConnId conn, const std::vector<std::string>& keys) {
  if (std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return ready(k); })) {
    reply(conn, u8_reply(kStopWaiting));
    return;
  }
  std::size_t missing = 0;
  for (const auto& key : keys) {
    if (values_.count(key) == 0) {
      waiting_[key].push_back(conn);
      ++missing;
    }
  }
  awaited_[conn] = missing;
}

void KeySpace::wake(const std::string& key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  std::vector<ConnId> conns = std::move(it->second);
  waiting_.erase(it);
  for (ConnId c : conns) {
    auto a = awaited_.find(c);
    if (a == awaited_.end()) continue;
    if (--a->second == 0) {
      awaited_.erase(a);
      reply(c, u8_reply(kStopWaiting));
    }
  }
}

void KeySpace::wake_one(const std::string& key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  auto& conns = it->second;
  for (auto c = conns.begin(); c != conns.end(); ++c) {
    auto a = awaited_.find(*c);
    if (a == awaited_.end() || a->second != 1) continue;
    const ConnId woken = *c;
    conns.erase(c);
    awaited_.erase(a);
    reply(woken, u8_reply(kStopWaiting));
    break;
  }
  if (conns.empty()) waiting_.erase(it);
}

void KeySpace::notify_watchers(const std::string& key, std::uint8_t type, const Bytes& old_value,
                               const Bytes& new_value) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  Bytes b;
  put_u8(&b, type);
  put_string(&b, key);
  put_bytes(&b, old_value);
  put_bytes(&b, new_value);
  for (ConnId c : it->second) reply(c, b);
}

void KeySpace::cancel_wait(ConnId conn) {
  if (awaited_.erase(conn) == 0) return;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), conn), v.end());
    it = v.empty() ? waiting_.erase(it) : std::next(it);
  }
}

void KeySpace::drop(ConnId conn) {
  cancel_wait(conn);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), conn), v.end());
    it = v.empty() ? watchers_.erase(it) : std::next(it);
  }
}

}  // namespace dtrain::store_server
