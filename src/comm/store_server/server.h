#pragma once
// dtrain's TCP store server: speaks c10d's TCPStore protocol in both the
// legacy dialect (PyTorch 1.13) and the validate dialect (PyTorch 2.x), one
// dialect per connection, decided by its first bytes (Note [Dialect
// detection] in wire.h), over one shared key space (key_space.h). Torch-free:
// the LibTorch dtrain is built on does not limit which Python clients join.
//
// One thread polls the listening socket and every connection (plain POSIX
// sockets, as c10d's non-libuv backend does). A connection's input and output
// are bounded (WireLimits); a malformed query, an unknown dialect or a client
// that stops reading its replies closes that connection with one log line
// naming the peer; the server keeps serving the others.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "comm/store_server/wire.h"
#include "common/fd.h"

namespace dtrain::store_server {

struct StoreServerOptions {
  /// Port to listen on (every interface, IPv6 and IPv4); 0 picks a free one.
  int port = 0;
  /// Per-connection bounds; the output of a connection may reach twice
  /// max_query_bytes before the connection is closed as not reading.
  WireLimits limits;
  /// Where the one-line reports go (closed connections, unknown dialects);
  /// default: standard error, prefixed "dtrain: store: ".
  std::function<void(const std::string&)> log;
};

/// A running store server. Thread-safe to destroy from any thread; stops and
/// joins its thread on destruction (connected clients see the connection
/// close).
class StoreServer {
 public:
  /// Binds and starts serving. Throws std::runtime_error naming the port when
  /// it cannot listen.
  static std::unique_ptr<StoreServer> start(const StoreServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  class Loop;
  StoreServer(detail::Fd listen_fd, int port, const StoreServerOptions& options);

  int port_;
  detail::Fd wake_read_, wake_write_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace dtrain::store_server
