#pragma once
// The state behind dtrain's store server: one key space shared by every
// connection whatever its dialect, with the waits, legacy watchers and 2.x
// queues that c10d's TCPStore servers keep. Torch-free; not thread-safe (the
// server's one thread owns it).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/store_server/wire.h"

namespace dtrain::store_server {

using ConnId = std::uint64_t;

/// A query that cannot be applied (ADD to a value that is not an integer, a
/// wrong VALIDATE magic): the server closes that connection.
class QueryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Applies decoded queries with c10d's semantics (Note [Store semantics] in
/// key_space.cpp). Replies and wake-ups are handed to `send` as they arise:
/// send(conn, bytes) appends bytes to that connection's output, in order.
class KeySpace {
 public:
  using Send = std::function<void(ConnId, const Bytes&)>;
  explicit KeySpace(Send send) : send_(std::move(send)) {}

  /// Applies `q` from connection `conn`. Throws QueryError (state unchanged
  /// for the failing key).
  void apply(ConnId conn, const Query& q);
  /// Forgets a closed connection's waits and watches.
  void drop(ConnId conn);

  std::size_t num_keys() const { return values_.size(); }
  /// Connections with a pending WAIT (for tests).
  std::size_t num_waiting() const { return awaited_.size(); }

 private:
  void set(const std::string& key, Bytes value);
  void wake(const std::string& key);
  void wake_one(const std::string& key);
  void notify_watchers(const std::string& key, std::uint8_t type, const Bytes& old_value,
                       const Bytes& new_value);
  bool ready(const std::string& key) const;
  void wait(ConnId conn, const std::vector<std::string>& keys);
  void cancel_wait(ConnId conn);
  void reply(ConnId conn, const Bytes& b) { send_(conn, b); }

  Send send_;
  std::unordered_map<std::string, Bytes> values_;
  std::unordered_map<std::string, std::deque<Bytes>> queues_;
  /// key -> connections waiting for it (in arrival order).
  std::unordered_map<std::string, std::vector<ConnId>> waiting_;
  /// connection -> keys it still waits for.
  std::unordered_map<ConnId, std::size_t> awaited_;
  /// key -> legacy connections watching it (WATCH_KEY).
  std::unordered_map<std::string, std::vector<ConnId>> watchers_;
};

}  // namespace dtrain::store_server
