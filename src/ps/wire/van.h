#pragma once
// ZeroMQ transport speaking ps-lite's framing (Note [ps-lite wire format]).
//
// One ROUTER socket receives from everyone; one DEALER per peer sends, with
// identity "ps<my id>" once the scheduler has assigned ids. Thread safety:
// recv() must be called from one thread only (the node's receive loop);
// send(), connect() and disconnect() may be called from any thread (they
// serialise on an internal mutex and never wait on the network: ZeroMQ queues).

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ps/wire/protocol.h"

namespace dtrain::ps {

/// A received message, or why one could not be decoded.
struct Received {
  Message msg;
  std::string error;  // non-empty: malformed (msg.meta.sender is still set)
};

class Van {
 public:
  Van();
  ~Van();
  Van(const Van&) = delete;
  Van& operator=(const Van&) = delete;

  /// Binds the ROUTER to tcp://host:port (port 0: an ephemeral port) and
  /// returns the port. Throws StoreError naming host:port when it is taken.
  int bind(const std::string& host, int port);

  /// Opens (or reopens) the DEALER to node `peer_id` at host:port, with
  /// identity "ps<my_id>" (none when my_id is kEmpty). Never blocks: ZeroMQ
  /// connects, and retries, in the background. `drop_queued`: messages still
  /// queued on a DEALER this one replaces are discarded instead of flushed
  /// (its peer died; Note [Node recovery]).
  void connect(int peer_id, const std::string& host, int port, int my_id, bool drop_queued = false);

  /// Queues `msg` to node `peer_id`. False when there is no DEALER to it.
  bool send(int peer_id, const Message& msg);

  /// Waits up to `timeout` for a message. nullopt on timeout.
  std::optional<Received> recv(std::chrono::milliseconds timeout);

  /// Bytes sent so far (frames, without identities).
  uint64_t bytes_sent() const;

  /// How long closing waits to flush queued messages (Note [No hang at exit]).
  void set_linger(int ms) { linger_ms_ = ms; }
  /// SO_SNDBUF of the connections made after this call (Note [Send
  /// buffers] in van.cpp); 0 (the default): the kernel's autotuning.
  void set_send_buffer(int bytes) { send_buffer_ = bytes; }

 private:
  void* context_ = nullptr;
  void* receiver_ = nullptr;
  mutable std::mutex mu_;  // guards senders_ and bytes_sent_
  std::map<int, void*> senders_;
  uint64_t bytes_sent_ = 0;
  std::atomic<int> linger_ms_{2000};
  std::atomic<int> send_buffer_{0};
};

}  // namespace dtrain::ps
